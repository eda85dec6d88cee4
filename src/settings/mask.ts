/**
 * Masking of secret settings. A secret is returned with its secret parts replaced by
 * "****": the password of a URL (`postgres://app:****@db/x`) and credential query
 * parameters; a value that is not a URL is "****" as a whole.
 */

export const secretMask = "****";

const userinfoPassword = /^([a-z][a-z0-9+.-]*:\/\/[^:@/?#]*):[^@/?#]*@/i;
const credentialParameter =
  /([?&](?:password|sslpassword|sslkey|secret|token|api_key|apikey)=)[^&#]*/gi;
const urlLike = /^[a-z][a-z0-9+.-]*:\/\//i;

/** The value as clients see it. */
export function maskSecret(value: string): string {
  if (value === "") return "";
  if (!urlLike.test(value)) return secretMask;
  return value
    .replace(userinfoPassword, `$1:${secretMask}@`)
    .replace(credentialParameter, `$1${secretMask}`);
}

/** A posted value that is the mask of the stored one (or the bare mask): "leave it as it is". */
export function isMaskedEcho(posted: string, stored: string): boolean {
  if (stored === "") return false;
  return posted === secretMask || posted === maskSecret(stored);
}

/** A posted secret still holding the mask: a client editing a masked value, refused. */
export const containsMask = (posted: string): boolean => posted.includes(secretMask);
