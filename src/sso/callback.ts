/**
 * The SSO callback: calls the deployer's database function with the verified identity (SPEC "SSO
 * callback payload and result") in one transaction as the browser's role (anonymous when it has
 * no session), and turns its HttpResponse-shaped jsonb into an HTTP response: `jwt` object mints
 * the session (gated by `http.functions.allowed_auth`), `jwt: null` clears it, `redirect` → 303,
 * `status`, `headers`, `content` as JSON, `template`/`template_data` through a render hook.
 * Kept small so it can later share the declared routes' response code.
 */
import type { Database, RequestRole } from "../db/pool.ts";
import type { Sessions } from "../auth/session.ts";
import { SvcError } from "../errors.ts";
import { log } from "../log.ts";

/** Renders a template with data (wired by the lead with the routes' templates). */
export type RenderHook = (template: string, data: unknown) => Promise<string> | string;

/** What the callback needs from the application. */
export interface CallbackDeps {
  db: Database;
  sessions: Sessions;
  /** `http.functions.allowed_auth` (unset: unrestricted). */
  allowedAuth?: string;
  render?: RenderHook;
}

/** The SPEC payload's identity part. */
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
  const rows = await deps.db.transaction(who, (tx) => tx.query(sql, [JSON.stringify(payload)]));
  return await applyResult(deps, fn, rows[0]?.r);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Turns the callback's jsonb result into the HTTP response. */
export async function applyResult(
  deps: CallbackDeps,
  fn: string,
  result: unknown,
): Promise<CallbackOutcome> {
  const r = isObject(result) ? result : {};
  const headers = new Headers();
  if (isObject(r.headers)) {
    for (const [k, v] of Object.entries(r.headers)) {
      if (v !== null && v !== undefined) headers.set(k, String(v));
    }
  }
  let sessionCookieSet = false;
  if (Object.hasOwn(r, "jwt")) {
    if (deps.allowedAuth !== undefined && !new RegExp(deps.allowedAuth).test(fn)) {
      throw new SvcError("AUTH_JWT_NOT_ALLOWED", `${fn} is not allowed to set jwt`);
    }
    if (r.jwt === null) {
      headers.append("set-cookie", deps.sessions.clearCookie());
      sessionCookieSet = true;
    } else if (isObject(r.jwt)) {
      let minted;
      try {
        minted = await deps.sessions.mint(r.jwt);
      } catch (e) {
        log.error("sso callback {fn} returned an unusable jwt: {reason}", {
          fn,
          reason: (e as Error).message,
        });
        throw new SvcError("INTERNAL", "the callback returned an unusable jwt");
      }
      headers.append("set-cookie", deps.sessions.cookie(minted.token));
      sessionCookieSet = true;
    }
  }
  let status = typeof r.status === "number" && r.status >= 200 && r.status <= 599
    ? Math.trunc(r.status)
    : undefined;
  if (typeof r.redirect === "string" && r.redirect !== "") {
    headers.set("location", r.redirect);
    status ??= 303;
  }
  let body: string | null = null;
  const template = typeof r.template === "string" ? r.template : undefined;
  if (template !== undefined) {
    if (!deps.render) {
      log.error("sso callback {fn} asked for template {template}, but templates are not wired", {
        fn,
        template,
      });
      throw new SvcError("INTERNAL", "template rendering is not available");
    }
    body = await deps.render(template, r.template_data ?? r.content ?? null);
    if (!headers.has("content-type")) headers.set("content-type", "text/html; charset=utf-8");
  } else if (r.content !== undefined && r.content !== null) {
    const ct = headers.get("content-type");
    if (ct && !/json/i.test(ct) && typeof r.content === "string") body = r.content;
    else {
      body = JSON.stringify(r.content);
      if (!ct) headers.set("content-type", "application/json");
    }
  }
  status ??= body === null ? 204 : 200;
  if (status === 204 || status === 304) body = null;
  return { response: new Response(body, { status, headers }), sessionCookieSet };
}
