/**
 * Single sign-on endpoints under `/auth/` (docs/sso.md):
 * `GET /auth/oidc/<name>/login|callback`, `GET /auth/saml/<name>/login|metadata`,
 * `POST /auth/saml/<name>/acs`. Entries are resolved at startup in the background; an entry whose
 * provider is not reachable answers 503 SSO_NOT_READY and retries on the next login. Every
 * reload resolves them again (IdP metadata, OIDC discovery and keys).
 */
import { type Config, samlEntries } from "../config/load.ts";
import type { Database } from "../db/pool.ts";
import type { RequestRole } from "../auth/roles.ts";
import type { Sessions } from "../auth/session.ts";
import { SvcError } from "../svc_error.ts";
import { errorResponse } from "../http/error_response.ts";
import type { CallbackDeps, CallbackOutcome } from "./callback.ts";
import type { RouteHooks } from "../http/routes/request.ts";
import type { OidcEntry } from "./oidc.ts";
import type { SamlEntry } from "./saml.ts";
import { StateCookies } from "./login_state.ts";
import { log } from "../observe/log.ts";

/** What the SSO endpoints need. */
export interface SsoDeps {
  cfg: Config;
  db: Database;
  sessions: Sessions;
  /** The session secret (the state cookie's key is derived from it). */
  secret: Uint8Array;
  /** The declared routes' hooks (template rendering for callback results). */
  hooks?: RouteHooks;
}

/** The mounted SSO endpoints. */
export interface Sso {
  /** Resolves every entry (discovery, IdP metadata) in the background. */
  start(): Promise<void>;
  /**
   * Resolves every entry again (reload): IdP metadata and OIDC discovery are fetched anew, so a
   * key the provider dropped is no longer trusted. A failed fetch keeps the previous value.
   */
  refresh(): Promise<void>;
  /** Stops background refreshes (shutdown). */
  stop(): void;
  /** Answers a request under `/auth/`; `who` is the browser's current role. */
  handle(req: Request, who: RequestRole, anonymous: boolean): Promise<CallbackOutcome>;
}

function notFound(): SvcError {
  return new SvcError("HTTP_NOT_FOUND", "not found");
}

function methodNotAllowed(allow: string): SvcError {
  const e = new SvcError("HTTP_METHOD_NOT_ALLOWED", `use ${allow}`, { status: 405 });
  (e as SvcError & { allow?: string }).allow = allow;
  return e;
}

/** Builds the SSO endpoints from the `openid.*` and `saml.*` entries. */
export function createSso(deps: SsoDeps): Sso {
  const { cfg } = deps;
  const states = new StateCookies(deps.secret);
  const cb: CallbackDeps = {
    db: deps.db,
    sessions: deps.sessions,
    allowedAuth: cfg.http.functions.allowed_auth,
    sessionCookieName: cfg.jwt.cookie_name,
    cookiesMaxAge: cfg.http.cookies_max_age,
    hooks: deps.hooks,
  };
  const oidc = new Map<string, OidcEntry>();
  const saml = new Map<string, SamlEntry>();
  const samls = samlEntries(cfg);
  // The protocol libraries are loaded only when an entry uses them (they cost ~0.8 s to load).
  const loaded = (async () => {
    if (Object.keys(cfg.openid).length) {
      const { OidcEntry } = await import("./oidc.ts");
      for (const [name, e] of Object.entries(cfg.openid)) {
        oidc.set(name, new OidcEntry(name, e, cfg, states, cb));
      }
    }
    if (samls.length) {
      const { SamlEntry } = await import("./saml.ts");
      for (const [name, e] of samls) saml.set(name, new SamlEntry(name, e, cfg, states, cb));
    }
  })();

  const route = async (
    req: Request,
    who: RequestRole,
  ): Promise<CallbackOutcome> => {
    await loaded;
    const m = /^\/auth\/(oidc|saml)\/([^/]+)\/([a-z]+)$/.exec(new URL(req.url).pathname);
    if (!m) throw notFound();
    const [, protocol, rawName, action] = m;
    let name: string;
    try {
      name = decodeURIComponent(rawName);
    } catch {
      throw notFound();
    }
    const get = req.method === "GET" || req.method === "HEAD";
    const plain = (response: Response) => ({ response, sessionCookieSet: false });
    if (protocol === "oidc") {
      const entry = Object.hasOwn(cfg.openid, name) ? oidc.get(name) : undefined;
      if (!entry || (action !== "login" && action !== "callback")) throw notFound();
      if (!get) throw methodNotAllowed("GET, HEAD");
      if (action === "login") return plain(await entry.login(req));
      return await entry.callback(req, who);
    }
    const entry = saml.get(name);
    if (!entry || !["login", "acs", "metadata"].includes(action)) throw notFound();
    if (action === "acs") {
      if (req.method !== "POST") throw methodNotAllowed("POST");
      return await entry.acs(req, who);
    }
    if (!get) throw methodNotAllowed("GET, HEAD");
    if (action === "login") return plain(await entry.login(req));
    return plain(await entry.metadata());
  };

  const all = () => [...oidc.values(), ...saml.values()].map((e) => e.lazy);
  return {
    async refresh() {
      try {
        await loaded;
      } catch {
        return;
      }
      await Promise.all(all().map((l) => l.refresh()));
    },
    stop() {
      for (const l of all()) l.stop();
    },
    async start() {
      try {
        await loaded;
      } catch (e) {
        log.error("sso: cannot load the protocol libraries: {reason}", { reason: String(e) });
        return;
      }
      await Promise.all([
        ...[...oidc.values()].map((e) => e.lazy.start()),
        ...[...saml.values()].map((e) => e.lazy.start()),
      ]);
    },
    async handle(req, who, anonymous) {
      try {
        const out = await route(req, who);
        if (/\/(callback|acs)$/.test(new URL(req.url).pathname)) {
          out.response.headers.append("set-cookie", states.clear());
        }
        return out;
      } catch (e) {
        const headers = new Headers();
        const allow = (e as { allow?: string }).allow;
        if (allow) headers.set("allow", allow);
        if (/\/(callback|acs)$/.test(new URL(req.url).pathname)) {
          headers.append("set-cookie", states.clear());
        }
        return {
          response: errorResponse(e, { dev: cfg.dev, anonymous }, headers),
          sessionCookieSet: false,
        };
      }
    },
  };
}
