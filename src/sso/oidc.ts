/**
 * OpenID Connect login (authorization code flow with PKCE S256, state and nonce) with
 * `openid-client` v6: discovery at startup (lazy retry with backoff), `GET …/login` redirects to
 * the provider with the state kept in the signed `svc_sso` cookie, `GET …/callback` checks the
 * state, exchanges the code, verifies the ID token (signature, issuer, audience, nonce, expiry),
 * optionally merges userinfo (its claims override the ID token's), then runs the callback function.
 * Discovery runs again on every reload, which drops openid-client's cache of the provider's keys
 * (JWKS): a key the provider removed is no longer trusted.
 */
import * as client from "openid-client";
import { base64url } from "jose";
import { join } from "node:path";
import type { Config, OpenIdConfig } from "../config/load.ts";
import type { RequestRole } from "../auth/roles.ts";
import { type CallbackDeps, type CallbackOutcome, runCallback } from "./callback.ts";
import { entryBasics, Lazy, reason, refuse } from "./common.ts";
import { decodeQuery, randomToken, type StateCookies } from "./login_state.ts";
import { SvcError } from "../svc_error.ts";

/** Seconds an ID token's `iat` may lie in the future (openid-client's own clock tolerance). */
export const ID_TOKEN_SKEW = 30;

interface Resolved {
  config: client.Configuration;
  redirectUri: string;
  fn: string;
}

async function readSecretFile(path: string): Promise<string | undefined> {
  try {
    const v = (await Deno.readTextFile(path)).trim();
    return v === "" ? undefined : v;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

/** One `openid.<name>` entry. */
export class OidcEntry {
  readonly lazy: Lazy<Resolved>;

  /** Creates the entry; call `lazy.start()` to resolve it. */
  constructor(
    readonly name: string,
    readonly entry: OpenIdConfig,
    readonly cfg: Config,
    readonly states: StateCookies,
    readonly deps: CallbackDeps,
  ) {
    this.lazy = new Lazy(`openid.${name}`, () => this.#resolve());
  }

  async #resolve(): Promise<Resolved> {
    const { origin, fn } = entryBasics(this.cfg, this.entry);
    const dir = this.cfg.secrets.dir;
    const id = this.entry.client_id ?? await readSecretFile(join(dir, `openid-${this.name}.id`));
    const secret = this.entry.client_secret ??
      await readSecretFile(join(dir, `openid-${this.name}.secret`));
    if (!id) throw new Error(`no client_id (config or ${dir}/openid-${this.name}.id)`);
    const issuer = new URL(this.entry.issuer!);
    const insecure = issuer.protocol === "http:";
    const config = await client.discovery(
      issuer,
      id,
      secret === undefined ? undefined : { client_secret: secret },
      secret === undefined ? client.None() : client.ClientSecretBasic(secret),
      {
        // The ID token's signature is verified too (openid-client trusts the TLS channel otherwise).
        execute: insecure
          ? [client.allowInsecureRequests, client.enableNonRepudiationChecks]
          : [client.enableNonRepudiationChecks],
        timeout: 10,
      },
    );
    return { config, redirectUri: `${origin}/auth/oidc/${this.name}/callback`, fn };
  }

  /** `GET /auth/oidc/<name>/login`: 303 to the provider, state cookie set. */
  async login(req: Request): Promise<Response> {
    const r = await this.lazy.get();
    let location: URL, cookie: string;
    try {
      const verifier = client.randomPKCECodeVerifier();
      const challenge = await client.calculatePKCECodeChallenge(verifier);
      const nonce = client.randomNonce();
      const search = new URL(req.url).searchParams;
      const raw = search.toString();
      const state = randomToken() + (raw ? "." + base64url.encode(raw) : "");
      location = client.buildAuthorizationUrl(r.config, {
        redirect_uri: r.redirectUri,
        scope: this.entry.scopes.join(" "),
        response_type: "code",
        code_challenge: challenge,
        code_challenge_method: "S256",
        state,
        nonce,
      });
      cookie = await this.states.cookie({
        protocol: "oidc",
        name: this.name,
        state,
        nonce,
        verifier,
        query: decodeQuery(search),
      });
    } catch (e) {
      // The client's own query (nested too deep) is its 400; anything else is svc's.
      if (e instanceof SvcError && e.code === "SSO_BAD_REQUEST") {
        throw refuse(`openid.${this.name}`, "SSO_BAD_REQUEST", e.message);
      }
      throw refuse(`openid.${this.name}`, "SSO_INTERNAL", "cannot start the login", e);
    }
    return new Response(null, {
      status: 303,
      headers: { location: location.href, "set-cookie": cookie, "cache-control": "no-store" },
    });
  }

  /** `GET /auth/oidc/<name>/callback`: verify, then run the callback function as `who`. */
  async callback(req: Request, who: RequestRole): Promise<CallbackOutcome> {
    const entry = `openid.${this.name}`;
    const r = await this.lazy.get();
    const url = new URL(req.url);
    const params = url.searchParams;
    const st = await this.states.consume(req.headers.get("cookie"), "oidc", this.name)
      .catch((e) => {
        // A replay store that cannot record the claim stays 503 SSO_NOT_READY.
        if (e instanceof SvcError && e.code !== "SSO_BAD_STATE") throw e;
        throw refuse(entry, "SSO_BAD_STATE", (e as Error).message);
      });
    if (params.get("state") !== st.state) {
      throw refuse(entry, "SSO_BAD_STATE", "the state parameter does not match the login");
    }
    const error = params.get("error");
    if (error !== null) {
      throw refuse(
        entry,
        "SSO_BAD_REQUEST",
        `the provider refused the login: ${error.slice(0, 100)}`,
      );
    }
    if (!params.get("code")) throw refuse(entry, "SSO_BAD_REQUEST", "the callback has no code");
    const current = new URL(r.redirectUri);
    current.search = url.search;
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(r.config, current, {
        pkceCodeVerifier: st.verifier,
        expectedState: st.state,
        expectedNonce: st.nonce,
        idTokenExpected: true,
      });
    } catch (e) {
      const [code, message] = classify(e);
      throw refuse(entry, code, message, e);
    }
    const idClaims = tokens.claims();
    if (!idClaims) throw refuse(entry, "SSO_NO_ID_TOKEN", "the token response had no id_token");
    if (typeof idClaims.iat === "number" && idClaims.iat > Date.now() / 1000 + ID_TOKEN_SKEW) {
      throw refuse(entry, "SSO_INVALID_ID_TOKEN", "the ID token was issued in the future (iat)");
    }
    let claims: Record<string, unknown> = { ...idClaims };
    if (this.entry.fetch_userinfo) {
      try {
        const info = await client.fetchUserInfo(r.config, tokens.access_token, idClaims.sub);
        claims = { ...claims, ...info };
      } catch (e) {
        throw refuse(entry, "SSO_USERINFO_FAILED", "the userinfo request failed", e);
      }
    }
    const identity = {
      protocol: "oidc" as const,
      name: this.name,
      claims,
      ...(tokens.access_token ? { access_token: tokens.access_token } : {}),
      ...(tokens.refresh_token ? { refresh_token: tokens.refresh_token } : {}),
    };
    return await runCallback(this.deps, r.fn, who, identity, st.query);
  }
}

type GrantCode =
  | "SSO_BAD_NONCE"
  | "SSO_TOKEN_EXCHANGE_FAILED"
  | "SSO_NO_ID_TOKEN"
  | "SSO_INVALID_ID_TOKEN"
  | "SSO_BAD_STATE"
  | "SSO_BAD_REQUEST";

/** Maps an openid-client / oauth4webapi failure of the code grant to its SSO_* code. */
function classify(e: unknown): [GrantCode, string] {
  if (e instanceof SvcError) return [e.code as GrantCode, e.message];
  if (
    e instanceof client.ResponseBodyError || e instanceof client.WWWAuthenticateChallengeError ||
    e instanceof TypeError
  ) {
    return ["SSO_TOKEN_EXCHANGE_FAILED", "the provider's token endpoint refused the code"];
  }
  if (e instanceof client.AuthorizationResponseError) {
    return ["SSO_BAD_REQUEST", "the provider refused the login"];
  }
  const err = e as { code?: string; cause?: { claim?: string; message?: string } };
  const text = `${(e as Error)?.message ?? ""} ${err.cause?.message ?? ""}`;
  const code = err.code ?? "";
  if (code === "OAUTH_JWT_CLAIM_COMPARISON_FAILED" && err.cause?.claim === "nonce") {
    return ["SSO_BAD_NONCE", "the ID token's nonce does not match the login"];
  }
  if (/"nonce"/.test(text)) return ["SSO_BAD_NONCE", "the ID token's nonce does not match"];
  if (/"id_token" property/.test(text)) {
    return ["SSO_NO_ID_TOKEN", "the token response had no id_token"];
  }
  if (
    code === "OAUTH_RESPONSE_IS_NOT_CONFORM" || code === "OAUTH_RESPONSE_IS_NOT_JSON" ||
    /"(access_token|token_type|expires_in|refresh_token|scope)" property/.test(text)
  ) {
    return ["SSO_TOKEN_EXCHANGE_FAILED", "the provider's token response was not usable"];
  }
  if (/state/.test(text) && code === "OAUTH_INVALID_RESPONSE") {
    return ["SSO_BAD_STATE", "the authorization response's state does not match"];
  }
  // The callback's own parameters (a code given twice, `iss` missing or another issuer's): the
  // authorization response is malformed, checked before any token is asked for.
  if (code === "OAUTH_INVALID_RESPONSE" && /parameter/.test(text)) {
    return ["SSO_BAD_REQUEST", `the callback is malformed (${reason(e).slice(0, 200)})`];
  }
  return [
    "SSO_INVALID_ID_TOKEN",
    `the ID token failed verification (${reason(e).slice(0, 200)})`,
  ];
}
