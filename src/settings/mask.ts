/**
 * Masking of secret settings. A secret is returned with its secret parts replaced by
 * "****": the password of a URL (`postgres://app:****@db/x`) and credential query
 * parameters; a value that is not a URL is "****" as a whole.
 */

export const secretMask = "****";

const credentialParameter =
  /([?&](?:password|sslpassword|sslkey|secret|token|api_key|apikey)=)[^&#]*/gi;
const urlLike = /^[a-z][a-z0-9+.-]*:\/\//i;

/**
 * The value as clients see it. Fails closed: a URL whose credentials cannot be told apart
 * unambiguously (an `@`, `/`, `?` or `#` inside the password, several `@`) is masked whole.
 */
export function maskSecret(value: string): string {
  if (value === "") return "";
  if (!urlLike.test(value)) return secretMask;
  const start = value.indexOf("://") + 3;
  const rest = value.slice(start);
  const authorityEnd = rest.search(/[/?#]/);
  const authority = authorityEnd < 0 ? rest : rest.slice(0, authorityEnd);
  const ats = authority.split("@").length - 1;
  // An "@" after the authority means the password holds a / ? or #: no safe split.
  if (ats > 1 || (ats === 0 && rest.includes("@"))) return secretMask;
  let masked = value;
  if (ats === 1) {
    const userinfo = authority.slice(0, authority.indexOf("@"));
    const colon = userinfo.indexOf(":");
    if (colon >= 0) {
      masked =
        value.slice(0, start) +
        `${userinfo.slice(0, colon)}:${secretMask}` +
        value.slice(start + userinfo.length);
    }
  }
  return masked.replace(credentialParameter, `$1${secretMask}`);
}

/** A posted value that is the mask of the stored one (or the bare mask): "leave it as it is". */
export function isMaskedEcho(posted: string, stored: string): boolean {
  if (stored === "") return false;
  return posted === secretMask || posted === maskSecret(stored);
}

/** A posted secret still holding the mask: a client editing a masked value, refused. */
export const containsMask = (posted: string): boolean => posted.includes(secretMask);
