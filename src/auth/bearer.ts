/**
 * A request's credentials: `Authorization: Bearer <jwt>` when present, else the session cookie.
 *
 * - A Bearer token wins over the cookie, which is then ignored (neither verified, renewed nor
 *   cleared). It is checked exactly like the cookie's token (`jwt.secret`, `jwt.algorithm`, the
 *   same claims and session age) when HMAC-signed, or against `jwt.jwks_url` when signed with an
 *   asymmetric algorithm ({@link ExternalIssuer}); any other algorithm, `none` included, is refused.
 * - A refused Bearer token is an error (401 AUTH_TOKEN_INVALID), never an anonymous request: the
 *   client sent a credential and must learn that it failed.
 * - A Bearer request never gets the session cookie: no renewal, no clearing, and a route or SSO
 *   callback that sets or clears the session has that `Set-Cookie` removed from its answer
 *   ({@link bearerAnswer}).
 * - Another `Authorization` scheme (Basic, …) is not a credential of svc: it is ignored, as before,
 *   and reaches full-control routes as a header.
 *
 * @module
 */
import { decodeProtectedHeader } from "jose";
import type { Sessions } from "./session.ts";
import { SvcError } from "../svc_error.ts";
import { EXTERNAL_ALGORITHMS, ExternalIssuer } from "./issuers.ts";
import { log } from "../observe/log.ts";

/** What {@link RequestAuth.resolve} found. */
export interface Credential {
  /** The role the request runs as, or null for the anonymous role. */
  role: string | null;
  /** The verified claims (svc.jwt.claims), or null. */
  claims: Record<string, unknown> | null;
  /** A renewed or clearing session cookie to send back (never for a Bearer request). */
  setCookie: string | null;
  /** Whether the credential was a Bearer token. */
  bearer: boolean;
  /** Set when the Bearer token was refused: the request must answer this error. */
  error: SvcError | null;
}

const HMAC = new Set(["HS256", "HS384", "HS512"]);

/** The credential of a request without one: the anonymous role (shared, never changed). */
const NO_CREDENTIAL: Credential = Object.freeze({
  role: null,
  claims: null,
  setCookie: null,
  bearer: false,
  error: null,
});

/**
 * The token of an `Authorization` header using the Bearer scheme (case-insensitive): the
 * token, `""` for a Bearer header that does not hold exactly one token, or undefined when the
 * header is absent or uses another scheme.
 */
export function bearerToken(header: string | null | undefined): string | undefined {
  if (typeof header !== "string") return undefined;
  const m = /^\s*bearer(?:\s+|$)(.*)$/is.exec(header);
  if (!m) return undefined;
  const token = m[1].trim();
  return /^[A-Za-z0-9\-._~+/]+=*$/.test(token) ? token : "";
}

/** The settings {@link RequestAuth} reads besides the Sessions. */
export interface RequestAuthConfig {
  /** `jwt.max_session_age`: the cookie's ceiling on session age, for HMAC Bearer tokens too. */
  maxSessionAge: number;
  /** `jwt.cookie_name`: its `Set-Cookie` is removed from answers to Bearer requests. */
  cookieName: string;
  /** The external issuer, when `jwt.jwks_url` is set. */
  external?: ExternalIssuer | null;
}

/** Resolves each request's identity from its headers. */
export class RequestAuth {
  readonly #sessions: Sessions;
  readonly #cfg: RequestAuthConfig;

  /** Starts fetching the external key set, if any (without waiting for it). */
  constructor(sessions: Sessions, cfg: RequestAuthConfig) {
    this.#sessions = sessions;
    this.#cfg = cfg;
    cfg.external?.jwks.start();
  }

  /**
   * Fetches the external key set again, without waiting for it (every reload does, so a key the
   * provider revoked stops verifying tokens at the next SIGUSR1 or NOTIFY, not only after
   * the key set's maximum age).
   */
  refresh(): void {
    this.#cfg.external?.jwks.start();
  }

  /**
   * The request's identity (never throws: a refused Bearer token comes back as `error`); at once,
   * without a promise, for a request with neither a Bearer token nor a cookie (the anonymous role).
   */
  resolve(headers: Headers, now?: number): Credential | Promise<Credential> {
    const token = bearerToken(headers.get("authorization"));
    if (token === undefined) {
      const cookie = headers.get("cookie");
      if (cookie === null) return NO_CREDENTIAL;
      return this.#cookie(cookie, now ?? Math.floor(Date.now() / 1000));
    }
    return this.#bearer(token, now ?? Math.floor(Date.now() / 1000));
  }

  async #cookie(cookie: string, now: number): Promise<Credential> {
    const s = await this.#sessions.resolve(cookie, now);
    return {
      role: s.claims?.role ?? null,
      claims: s.claims,
      setCookie: s.setCookie,
      bearer: false,
      error: null,
    };
  }

  async #bearer(token: string, now: number): Promise<Credential> {
    try {
      const { role, claims } = await this.#verify(token, now);
      return { role, claims, setCookie: null, bearer: true, error: null };
    } catch (e) {
      const error = e instanceof SvcError
        ? e
        : new SvcError("AUTH_TOKEN_INVALID", "the bearer token is not valid");
      log.debug("bearer token refused: {reason}", { reason: error.message });
      return { role: null, claims: null, setCookie: null, bearer: true, error };
    }
  }

  async #verify(
    token: string,
    now: number,
  ): Promise<{ role: string; claims: Readonly<Record<string, unknown>> }> {
    if (token === "") throw invalid("the Authorization header does not hold one bearer token");
    let alg: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
    } catch {
      throw invalid("the bearer token is not a JWT");
    }
    if (typeof alg === "string" && HMAC.has(alg)) {
      // svc's own tokens: exactly the session cookie's rules.
      const claims = await this.#sessions.verify(token, now);
      if (claims === null || now - claims.auth_time > this.#cfg.maxSessionAge) {
        throw invalid("the bearer token is not valid (signature, algorithm, claims or expiry)");
      }
      return { role: claims.role, claims };
    }
    if (typeof alg === "string" && EXTERNAL_ALGORITHMS.includes(alg)) {
      if (!this.#cfg.external) {
        throw invalid(`the bearer token is signed with ${alg}, but jwt.jwks_url is not set`);
      }
      return await this.#cfg.external.verify(token, now);
    }
    throw invalid(`the bearer token's algorithm ${JSON.stringify(alg)} is not accepted`);
  }

  /**
   * The answer to a Bearer request as sent: without any `Set-Cookie` of the session cookie (a
   * route or SSO callback that sets or clears the session does not do so for a Bearer request),
   * with `WWW-Authenticate` on a 401 and `Retry-After` on a 503 of the key set. Other answers
   * pass unchanged.
   */
  bearerAnswer(res: Response, identity: Pick<Credential, "bearer" | "error">): Response {
    if (!identity.bearer) return res;
    const code = res.headers.get("x-svc-errorcode");
    const cookies = res.headers.getSetCookie();
    const name = this.#cfg.cookieName;
    const session = cookies.filter((c) => c.slice(0, c.indexOf("=")).trim() === name);
    const unauthorized = res.status === 401;
    const unavailable = code === "AUTH_JWKS_UNAVAILABLE";
    if (session.length === 0 && !unauthorized && !unavailable) return res;
    const edit = (h: Headers) => {
      if (session.length > 0) {
        h.delete("set-cookie");
        for (const c of cookies) if (!session.includes(c)) h.append("set-cookie", c);
      }
      if (unauthorized) {
        h.set(
          "www-authenticate",
          code === "AUTH_TOKEN_INVALID" ? 'Bearer error="invalid_token"' : "Bearer",
        );
      }
      if (unavailable) h.set("retry-after", "5");
    };
    try {
      edit(res.headers);
      return res;
    } catch {
      // Immutable headers (e.g. Response.redirect): copy the response.
      const copy = new Response(res.body, res);
      edit(copy.headers);
      return copy;
    }
  }
}

function invalid(message: string): SvcError {
  return new SvcError("AUTH_TOKEN_INVALID", message);
}

/** The `jwt.*` settings {@link requestAuth} reads. */
export interface RequestAuthSettings {
  max_session_age: number;
  cookie_name: string;
  jwks_url?: string;
  issuer?: string;
  audience?: string[];
  role_claim: string;
}

/** The request authenticator of a configuration's `jwt` section (one per serving instance). */
export function requestAuth(jwt: RequestAuthSettings, sessions: Sessions): RequestAuth {
  const external = jwt.jwks_url === undefined ? null : new ExternalIssuer({
    jwksUrl: jwt.jwks_url,
    issuer: jwt.issuer,
    audience: jwt.audience,
    roleClaim: jwt.role_claim,
  });
  return new RequestAuth(sessions, {
    maxSessionAge: jwt.max_session_age,
    cookieName: jwt.cookie_name,
    external,
  });
}
