/**
 * JWT session handling: verifying, minting and renewing the session cookie.
 *
 * Pure module: no HTTP framework and no database. The `role` claim of a
 * session names the database role the request runs as.
 *
 * @module
 */
import { jwtVerify, SignJWT } from "jose";
import { BoundedCache } from "../util/bounded_cache.ts";
import { cookieValues, setCookie } from "./cookies.ts";

/** HMAC algorithms a session may be signed with. */
export type SessionAlgorithm = "HS256" | "HS384" | "HS512";

/** Settings for {@link Sessions} (the `jwt.*` configuration section). */
export interface SessionConfig {
  /** HMAC key (see `loadSecret` in `./secret.ts`). */
  secret: Uint8Array;
  /** The only algorithm accepted when verifying and used when minting. */
  algorithm: SessionAlgorithm;
  /** `jwt.max_age`: token and cookie lifetime in seconds (default 1800). */
  maxAge: number;
  /** `jwt.renew_after`: fraction of the token lifetime after which it is renewed (default 0.5). */
  renewAfter: number;
  /** `jwt.max_session_age`: seconds after `auth_time` after which renewal stops (default 604800). */
  maxSessionAge: number;
  /** `jwt.cookie_name`: name of the session cookie (default "accesstoken"). */
  cookieName: string;
  /** `SameSite` attribute of the session cookie (default "Lax"). */
  sameSite: "Strict" | "Lax" | "None";
  /** `jwt.secure`: whether the session cookie carries `Secure` (default true). */
  secure?: boolean;
  /** Size of the verified-token LRU cache (default 10000; 0 disables it). */
  cacheSize?: number;
  /**
   * Memory budget of the verified-token cache in bytes (default 8 MiB), counted as
   * {@link cacheEntryBytes} per entry: long tokens evict older ones before `cacheSize` is reached.
   */
  cacheBytes?: number;
}

/**
 * Verified session claims. `auth_time` is always present (filled from `iat` when the
 * token lacks it). Claims returned by {@link Sessions} are deeply frozen, as they may be
 * shared through the verified-token cache.
 */
export type Claims = {
  role: string;
  iat: number;
  exp: number;
  auth_time: number;
  [k: string]: unknown;
};

/** Result of {@link Sessions.resolve}. */
export interface ResolvedSession {
  /** The session claims, or null when the request has no valid session. */
  claims: Claims | null;
  /** A `Set-Cookie` value to send back (renewed or cleared cookie), or null. */
  setCookie: string | null;
}

/** Result of {@link Sessions.mint}. */
export interface MintedSession {
  /** The signed compact JWT. */
  token: string;
  /** The claims carried by `token`. */
  claims: Claims;
}

/** Options of {@link Sessions.mint}. */
export interface MintOptions {
  /** Current time in seconds since the epoch (default: the clock). */
  now?: number;
  /** Time of the original authentication in seconds (default: `now`, i.e. a fresh login). */
  authTime?: number;
}

/** Defaults of the `jwt.*` settings that have one. */
export const SESSION_DEFAULTS: Readonly<
  Pick<SessionConfig, "maxAge" | "renewAfter" | "maxSessionAge" | "cookieName" | "sameSite"> & {
    cacheSize: number;
    cacheBytes: number;
  }
> = Object.freeze({
  maxAge: 1800,
  renewAfter: 0.5,
  maxSessionAge: 604800,
  cookieName: "accesstoken",
  sameSite: "Lax",
  cacheSize: 10000,
  cacheBytes: 8 * 1024 * 1024,
});

/** Tokens longer than this many characters are rejected without being verified. */
export const MAX_TOKEN_LENGTH = 4096;

/**
 * Estimated memory of one verified-token cache entry: the token (one byte per character) plus its
 * decoded claims (at most the token's length again) plus the entry's fixed overhead.
 */
export function cacheEntryBytes(token: string): number {
  return 2 * token.length + 128;
}

/** Tolerated clock skew, in seconds, for a token's `iat` lying in the future. */
export const CLOCK_SKEW = 30;

const HASHES: Record<SessionAlgorithm, string> = {
  HS256: "SHA-256",
  HS384: "SHA-384",
  HS512: "SHA-512",
};

/** RFC 6265 / RFC 9110 `token` characters, which a cookie name must consist of. */
const COOKIE_NAME_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/**
 * Issues, verifies and renews session JWTs carried in a cookie.
 *
 * Verified tokens are kept in a bounded LRU cache keyed by the token string, so a hot
 * token is only cryptographically verified once; time-based checks still run on every hit.
 */
export class Sessions {
  readonly #cfg: Readonly<SessionConfig>;
  readonly #secret: Uint8Array<ArrayBuffer>;
  readonly #cache: BoundedCache<string, Claims>;
  #hits = 0;
  #misses = 0;
  #key: Promise<CryptoKey> | undefined;

  /** Validates `config`; throws a TypeError or RangeError when a setting is unusable. */
  constructor(config: SessionConfig) {
    const { secret, algorithm, maxAge, renewAfter, maxSessionAge, cookieName, sameSite } = config;
    if (!(secret instanceof Uint8Array) || secret.byteLength === 0) {
      throw new TypeError("jwt secret must be a non-empty Uint8Array");
    }
    if (!Object.hasOwn(HASHES, algorithm)) {
      throw new TypeError(`unsupported jwt algorithm: ${String(algorithm)}`);
    }
    if (!isFiniteNumber(maxAge) || maxAge <= 0) {
      throw new RangeError("jwt.max_age must be a positive number of seconds");
    }
    if (!isFiniteNumber(renewAfter) || renewAfter < 0 || renewAfter > 1) {
      throw new RangeError("jwt.renew_after must be a fraction between 0 and 1");
    }
    if (!isFiniteNumber(maxSessionAge) || maxSessionAge <= 0) {
      throw new RangeError("jwt.max_session_age must be a positive number of seconds");
    }
    if (typeof cookieName !== "string" || !COOKIE_NAME_RE.test(cookieName)) {
      throw new TypeError(`jwt.cookie_name is not a valid cookie name: ${String(cookieName)}`);
    }
    if (sameSite !== "Strict" && sameSite !== "Lax" && sameSite !== "None") {
      throw new TypeError(`invalid SameSite value: ${String(sameSite)}`);
    }
    const cacheSize = config.cacheSize ?? SESSION_DEFAULTS.cacheSize;
    if (!Number.isInteger(cacheSize) || cacheSize < 0) {
      throw new RangeError("session cacheSize must be a non-negative integer");
    }
    const cacheBytes = config.cacheBytes ?? SESSION_DEFAULTS.cacheBytes;
    if (!Number.isInteger(cacheBytes) || cacheBytes < 0) {
      throw new RangeError("session cacheBytes must be a non-negative integer");
    }
    this.#secret = secret.slice();
    this.#cache = new BoundedCache({
      maxEntries: cacheSize,
      maxBytes: cacheBytes,
      bytes: cacheEntryBytes,
    });
    this.#cfg = Object.freeze({ ...config, secret: this.#secret, cacheSize, cacheBytes });
  }

  /** The HMAC key, imported once and reused (jose re-imports raw Uint8Array keys per call). */
  #cryptoKey(): Promise<CryptoKey> {
    this.#key ??= crypto.subtle.importKey(
      "raw",
      this.#secret,
      { name: "HMAC", hash: HASHES[this.#cfg.algorithm] },
      false,
      ["sign", "verify"],
    );
    return this.#key;
  }

  /**
   * Verified-token cache hits and misses (tokens verified cryptographically) since creation, its
   * entries and their estimated bytes ({@link cacheEntryBytes}).
   */
  cacheStats(): { hits: number; misses: number; size: number; bytes: number } {
    const cache = this.#cache;
    return { hits: this.#hits, misses: this.#misses, size: cache.size, bytes: cache.bytes };
  }

  /** Time checks applied on every verification, cached or not. */
  #timeValid(claims: Claims, now: number): boolean {
    return claims.exp > now && claims.iat <= now + CLOCK_SKEW &&
      claims.auth_time <= now + CLOCK_SKEW;
  }

  /**
   * Verifies a session token and returns its (frozen) claims, or null when the token is
   * malformed, longer than {@link MAX_TOKEN_LENGTH}, not signed with the configured
   * algorithm and secret, expired, issued in the future, or lacks a non-empty string
   * `role`. Never throws. `now` is in seconds since the epoch.
   */
  async verify(token: string, now: number = nowSeconds()): Promise<Claims | null> {
    try {
      if (typeof token !== "string" || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
        return null;
      }
      if (!isFiniteNumber(now)) return null;
      // A hit moves the entry to the cache's young end (LRU).
      const cached = this.#cache.get(token);
      if (cached !== undefined) {
        if (cached.exp <= now) {
          this.#cache.delete(token);
          return null;
        }
        if (!this.#timeValid(cached, now)) return null;
        this.#hits++;
        return cached;
      }
      this.#misses++;
      const { payload } = await jwtVerify(token, await this.#cryptoKey(), {
        algorithms: [this.#cfg.algorithm],
        currentDate: new Date(now * 1000),
        requiredClaims: ["exp", "iat", "role"],
      });
      const { exp, iat, role } = payload;
      const authTime: unknown = Object.hasOwn(payload, "auth_time") ? payload.auth_time : iat;
      if (!isFiniteNumber(exp) || !isFiniteNumber(iat) || !isFiniteNumber(authTime)) return null;
      if (typeof role !== "string" || role.length === 0) return null;
      const claims: Claims = deepFreeze({ ...payload, role, iat, exp, auth_time: authTime });
      if (!this.#timeValid(claims, now)) return null;
      this.#cache.set(token, claims);
      return claims;
    } catch {
      return null;
    }
  }

  /**
   * Signs a new session token. `iat` is `now`, `auth_time` is `opts.authTime ?? now` and
   * `exp` is `min(now + maxAge, auth_time + maxSessionAge)`; any `iat`/`exp`/`auth_time`
   * in `claims` is overwritten, other claims are carried verbatim (as JSON).
   *
   * @throws {TypeError} when `claims.role` is not a non-empty string or a claim cannot be encoded.
   * @throws {RangeError} when the session is already past `maxSessionAge` (the token would be
   *   born expired) or the token would exceed {@link MAX_TOKEN_LENGTH}.
   */
  async mint(claims: Record<string, unknown>, opts: MintOptions = {}): Promise<MintedSession> {
    if (typeof claims !== "object" || claims === null || Array.isArray(claims)) {
      throw new TypeError("session claims must be an object");
    }
    const role = claims.role;
    if (typeof role !== "string" || role.length === 0) {
      throw new TypeError("session claim `role` must be a non-empty string");
    }
    const now = opts.now ?? nowSeconds();
    const authTime = opts.authTime ?? now;
    if (!isFiniteNumber(now) || !isFiniteNumber(authTime)) {
      throw new TypeError("mint: now and authTime must be finite numbers of seconds");
    }
    const exp = Math.min(now + this.#cfg.maxAge, authTime + this.#cfg.maxSessionAge);
    if (exp <= now) {
      throw new RangeError("mint: the session is older than jwt.max_session_age");
    }
    const payload = { ...claims, role, iat: now, exp, auth_time: authTime };
    const token = await new SignJWT(payload)
      .setProtectedHeader({ alg: this.#cfg.algorithm, typ: "JWT" })
      .sign(await this.#cryptoKey());
    if (token.length > MAX_TOKEN_LENGTH) {
      throw new RangeError(`mint: token exceeds ${MAX_TOKEN_LENGTH} characters`);
    }
    // What a verifier will decode from the token (JSON round trip drops undefined etc.).
    const minted: Claims = deepFreeze(JSON.parse(JSON.stringify(payload)));
    this.#cache.set(token, minted);
    return { token, claims: minted };
  }

  /**
   * Per-request entry point: reads the session cookie from a `Cookie` header, verifies it
   * and renews it once more than `renewAfter` of its lifetime has elapsed (keeping `role`,
   * `auth_time` and custom claims). An invalid, expired, duplicated or too-old session yields
   * no claims and a cookie-clearing `Set-Cookie`; an absent cookie yields neither.
   */
  async resolve(cookieHeader: string | null, now: number = nowSeconds()): Promise<ResolvedSession> {
    const values = cookieValues(cookieHeader, this.#cfg.cookieName);
    if (values.length === 0) return { claims: null, setCookie: null };
    if (values.length > 1) return { claims: null, setCookie: this.clearCookie() };
    const claims = await this.verify(values[0], now);
    if (claims === null || now - claims.auth_time > this.#cfg.maxSessionAge) {
      return { claims: null, setCookie: this.clearCookie() };
    }
    const lifetime = claims.exp - claims.iat;
    const elapsed = lifetime > 0 ? (now - claims.iat) / lifetime : 1;
    if (elapsed <= this.#cfg.renewAfter) return { claims, setCookie: null };
    const newExp = Math.min(now + this.#cfg.maxAge, claims.auth_time + this.#cfg.maxSessionAge);
    if (newExp <= now) return { claims, setCookie: null };
    try {
      const renewed = await this.mint(claims, { now, authTime: claims.auth_time });
      return { claims: renewed.claims, setCookie: this.sessionCookie(renewed) };
    } catch {
      // Renewal is best effort; the presented token is still valid.
      return { claims, setCookie: null };
    }
  }

  /** `Set-Cookie` value carrying `token` as the session cookie (`Max-Age`: `jwt.max_age`). */
  cookie(token: string): string {
    return this.#setCookie(token, Math.floor(this.#cfg.maxAge));
  }

  /**
   * `Set-Cookie` value carrying a minted session: its `Max-Age` is the token's lifetime, shorter
   * than `jwt.max_age` when `jwt.max_session_age` caps its `exp` (the cookie never outlives the
   * token in it).
   */
  sessionCookie(minted: MintedSession): string {
    const lifetime = minted.claims.exp - minted.claims.iat;
    return this.#setCookie(minted.token, Math.floor(Math.min(this.#cfg.maxAge, lifetime)));
  }

  /** `Set-Cookie` value deleting the session cookie (empty value, `Max-Age=0`). */
  clearCookie(): string {
    return this.#setCookie("", 0);
  }

  #setCookie(value: string, maxAge: number): string {
    const { cookieName, sameSite, secure } = this.#cfg;
    return setCookie(cookieName, value, {
      maxAge,
      path: "/",
      httpOnly: true,
      secure: secure !== false,
      sameSite,
    });
  }
}

/** The `jwt.*` configuration keys {@link sessionsOf} reads (`cfg.jwt` of src/config/load.ts). */
export interface JwtSection {
  algorithm: SessionAlgorithm;
  max_age: number;
  renew_after: number;
  max_session_age: number;
  cookie_name: string;
  same_site: SessionConfig["sameSite"];
  secure: boolean;
}

/** The sessions of a configuration's `jwt` section, signed with `secret`. */
export function sessionsOf(jwt: JwtSection, secret: Uint8Array): Sessions {
  return new Sessions({
    secret,
    algorithm: jwt.algorithm,
    maxAge: jwt.max_age,
    renewAfter: jwt.renew_after,
    maxSessionAge: jwt.max_session_age,
    cookieName: jwt.cookie_name,
    sameSite: jwt.same_site,
    secure: jwt.secure,
  });
}
