/**
 * argv as one POSIX shell word list, for the places that must hand a command to a shell on
 * another machine (SSH, a board's config): each word single-quoted, so nothing is expanded.
 * Here, below both the harness and the emulated board, because both need it.
 */
export function shellQuote(argv: readonly string[]): string {
  return argv.map((word) => `'${word.replace(/'/g, `'\\''`)}'`).join(' ');
}
