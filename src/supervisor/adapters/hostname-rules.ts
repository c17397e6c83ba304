/**
 * systemd's hostname_is_valid() (src/basic/hostname-util.c, flags 0), the rule hostnamed
 * applies to SetStaticHostname and SetHostname. Checking it before the D-Bus call lets a bad
 * name be a 400 with a clear message instead of a host error.
 */

/** Linux HOST_NAME_MAX. */
export const HOSTNAME_MAX_LENGTH = 64;

const LDH = /^[A-Za-z0-9-]$/;

export function isValidHostname(name: string): boolean {
  if (name.length === 0 || name.length > HOSTNAME_MAX_LENGTH) return false;
  // Walk like systemd: no leading dot, no empty label, no hyphen at a label's edge.
  let afterDot = true;
  let afterHyphen = true;
  for (const c of name) {
    if (c === '.') {
      if (afterDot || afterHyphen) return false;
      afterDot = true;
      afterHyphen = false;
    } else if (c === '-') {
      if (afterDot) return false;
      afterDot = false;
      afterHyphen = true;
    } else {
      if (!LDH.test(c)) return false;
      afterDot = false;
      afterHyphen = false;
    }
  }
  // A trailing dot is only allowed with VALID_HOSTNAME_TRAILING_DOT, which hostnamed does not pass.
  return !afterDot && !afterHyphen;
}
