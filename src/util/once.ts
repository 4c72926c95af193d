/**
 * "Used once" keys: consumed SSO login states and SAML assertion IDs (replay). With `sso.store`
 * set, every process and worker claims them in one PostgreSQL table (src/sso/store.ts), so a
 * replay is refused after a restart and on another replica. Without it, one store in the
 * process's memory answers each claim: a single-worker server keeps it in its own memory, workers
 * ask the supervisor, which holds it; a replay against another worker is refused exactly as
 * against the same one, but a restart or another replica forgets.
 *
 * @module
 */
import { SvcError } from "../svc_error.ts";

/** Claims keys once per namespace until they expire. */
export interface OnceStore {
  /**
   * True the first time `key` is claimed in `ns` (until `expiresAt`, ms); false afterwards.
   * Rejects with 503 SSO_NOT_READY when the claim cannot be recorded (store full or unreachable).
   */
  claim(ns: string, key: string, expiresAt: number): Promise<boolean>;
}

/** Keys remembered per namespace at most by the in-memory store. */
export const MAX_PER_NAMESPACE = 100_000;

/** The refusal when a claim cannot be recorded (store full or unreachable): 503. */
export function storeFull(): SvcError {
  return new SvcError("SSO_NOT_READY", "the login cannot be recorded right now; try again later");
}

/**
 * An in-memory store, bounded per namespace. An unexpired key is never forgotten (that would
 * let its replay through): when a namespace is full of unexpired keys, a claim is refused with
 * 503 SSO_NOT_READY until some expire.
 */
export class LocalOnce implements OnceStore {
  readonly #caches = new Map<string, Map<string, number>>();

  /** `max`: keys per namespace. */
  constructor(readonly max = MAX_PER_NAMESPACE) {}

  /** Claims synchronously (the supervisor answers workers with it); null when full. */
  claimNow(ns: string, key: string, expiresAt: number, now = Date.now()): boolean | null {
    let seen = this.#caches.get(ns);
    if (!seen) this.#caches.set(ns, seen = new Map());
    const prev = seen.get(key);
    if (prev !== undefined && prev > now) return false;
    if (prev === undefined && seen.size >= this.max) {
      for (const [k, exp] of seen) if (exp <= now) seen.delete(k);
      if (seen.size >= this.max) return null;
    }
    seen.delete(key);
    seen.set(key, Number.isFinite(expiresAt) ? expiresAt : now + 3600_000);
    return true;
  }

  /** {@link OnceStore.claim} over {@link claimNow}. */
  claim(ns: string, key: string, expiresAt: number): Promise<boolean> {
    const ok = this.claimNow(ns, key, expiresAt);
    return ok === null ? Promise.reject(storeFull()) : Promise.resolve(ok);
  }
}

let store: OnceStore = new LocalOnce();

/** The process's store. */
export function onceStore(): OnceStore {
  return store;
}

/** Replaces the process's store (a worker installs one that asks its supervisor). */
export function setOnceStore(s: OnceStore): void {
  store = s;
}

/** Claims `key` in `ns` once (see {@link OnceStore.claim}). */
export function claimOnce(ns: string, key: string, expiresAt: number): Promise<boolean> {
  return store.claim(ns, key, expiresAt);
}
