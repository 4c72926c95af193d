/**
 * The SSO callback: calls the deployer's database function with the verified identity (docs/sso.md
 * "The callback function": its payload and result) in one transaction as the browser's role (anonymous when it has
 * no session), and turns its HttpResponse-shaped jsonb into an HTTP response: `jwt` object mints
 * the session (gated by `http.functions.allowed_auth`), `jwt: null` clears it, `redirect` → 303,
 * `status`, `headers`, `cookies`, `content` as JSON, `template`/`template_data` through the routes'
 * render hook: the same code as declared routes (`applyHttpResponse`). An unsafe `redirect` is
 * refused (400 HTTP_UNSAFE_REDIRECT) before the transaction commits.
 */
import type { Database } from "../db/pool.ts";
import { transaction } from "../db/run_as.ts";
import type { RequestRole } from "../auth/roles.ts";
import type { Sessions } from "../auth/session.ts";
import { applyHttpResponse, checkRedirect } from "../http/routes/response.ts";
import type { RouteHooks } from "../http/routes/request.ts";
import { metrics } from "../observe/metrics.ts";

/** What the callback needs from the application. */
export interface CallbackDeps {
  db: Database;
  sessions: Sessions;
  /** `http.functions.allowed_auth` (unset: unrestricted). */
  allowedAuth?: string;
  /** `jwt.cookie_name` (a callback cannot set it through `cookies`). */
  sessionCookieName: string;
  /** `http.cookies_max_age`. */
  cookiesMaxAge: number;
  /**
   * The routes' hooks (template rendering); without a renderer a template is 500
   * HTTP_ROUTE_RESPONSE_INVALID.
   */
  hooks?: RouteHooks;
}

/** The identity part of the callback's payload (docs/sso.md "The callback function"). */
export interface Identity {
  protocol: "oidc" | "saml";
  name: string;
  claims: Record<string, unknown>;
  access_token?: string;
  refresh_token?: string;
  /** SAML: the assertion's NameID (full text). */
  name_id?: string | null;
}

/** The outcome: the response and whether it set (or cleared) the session cookie itself. */
export interface CallbackOutcome {
  response: Response;
  sessionCookieSet: boolean;
}

/** `schema.function` (or a bare name) → a quoted SQL identifier; throws on an unusable name. */
export function quotedFunction(name: string): string {
  const dot = name.indexOf(".");
  const parts = dot < 0 ? [name] : [name.slice(0, dot), name.slice(dot + 1)];
  if (parts.some((p) => p.length === 0 || p.length > 63 || p.includes("\0"))) {
    throw new TypeError(`not a function name: ${name}`);
  }
  return parts.map((p) => `"${p.replaceAll('"', '""')}"`).join(".");
}

/**
 * Calls `fn` with `{jwt, identity, state}` as `who` and builds the response. `jwt` is the
 * browser's verified session claims (null when anonymous), never the raw token. Errors (RSnnn,
 * database errors, a refused jwt) are thrown as they come, for the error mapper.
 */
export async function runCallback(
  deps: CallbackDeps,
  fn: string,
  who: RequestRole,
  identity: Identity,
  state: unknown,
): Promise<CallbackOutcome> {
  const payload = { jwt: who.claims, identity, state: state ?? null };
  const sql = `select ${quotedFunction(fn)}($1::text::jsonb) as r`;
  const provider = `${identity.protocol === "oidc" ? "openid" : "saml"}.${identity.name}`;
  try {
    const rows = await transaction(deps.db, who, async (tx) => {
      const rows = await tx.query(sql, [JSON.stringify(payload)]);
      // An unsafe redirect is refused before the commit: nothing of the callback persists.
      checkRedirect(rows[0]?.r);
      return rows;
    });
    const out = await applyResult(deps, fn, rows[0]?.r);
    metrics.ssoLogins.inc({ provider, outcome: "ok" });
    return out;
  } catch (e) {
    // The identity was verified; the callback function refused it or failed.
    metrics.ssoLogins.inc({ provider, outcome: "callback_failed" });
    throw e;
  }
}

/** Turns the callback's jsonb result into the HTTP response (the routes' single envelope). */
export async function applyResult(
  deps: CallbackDeps,
  fn: string,
  result: unknown,
): Promise<CallbackOutcome> {
  const applied = await applyHttpResponse(result ?? null, {
    sessions: deps.sessions,
    sessionCookieName: deps.sessionCookieName,
    cookiesMaxAge: deps.cookiesMaxAge,
    authId: fn,
    allowedAuth: deps.allowedAuth === undefined ? null : new RegExp(deps.allowedAuth),
    hooks: deps.hooks,
  });
  return { response: applied.response, sessionCookieSet: applied.session };
}
