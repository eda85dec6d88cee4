import { unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { ApiKeyVerifier } from "../server/interceptors.js";
import type { ApiKeyCredential, ApiKeyStore } from "./api-key-store.js";
import { createKeyCache } from "./key-cache.js";
import { keyMatches, parseKey, unknownKeyHash } from "./key-format.js";

export interface ApiKeyClock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export interface ApiKeyVerifierDeps {
  store: Pick<ApiKeyStore, "findByPrefix" | "touch">;
  clock: ApiKeyClock;
  log: Logger;
  /** How long a looked-up key is remembered (default 1000 ms): revocation's reach elsewhere. */
  cacheTtlMs?: number;
  /** last_used_at is written at most this often per key (default 60 s). */
  touchEveryMs?: number;
}

/** The verifier, plus what this process's own changes call so that they apply at once. */
export interface LocalApiKeyVerifier extends ApiKeyVerifier {
  /** Drops what is remembered of the key with this prefix (after a revocation here). */
  forget(prefix: string): void;
}

const invalid = (message: string) => unauthenticated("API_KEY_INVALID", message);

/**
 * Checks `X-API-Key` values: the form, the row found by the prefix, the secret (its SHA-256
 * compared in constant time), then revocation and expiry. Which of "no such prefix" and
 * "wrong secret" it was is never said; "revoked" and "expired" are said only to a caller
 * who holds the key. The key is never logged.
 */
export function createApiKeyVerifier(deps: ApiKeyVerifierDeps): LocalApiKeyVerifier {
  const { store, clock, log } = deps;
  const touchEveryMs = deps.touchEveryMs ?? 60_000;
  const cache = createKeyCache<ApiKeyCredential | undefined>((p) => store.findByPrefix(p), {
    ttlMs: deps.cacheTtlMs ?? 1_000,
    now: () => clock.now(),
  });
  /** When this process last wrote each key's last_used_at. */
  const touched = new Map<string, number>();

  function touch(id: string, now: number): void {
    const last = touched.get(id);
    if (last !== undefined && now - last < touchEveryMs) return;
    if (touched.size >= 10_000) touched.clear();
    touched.set(id, now);
    store.touch(id, new Date(now)).catch((err: unknown) => {
      log.warn(
        { api_key_id: id, error: err instanceof Error ? err.message : String(err) },
        "could not record an API key's last use",
      );
    });
  }

  return {
    async verify(key) {
      const parsed = parseKey(key);
      if (parsed === undefined) throw invalid("X-API-Key is not a Traitgate API key (tgk_…)");
      const credential = await cache.get(parsed.prefix);
      // Unknown prefixes are compared too, so both refusals take the same work.
      const matches = keyMatches(key, credential?.secretHash ?? unknownKeyHash);
      if (credential === undefined || !matches) {
        log.debug({ api_key_prefix: parsed.prefix }, "API key refused: unknown or wrong secret");
        throw invalid("API key is unknown or not valid");
      }
      const now = clock.now();
      if (credential.revokedAt !== null) throw invalid("API key was revoked");
      if (credential.expiresAt !== null && credential.expiresAt.getTime() <= now) {
        throw invalid("API key expired");
      }
      touch(credential.id, now);
      return { id: credential.id, scopes: credential.scopes, expiresAt: credential.expiresAt };
    },
    forget(prefix) {
      cache.forget(prefix);
    },
  };
}
