/**
 * Tokens signed by an external identity provider (`jwt.jwks_url`): the provider's JSON Web Key
 * Set, fetched at startup and again when a token names a key it does not hold (at most once per
 * {@link JWKS_REFETCH_INTERVAL} seconds), and the verification of its asymmetric tokens (RS, PS,
 * ES, EdDSA) with `jwt.issuer`, `jwt.audience` and the role found at `jwt.role_claim`.
 *
 * HMAC tokens never reach this module (they are svc's own, checked against `jwt.secret` only), and
 * the key set never yields a symmetric key: an HS token cannot be verified with a public key.
 *
 * @module
 */
import {
  createLocalJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  type JSONWebKeySet,
  type JWSHeaderParameters,
  jwtVerify,
  type JWTVerifyGetKey,
} from "jose";
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";

/** The asymmetric algorithms an external token may be signed with. */
export const EXTERNAL_ALGORITHMS: readonly string[] = Object.freeze([
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
  "Ed25519",
]);

/** Seconds between two key-set fetches caused by tokens naming an unknown key (`kid`). */
export const JWKS_REFETCH_INTERVAL = 30;
/** Seconds between two fetches while no key set could be loaded yet. */
export const JWKS_RETRY_INTERVAL = 5;
/** Age in seconds after which a key set is refreshed in the background (the old one still serves). */
export const JWKS_MAX_AGE = 600;
/** Seconds a key-set fetch may take. */
export const JWKS_FETCH_TIMEOUT = 5;
/** Largest key-set document accepted, in bytes. */
export const JWKS_MAX_BYTES = 1024 * 1024;
/** Longest external token accepted, in characters (the request header limit caps it anyway). */
export const MAX_EXTERNAL_TOKEN_LENGTH = 16384;
/** Tolerated clock skew, in seconds, for a token's `iat` lying in the future. */
const IAT_SKEW = 30;

/** One step of a `jwt.role_claim` path: an object key or an array index. */
export type ClaimStep = string | number;

/**
 * Parses a `jwt.role_claim` path: `role`, `.role`, `.app_metadata.role`,
 * `."https://example.com/role"`, `.roles[0]` (steps: `.key`, `."quoted key"` with `\"` and `\\`
 * escapes, `[index]`; the first key may omit its dot). Throws an Error naming the position of
 * the first thing it cannot read.
 */
export function parseClaimPath(text: string): ClaimStep[] {
  const steps: ClaimStep[] = [];
  let i = 0;
  const fail = (what: string): never => {
    throw new Error(`${what} at character ${i + 1} of ${JSON.stringify(text)}`);
  };
  const plainKey = () => {
    const m = /^[^.\["\]\s]+/.exec(text.slice(i));
    if (!m) fail("expected a key");
    steps.push(m![0]);
    i += m![0].length;
  };
  if (text.length === 0) fail("empty path");
  if (text[0] !== "." && text[0] !== "[") plainKey();
  while (i < text.length) {
    const c = text[i];
    if (c === ".") {
      i++;
      if (text[i] === '"') {
        i++;
        let key = "";
        for (;;) {
          if (i >= text.length) fail("unterminated quoted key");
          const q = text[i];
          if (q === '"') break;
          if (q === "\\") {
            const next = text[i + 1];
            if (next !== '"' && next !== "\\") fail('expected \\" or \\\\');
            key += next;
            i += 2;
          } else {
            key += q;
            i++;
          }
        }
        i++;
        if (key.length === 0) fail("empty quoted key");
        steps.push(key);
      } else plainKey();
    } else if (c === "[") {
      const m = /^\[(\d{1,9})\]/.exec(text.slice(i));
      if (!m) fail("expected [index]");
      steps.push(Number(m![1]));
      i += m![0].length;
    } else fail(`unexpected ${JSON.stringify(c)}`);
  }
  return steps;
}

/** The value at `path` in `claims` (own properties and array elements only), or undefined. */
export function claimAt(claims: unknown, path: readonly ClaimStep[]): unknown {
  let v: unknown = claims;
  for (const step of path) {
    if (typeof step === "number") {
      if (!Array.isArray(v) || step >= v.length) return undefined;
      v = v[step];
    } else {
      if (typeof v !== "object" || v === null || Array.isArray(v) || !Object.hasOwn(v, step)) {
        return undefined;
      }
      v = (v as Record<string, unknown>)[step];
    }
  }
  return v;
}

/** The external-issuer settings (`jwt.jwks_url`, `jwt.issuer`, `jwt.audience`, `jwt.role_claim`). */
export interface IssuerConfig {
  /** URL of the provider's JSON Web Key Set. */
  jwksUrl: string;
  /** Required `iss` (unset: not checked). */
  issuer?: string;
  /** Accepted `aud` values, any one of them (unset or empty: not checked). */
  audience?: string[];
  /** Path of the role in the claims (see {@link parseClaimPath}). */
  roleClaim: string;
}

/** The settings a configuration gives, in the shape {@link checkIssuerConfig} validates. */
export interface JwtIssuerKeys {
  jwks_url?: string;
  issuer?: string;
  audience?: string[];
  role_claim: string;
}

/**
 * Checks the `jwt.*` keys of external issuers; returns an error message, or null when they are
 * usable. `jwt.issuer` and `jwt.audience` concern JWKS tokens only, so they need `jwt.jwks_url`.
 */
export function checkIssuerConfig(jwt: JwtIssuerKeys): string | null {
  try {
    parseClaimPath(jwt.role_claim);
  } catch (e) {
    return `invalid value for "jwt.role_claim": ${(e as Error).message}`;
  }
  if (jwt.jwks_url !== undefined) {
    let url: URL;
    try {
      url = new URL(jwt.jwks_url);
    } catch {
      return `invalid value for "jwt.jwks_url": not a URL: ${JSON.stringify(jwt.jwks_url)}`;
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      return `invalid value for "jwt.jwks_url": expected an https:// (or http://) URL`;
    }
  } else {
    for (const k of ["issuer", "audience"] as const) {
      if (jwt[k] !== undefined) {
        return `jwt.${k} applies to tokens verified with jwt.jwks_url, which is not set`;
      }
    }
  }
  return null;
}

/** Raised (as the cause of a 503) when no key set could be loaded yet. */
class KeysUnavailable extends Error {
  override name = "KeysUnavailable";
}

/** A verified external token: the role it names and its claims as signed. */
export interface ExternalIdentity {
  role: string;
  claims: Readonly<Record<string, unknown>>;
}

/**
 * The key set of one provider: loaded at {@link Jwks.start}, refreshed in the background once
 * older than {@link JWKS_MAX_AGE}, refetched when a token names an unknown key (rate-limited).
 * Each worker holds its own copy.
 */
export class Jwks {
  readonly #url: string;
  #set: JWTVerifyGetKey | null = null;
  #fingerprint = "";
  #loadedAt = 0;
  #lastAttempt = -Infinity;
  #lastKidRefetch = -Infinity;
  #inflight: Promise<boolean> | null = null;
  #fetches = 0;
  /** Called when a fetch changed the keys (verified tokens of removed keys must be forgotten). */
  onChange: () => void = () => {};

  /** A key set served at `url` (not fetched before {@link start} or the first token). */
  constructor(url: string) {
    this.#url = url;
  }

  /** Fetches the key set now, without waiting for it (a failure is logged; tokens retry). */
  start(): void {
    void this.#refresh();
  }

  /** Fetch attempts so far. */
  get fetches(): number {
    return this.#fetches;
  }

  /** Fetches the key set once (concurrent callers share the fetch); true when it loaded. */
  #refresh(): Promise<boolean> {
    this.#inflight ??= this.#fetch().finally(() => (this.#inflight = null));
    return this.#inflight;
  }

  async #fetch(): Promise<boolean> {
    this.#lastAttempt = performance.now();
    this.#fetches++;
    try {
      const res = await fetch(this.#url, {
        headers: { accept: "application/jwk-set+json, application/json" },
        redirect: "error",
        signal: AbortSignal.timeout(JWKS_FETCH_TIMEOUT * 1000),
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`HTTP ${res.status}`);
      }
      const text = await res.text();
      if (text.length > JWKS_MAX_BYTES) throw new Error("the key set is too large");
      const body = JSON.parse(text) as { keys?: unknown };
      if (typeof body !== "object" || body === null || !Array.isArray(body.keys)) {
        throw new Error("not a JSON Web Key Set (no keys array)");
      }
      // Public signing keys only: a symmetric (oct) or private member is dropped, never used.
      const keys = body.keys.filter((k): k is Record<string, unknown> =>
        typeof k === "object" && k !== null && typeof k.kty === "string" && k.kty !== "oct" &&
        k.d === undefined
      );
      const set = createLocalJWKSet({ keys } as unknown as JSONWebKeySet);
      const fingerprint = JSON.stringify(keys);
      const changed = this.#set !== null && fingerprint !== this.#fingerprint;
      this.#set = set;
      this.#fingerprint = fingerprint;
      this.#loadedAt = performance.now();
      log.debug("jwt.jwks_url: {count} keys loaded", { count: keys.length });
      if (changed) this.onChange();
      return true;
    } catch (e) {
      log.warn("jwt.jwks_url {url}: cannot load the key set: {error}", {
        url: this.#url,
        error: (e as Error).message,
      });
      return false;
    }
  }

  /** Seconds since `t` (a performance.now() time). */
  #since(t: number): number {
    return (performance.now() - t) / 1000;
  }

  /**
   * The keys that may have signed a token with this header: one key, or several when the token
   * names no `kid` and more than one key fits. Throws KeysUnavailable when no key set is loaded
   * and none can be fetched now, or jose's JWKSNoMatchingKey.
   */
  async keys(header: JWSHeaderParameters): Promise<CryptoKey[]> {
    if (this.#set === null) {
      if (this.#inflight === null && this.#since(this.#lastAttempt) < JWKS_RETRY_INTERVAL) {
        throw new KeysUnavailable("the key set is not loaded");
      }
      await this.#refresh();
      if (this.#set === null) throw new KeysUnavailable("the key set is not loaded");
    } else if (this.#since(this.#loadedAt) > JWKS_MAX_AGE && this.#inflight === null) {
      void this.#refresh();
    }
    try {
      return await this.#select(header);
    } catch (e) {
      if (!(e instanceof joseErrors.JWKSNoMatchingKey)) throw e;
      // The provider may have rotated its keys: fetch again, at most once per interval.
      if (this.#inflight === null && this.#since(this.#lastKidRefetch) < JWKS_REFETCH_INTERVAL) {
        throw e;
      }
      this.#lastKidRefetch = performance.now();
      await this.#refresh();
      return await this.#select(header);
    }
  }

  async #select(header: JWSHeaderParameters): Promise<CryptoKey[]> {
    try {
      return [
        await (this.#set!(header as Parameters<JWTVerifyGetKey>[0], undefined as never) as Promise<
          CryptoKey
        >),
      ];
    } catch (e) {
      if (!(e instanceof joseErrors.JWKSMultipleMatchingKeys)) throw e;
      const keys: CryptoKey[] = [];
      for await (const k of e as unknown as AsyncIterable<CryptoKey>) keys.push(k);
      return keys;
    }
  }
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function refused(message: string): SvcError {
  return new SvcError("AUTH_TOKEN_INVALID", message);
}

/** Most verified external tokens kept, and their estimated memory budget in bytes. */
const CACHE_SIZE = 10000;
const CACHE_BYTES = 8 * 1024 * 1024;

/** Estimated memory of a cached token: the token, its decoded claims (at most as long) and overhead. */
function entryBytes(token: string): number {
  return 2 * token.length + 128;
}

/**
 * Verifies tokens of one external issuer: signature against the key set (the asymmetric
 * algorithms of {@link EXTERNAL_ALGORITHMS} only), `exp` required and in the future, `iat`
 * required and not in the future, `nbf`, `jwt.issuer` and `jwt.audience` when set, and a
 * non-empty string role at `jwt.role_claim`. Verified tokens are cached (LRU) until they expire;
 * the cache is emptied when the key set changes.
 */
export class ExternalIssuer {
  readonly jwks: Jwks;
  readonly #cfg: IssuerConfig;
  readonly #path: ClaimStep[];
  readonly #cache = new Map<string, ExternalIdentity & { exp: number; iat: number }>();
  #bytes = 0;

  /** Validates the settings (throws an Error on an unusable `roleClaim`). */
  constructor(cfg: IssuerConfig) {
    this.#cfg = cfg;
    this.#path = parseClaimPath(cfg.roleClaim);
    this.jwks = new Jwks(cfg.jwksUrl);
    this.jwks.onChange = () => {
      this.#cache.clear();
      this.#bytes = 0;
    };
  }

  /**
   * The identity of a token signed with an asymmetric algorithm; throws SvcError
   * AUTH_TOKEN_INVALID (401) when it is refused, AUTH_JWKS_UNAVAILABLE (503) when no key set
   * could be loaded to check it.
   */
  async verify(token: string, now: number = nowSeconds()): Promise<ExternalIdentity> {
    if (token.length > MAX_EXTERNAL_TOKEN_LENGTH) throw refused("the bearer token is too long");
    const hit = this.#cache.get(token);
    if (hit !== undefined) {
      if (hit.exp <= now || hit.iat > now + IAT_SKEW) {
        if (hit.exp <= now) this.#forget(token);
        throw refused("the bearer token has expired or is not valid yet");
      }
      this.#cache.delete(token);
      this.#cache.set(token, hit);
      return hit;
    }
    const options = {
      algorithms: [...EXTERNAL_ALGORITHMS],
      currentDate: new Date(now * 1000),
      requiredClaims: ["exp", "iat"],
      ...(this.#cfg.issuer !== undefined ? { issuer: this.#cfg.issuer } : {}),
      ...(this.#cfg.audience?.length ? { audience: this.#cfg.audience } : {}),
    };
    let payload: Record<string, unknown> | undefined;
    let lastError: unknown;
    try {
      // The key set hands out public keys for these algorithms only: an HS header never gets
      // here, and `alg: none` or an unlisted algorithm fails `algorithms`.
      const header = decodeProtectedHeader(token);
      if (typeof header.alg !== "string" || !EXTERNAL_ALGORITHMS.includes(header.alg)) {
        throw refused("the bearer token's algorithm is not accepted");
      }
      const keys = await this.jwks.keys(header);
      for (const key of keys) {
        try {
          payload = (await jwtVerify(token, key, options)).payload;
          break;
        } catch (e) {
          lastError = e;
        }
      }
    } catch (e) {
      lastError = e;
    }
    if (payload === undefined) throw this.#explain(lastError);
    const { exp, iat } = payload;
    if (typeof exp !== "number" || typeof iat !== "number" || !Number.isFinite(exp)) {
      throw refused("the bearer token lacks a numeric exp or iat");
    }
    if (iat > now + IAT_SKEW) throw refused("the bearer token is issued in the future");
    const role = claimAt(payload, this.#path);
    if (typeof role !== "string" || role.length === 0) {
      throw refused(`the bearer token has no role at ${this.#cfg.roleClaim}`);
    }
    const identity = { role, claims: deepFreeze(payload), exp, iat };
    this.#remember(token, identity);
    return identity;
  }

  #forget(token: string): void {
    if (this.#cache.delete(token)) this.#bytes -= entryBytes(token);
  }

  #remember(token: string, identity: ExternalIdentity & { exp: number; iat: number }): void {
    const bytes = entryBytes(token);
    while (this.#cache.size >= CACHE_SIZE || this.#bytes + bytes > CACHE_BYTES) {
      const oldest = this.#cache.keys().next();
      if (oldest.done) break;
      this.#forget(oldest.value);
    }
    this.#cache.set(token, identity);
    this.#bytes += bytes;
  }

  #explain(e: unknown): SvcError {
    if (e instanceof SvcError) return e;
    if (e instanceof KeysUnavailable) {
      return new SvcError(
        "AUTH_JWKS_UNAVAILABLE",
        "the identity provider's keys (jwt.jwks_url) cannot be loaded; retry later",
      );
    }
    if (e instanceof joseErrors.JWTExpired) return refused("the bearer token has expired");
    if (e instanceof joseErrors.JWTClaimValidationFailed) {
      const claim = (e as { claim?: string }).claim;
      return refused(
        claim === "iss" || claim === "aud"
          ? `the bearer token's ${claim} is not accepted`
          : `the bearer token's ${claim ?? "claims"} claim is not valid`,
      );
    }
    if (e instanceof joseErrors.JWKSNoMatchingKey) {
      return refused("no key of jwt.jwks_url matches the bearer token");
    }
    return refused("the bearer token's signature or format is not valid");
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
