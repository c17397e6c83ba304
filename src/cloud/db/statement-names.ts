/**
 * Which statements the PostgreSQL adapter prepares. A named statement is parsed and planned
 * once per connection instead of on every call, which more than doubles the rate of the
 * short lookups the device endpoints make. A name is given to a text the second time it is
 * seen, so one-off shapes ($filter trees, IN lists of every length) do not fill the table,
 * and never to more than `maxNames` texts, so each connection holds a bounded number of
 * plans. A name is never reused for another text: the driver keys its statements by name.
 */
export class StatementNames {
  private readonly names = new Map<string, string>();
  private readonly seenOnce = new Set<string>();

  constructor(private readonly limits: { readonly maxNames: number; readonly maxSeen: number } = { maxNames: 500, maxSeen: 5_000 }) {}

  /** The name to prepare `sql` under, or undefined to run it unnamed. */
  nameOf(sql: string): string | undefined {
    const named = this.names.get(sql);
    if (named !== undefined || this.names.size >= this.limits.maxNames) return named;
    if (!this.seenOnce.has(sql)) {
      if (this.seenOnce.size >= this.limits.maxSeen) this.seenOnce.clear();
      this.seenOnce.add(sql);
      return undefined;
    }
    this.seenOnce.delete(sql);
    const name = `fleetlab_${this.names.size}`;
    this.names.set(sql, name);
    return name;
  }
}
