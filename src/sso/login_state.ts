/**
 * SSO protocol state (docs/sso.md "State, RelayState and SameSite"): one signed, short-lived cookie `svc_sso` scoped to
 * `/auth/` carrying what a login must find again at its callback (OIDC state, nonce and PKCE
 * verifier; SAML request id) plus the login's decoded query string. A state is consumed by its
 * callback: a second use of the same cookie fails (SSO_BAD_STATE).
 */
import { base64url, jwtVerify, SignJWT } from "jose";
import { SvcError } from "../svc_error.ts";
import { cookieValues, setCookie } from "../auth/cookies.ts";
import { claimOnce } from "../util/once.ts";

/** Name of the state cookie. */
export const STATE_COOKIE = "svc_sso";
/** Lifetime of a login's state, seconds. */
export const STATE_TTL = 600;

const STATE_ATTRIBUTES = { path: "/auth/", httpOnly: true, secure: true } as const;

/** What a login leaves for its callback. */
export interface SsoState {
  /** "oidc" or "saml". */
  protocol: "oidc" | "saml";
  /** The provider entry's name. */
  name: string;
  /** OIDC: the `state` parameter sent to the provider (CSRF token + login query). */
  state?: string;
  /** OIDC: the ID token nonce. */
  nonce?: string;
  /** OIDC: the PKCE code verifier. */
  verifier?: string;
  /** SAML: the AuthnRequest ID. */
  rid?: string;
  /** The login's query string, decoded (null when it had none). */
  query: unknown;
}

/** Signs and checks state cookies; remembers consumed ones until they expire. */
export class StateCookies {
  readonly #key: Promise<CryptoKey>;

  /** `secret` is the session secret; the cookie key is derived from it (HKDF, own label). */
  constructor(secret: Uint8Array) {
    this.#key = (async () => {
      const base = await crypto.subtle.importKey(
        "raw",
        secret as Uint8Array<ArrayBuffer>,
        "HKDF",
        false,
        ["deriveKey"],
      );
      return crypto.subtle.deriveKey(
        {
          name: "HKDF",
          hash: "SHA-256",
          salt: new Uint8Array(0),
          info: new TextEncoder().encode("svc sso state cookie"),
        },
        base,
        { name: "HMAC", hash: "SHA-256", length: 256 },
        false,
        ["sign", "verify"],
      );
    })();
  }

  /** A `Set-Cookie` value carrying `state` (SAML's is SameSite=None: the IdP POSTs back). */
  async cookie(state: SsoState): Promise<string> {
    const token = await new SignJWT({ ...state } as unknown as Record<string, unknown>)
      .setProtectedHeader({ alg: "HS256" })
      .setJti(randomToken())
      .setIssuedAt()
      .setExpirationTime(`${STATE_TTL}s`)
      .sign(await this.#key);
    const sameSite = state.protocol === "saml" ? "None" : "Lax";
    return setCookie(STATE_COOKIE, token, { ...STATE_ATTRIBUTES, maxAge: STATE_TTL, sameSite });
  }

  /** `Set-Cookie` values deleting the state cookie. */
  clear(): string {
    return setCookie(STATE_COOKIE, "", { ...STATE_ATTRIBUTES, maxAge: 0, sameSite: "None" });
  }

  /**
   * The state of the request's cookie for entry `protocol`/`name`, consumed: a missing, forged,
   * expired, foreign or already used cookie is SSO_BAD_STATE.
   */
  async consume(
    cookieHeader: string | null,
    protocol: SsoState["protocol"],
    name: string,
  ): Promise<SsoState> {
    const values = cookieValues(cookieHeader, STATE_COOKIE);
    if (values.length !== 1) {
      throw new SvcError("SSO_BAD_STATE", "missing login state cookie; start the login again");
    }
    let payload: Record<string, unknown>;
    try {
      payload = (await jwtVerify(values[0], await this.#key, {
        algorithms: ["HS256"],
        requiredClaims: ["exp", "jti"],
      })).payload;
    } catch {
      throw new SvcError("SSO_BAD_STATE", "invalid or expired login state; start the login again");
    }
    if (payload.protocol !== protocol || payload.name !== name) {
      throw new SvcError("SSO_BAD_STATE", "the login state belongs to another provider");
    }
    const jti = String(payload.jti);
    // Consumed once across every worker of the process (src/util/once.ts).
    if (!await claimOnce("sso-state", jti, Number(payload.exp) * 1000)) {
      throw new SvcError("SSO_BAD_STATE", "this login state was already used");
    }
    return payload as unknown as SsoState;
  }
}

/** 32 random bytes, base64url. */
export function randomToken(): string {
  return base64url.encode(crypto.getRandomValues(new Uint8Array(32)));
}

/** The deepest a login query's dotted key may nest (as `http.max_json_depth`'s default). */
export const MAX_QUERY_DEPTH = 64;

/**
 * A login's query string decoded like the GET form: dotted keys nest (`a.b=1` → `{a: {b: "1"}}`),
 * values stay strings, a repeated key becomes an array. Null when there is no parameter. A key
 * nesting deeper than {@link MAX_QUERY_DEPTH} is 400 SSO_BAD_REQUEST (thousands of levels
 * exhausted the stack of the JSON round trip below: a 500).
 */
export function decodeQuery(search: URLSearchParams): Record<string, unknown> | null {
  const out: Record<string, unknown> = Object.create(null);
  let any = false;
  for (const [key, value] of search) {
    any = true;
    const path = key.split(".");
    if (path.length > MAX_QUERY_DEPTH) {
      throw new SvcError(
        "SSO_BAD_REQUEST",
        `a login query key nests deeper than ${MAX_QUERY_DEPTH} levels`,
      );
    }
    let o: Record<string, unknown> = out;
    for (const p of path.slice(0, -1)) {
      const v = o[p];
      if (typeof v !== "object" || v === null || Array.isArray(v)) o[p] = Object.create(null);
      o = o[p] as Record<string, unknown>;
    }
    const leaf = path[path.length - 1];
    const prev = o[leaf];
    if (prev === undefined) o[leaf] = value;
    else if (Array.isArray(prev)) prev.push(value);
    else if (typeof prev === "string") o[leaf] = [prev, value];
    else o[leaf] = value;
  }
  return any ? JSON.parse(JSON.stringify(out)) : null;
}
