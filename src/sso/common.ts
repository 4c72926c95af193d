/**
 * What OIDC and SAML entries share: public URLs, the callback function's name, lazy resolution
 * with backoff (an entry whose provider is down answers 503 SSO_NOT_READY and retries on the
 * next login), and logging a protocol failure without tokens or assertions.
 */
import type { Config } from "../config/load.ts";
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import { metrics } from "../observe/metrics.ts";

/**
 * `<scheme>://<host>` of an entry: the entry's `public_host`, else `http.public_host`; the scheme
 * is `http.public_scheme`, else http for localhost/127.0.0.1/[::1] and https otherwise.
 * Undefined when no public host is configured.
 */
export function publicOrigin(cfg: Config, entryHost: string | undefined): string | undefined {
  const host = entryHost ?? cfg.http.public_host;
  if (!host) return undefined;
  const bare = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.split(":")[0];
  const local = bare === "localhost" || bare === "127.0.0.1" || bare === "[::1]";
  const scheme = cfg.http.public_scheme ?? (local ? "http" : "https");
  return `${scheme}://${host}`;
}

/** The entry's callback function: its own `callback_function`, else `http.functions.sso_callback`. */
export function callbackFunction(cfg: Config, own: string | undefined): string | undefined {
  return own ?? cfg.http.functions.sso_callback;
}

/**
 * The public origin and callback function an entry needs before it can resolve; throws (a
 * misconfigured entry stays unresolved: 503, reason logged) when either is missing.
 */
export function entryBasics(
  cfg: Config,
  entry: { public_host?: string; callback_function?: string },
): { origin: string; fn: string } {
  const origin = publicOrigin(cfg, entry.public_host);
  if (!origin) throw new Error("http.public_host (or the entry's public_host) is not set");
  const fn = callbackFunction(cfg, entry.callback_function);
  if (!fn) {
    throw new Error("no callback function (callback_function or http.functions.sso_callback)");
  }
  return { origin, fn };
}

/** When a {@link Lazy} value should be loaded again. */
export interface LazyTiming<T> {
  /** Milliseconds after a successful load until the next one (periodic refresh); none: never. */
  refreshIn?: (value: T) => number | undefined;
  /** When the value stops being usable (ms since the epoch); after it, 503 until reloaded. */
  expiresAt?: (value: T) => number | undefined;
}

/**
 * A value resolved at startup and, after a failure, again on demand with exponential backoff
 * (1 s doubling to 60 s). `get()` answers 503 SSO_NOT_READY while it is unresolved. A resolved
 * value is loaded again by {@link refresh} (reload), periodically when `timing.refreshIn` says so,
 * and by {@link refreshIfOlder}; a failed refresh keeps the previous value (retrying with the
 * same backoff), unless it has expired.
 */
export class Lazy<T> {
  #value: T | null = null;
  #pending: Promise<T | null> | null = null;
  #nextTry = 0;
  #delay = 1000;
  /** When the last load started (ms). */
  #lastTry = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  /** `load` resolves the value or throws (the reason is logged, never the response). */
  constructor(
    readonly label: string,
    readonly load: () => Promise<T>,
    readonly timing: LazyTiming<T> = {},
  ) {}

  /** Starts a resolution (startup). */
  start(): Promise<T | null> {
    return this.#attempt();
  }

  #schedule(ms: number | undefined): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (ms === undefined || this.#stopped) return;
    this.#timer = setTimeout(() => void this.#attempt(), Math.max(ms, 1000));
    Deno.unrefTimer(this.#timer);
  }

  #attempt(): Promise<T | null> {
    if (this.#pending) return this.#pending;
    const p: Promise<T | null> = this.#run().finally(() => {
      if (this.#pending === p) this.#pending = null;
    });
    this.#pending = p;
    return p;
  }

  async #run(): Promise<T | null> {
    this.#lastTry = Date.now();
    try {
      const v = await this.load();
      const first = this.#value === null;
      this.#value = v;
      this.#delay = 1000;
      log.info(first ? "sso {entry}: ready" : "sso {entry}: refreshed", { entry: this.label });
      this.#schedule(this.timing.refreshIn?.(v));
      return v;
    } catch (e) {
      this.#nextTry = Date.now() + this.#delay;
      const keeping = this.#value !== null;
      log.warn(
        keeping
          ? "sso {entry}: refresh failed ({reason}); keeping the previous one, retrying in {ms} ms"
          : "sso {entry}: not ready ({reason}); retrying on the next login after {ms} ms",
        { entry: this.label, reason: reason(e), ms: this.#delay },
      );
      if (keeping) this.#schedule(this.#delay);
      this.#delay = Math.min(this.#delay * 2, 60_000);
      return null;
    }
  }

  /** Loads the value again now (reload); resolves with whether a new value is in place. */
  async refresh(): Promise<boolean> {
    if (this.#pending) await this.#pending;
    return (await this.#attempt()) !== null;
  }

  /**
   * Loads the value again when the last load started more than `ms` ago (an IdP key the value
   * does not know); resolves with whether a new value is in place.
   */
  async refreshIfOlder(ms: number): Promise<boolean> {
    if (this.#pending) return (await this.#pending) !== null;
    if (Date.now() - this.#lastTry < ms) return false;
    return (await this.#attempt()) !== null;
  }

  #usable(): T | null {
    const v = this.#value;
    if (v === null) return null;
    const until = this.timing.expiresAt?.(v);
    return until !== undefined && until <= Date.now() ? null : v;
  }

  /** The value; retries when due, 503 SSO_NOT_READY while unresolved (or expired). */
  async get(): Promise<T> {
    const now = this.#usable();
    if (now) return now;
    if (this.#pending) await this.#pending;
    else if (Date.now() >= this.#nextTry) await this.#attempt();
    const v = this.#usable();
    if (v) return v;
    throw new SvcError("SSO_NOT_READY", `the identity provider of ${this.label} is not ready yet`);
  }

  /** Stops periodic refreshes (shutdown). */
  stop(): void {
    this.#stopped = true;
    this.#schedule(undefined);
  }
}

/** A short, token-free description of an error for logs. */
export function reason(e: unknown): string {
  const err = e as { code?: string; message?: string; cause?: { message?: string } };
  const msg = String(err?.message ?? e).split("\n")[0].slice(0, 200);
  const cause = err?.cause?.message ? ` (${String(err.cause.message).slice(0, 160)})` : "";
  return `${err?.code ? `${err.code}: ` : ""}${msg}${cause}`;
}

/** Logs a refused login with the entry and reason, and returns the error to throw. */
export function refuse(
  entry: string,
  code:
    | "SSO_BAD_REQUEST"
    | "SSO_BAD_STATE"
    | "SSO_BAD_NONCE"
    | "SSO_TOKEN_EXCHANGE_FAILED"
    | "SSO_NO_ID_TOKEN"
    | "SSO_INVALID_ID_TOKEN"
    | "SSO_USERINFO_FAILED"
    | "SSO_SAML_INVALID_RESPONSE"
    | "SSO_INTERNAL"
    | "HTTP_BODY_TOO_LARGE",
  message: string,
  why?: unknown,
): SvcError {
  metrics.ssoLogins.inc({ provider: entry, outcome: code });
  log.warn("sso {entry}: login refused, {code}: {reason}", {
    entry,
    code,
    reason: why === undefined ? message : reason(why),
  });
  return new SvcError(code, message);
}
