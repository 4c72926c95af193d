/**
 * "Used once" keys shared by every worker of the process: consumed SSO login states and SAML
 * assertion IDs (replay). One process-wide store answers each claim, so a state or assertion
 * replayed against another worker is refused exactly as against the same one. A single-worker
 * server keeps the store in its own memory; workers ask the supervisor, which holds it.
 *
 * @module
 */
import { ReplayCache } from "../sso/saml_verify.ts";

/** Claims keys once per namespace until they expire. */
export interface OnceStore {
  /** True the first time `key` is claimed in `ns` (until `expiresAt`, ms); false afterwards. */
  claim(ns: string, key: string, expiresAt: number): Promise<boolean>;
}

/** Keys remembered per namespace at most (the oldest are forgotten first). */
const MAX_PER_NAMESPACE = 100_000;

/** An in-memory store (bounded per namespace). */
export class LocalOnce implements OnceStore {
  readonly #caches = new Map<string, ReplayCache>();

  /** Claims synchronously (the supervisor answers workers with it). */
  claimNow(ns: string, key: string, expiresAt: number): boolean {
    let cache = this.#caches.get(ns);
    if (!cache) this.#caches.set(ns, cache = new ReplayCache(MAX_PER_NAMESPACE));
    return cache.remember(key, expiresAt);
  }

  /** {@link OnceStore.claim} over {@link claimNow}. */
  claim(ns: string, key: string, expiresAt: number): Promise<boolean> {
    return Promise.resolve(this.claimNow(ns, key, expiresAt));
  }
}

let store: OnceStore = new LocalOnce();

/** Replaces the process's store (a worker installs one that asks its supervisor). */
export function setOnceStore(s: OnceStore): void {
  store = s;
}

/** Claims `key` in `ns` once (see {@link OnceStore.claim}). */
export function claimOnce(ns: string, key: string, expiresAt: number): Promise<boolean> {
  return store.claim(ns, key, expiresAt);
}
