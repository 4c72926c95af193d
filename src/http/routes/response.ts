/**
 * Turning a function's `resp` and `content` into an HTTP response (docs/routes.md): status,
 * headers, cookies (default `Max-Age=http.cookies_max_age; Path=/; HttpOnly; Secure;
 * SameSite=Lax`, attributes overridable), `redirect` (303, or `status` if 3xx, with `Location`),
 * `jwt` (object: mint the session, gated by `http.functions.allowed_auth`; null: clear it,
 * always), `csp`, `template` (through a render hook). A malformed `resp` (status not an integer,
 * headers not an object, a control character in a header or cookie, a header or cookie that would
 * set, clear or shadow the session cookie) is 500 INTERNAL with the reason logged, never a split
 * header. An unsafe `redirect` (control character, backslash, scheme-relative `//host`) is
 * 400 HTTP_UNSAFE_REDIRECT, checked before the function's transaction commits
 * ({@link checkRedirect}, and the same rule in SQL for routes: {@link UNSAFE_REDIRECT_SQL}).
 */
import { type CookieAttributes, setCookie, setsCookie } from "../../auth/cookies.ts";
import type { Sessions } from "../../auth/session.ts";
import { SvcError } from "../../svc_error.ts";
import { log } from "../../observe/log.ts";
import { isJsonType, mediaType, type RouteHooks } from "./request.ts";

/** What applying a response needs. */
export interface ApplyContext {
  sessions: Sessions;
  /**
   * The session cookie's name (`jwt.cookie_name`): only `jwt` sets or clears it, never `cookies`
   * or a `Set-Cookie` in `headers`.
   */
  sessionCookieName: string;
  /** `http.cookies_max_age`. */
  cookiesMaxAge: number;
  /** The gating identifier (`schema.function`), or null when there is none (ahead of /svc). */
  authId: string | null;
  /** `http.functions.allowed_auth` compiled (it gates minting only), or null when unrestricted. */
  allowedAuth: RegExp | null;
  /** The route's default template, if any. */
  template?: string | null;
  /** Answer without a body (HEAD). */
  head?: boolean;
  hooks?: RouteHooks;
  /** The session claims the request carried (kept as `auth_time` is not renewed on re-mint). */
  now?: number;
}

/** An applied response, and whether it set or cleared the session cookie. */
export interface Applied {
  response: Response;
  /** True when `jwt` was present: the caller must not add its own renewal/clearing cookie. */
  session: boolean;
}

/**
 * Whether `id` may mint a session (`jwt` object) under `allowed` (unrestricted when null; no
 * identifier matches only then). Clearing it (`jwt: null`) is never gated.
 */
export function mayAuth(allowed: RegExp | null, id: string | null): boolean {
  if (allowed === null) return true;
  if (id === null) return false;
  return allowed.test(id);
}

/** 500 INTERNAL with the reason logged (never sent: it is the function's bug, not the client's). */
export function malformed(who: string | null, reason: string): SvcError {
  log.error("route {function} returned a malformed response: {reason}", {
    function: who ?? "(middleware)",
    reason,
  });
  return new SvcError("INTERNAL", "internal error");
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a header value cannot hold (Deno's HTTP server would abort the process on it). */
// deno-lint-ignore no-control-regex
const BAD = /[\x00-\x08\x0a-\x1f\x7f]/;

/**
 * A redirect target a browser could read as another host: a control character (C0, DEL, C1) or
 * a backslash anywhere (browsers drop tab/CR/LF and read `\` as `/`: `/\t/evil.com` and
 * `/\\evil.com` lead to evil.com), a percent-encoded tab/CR/LF (`/%09/evil.com`, decoded by
 * some frameworks on the way), or a scheme-relative `//host` (after leading spaces).
 */
// deno-lint-ignore no-control-regex
const UNSAFE_REDIRECT = /[\x00-\x1f\x7f-\x9f\\]|%0[9ad]|^ *\/\//i;

/**
 * The same rule as a PostgreSQL condition on a text expression `$v` (its text is spliced in
 * place of `$v`): routes refuse an unsafe redirect inside their pipelined transaction.
 */
export const UNSAFE_REDIRECT_SQL = String
  .raw`($v ~ '[\x01-\x1f\x7f-\x9f\\]' or $v ~* '%0[9ad]' or $v ~ '^ *//')`;

/** 400 HTTP_UNSAFE_REDIRECT. */
export function unsafeRedirect(): SvcError {
  return new SvcError(
    "HTTP_UNSAFE_REDIRECT",
    "the redirect target is refused: control character, backslash or scheme-relative //host",
  );
}

/**
 * `value` as a `Location`: 400 HTTP_UNSAFE_REDIRECT when it is unsafe (see the rule above);
 * characters beyond ASCII are percent-encoded (UTF-8).
 */
export function safeRedirect(value: string): string {
  if (UNSAFE_REDIRECT.test(value)) throw unsafeRedirect();
  try {
    return value.replace(/[\u0080-\u{10ffff}]+/gu, (m) => encodeURIComponent(m));
  } catch {
    throw unsafeRedirect(); // a lone surrogate
  }
}

/**
 * Checks the `redirect` of an HttpResponse-shaped value (an SSO callback's result) while its
 * transaction is still open: an unsafe one throws 400 HTTP_UNSAFE_REDIRECT, so nothing the
 * function wrote is committed.
 */
export function checkRedirect(envelope: unknown): void {
  if (!isObject(envelope) || typeof envelope.redirect !== "string") return;
  safeRedirect(envelope.redirect);
}

/** Whether a `Clear-Site-Data` header value clears cookies (`"cookies"` or `"*"`). */
function clearsCookies(value: string): boolean {
  return value.split(",").some((d) => /^"?\s*(cookies|\*)\s*"?$/i.test(d.trim()));
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** One `Set-Cookie` value from a `resp.cookies` entry; throws an Error with the reason. */
export function cookieHeader(name: string, spec: unknown, defaultMaxAge: number): string {
  if (!TOKEN.test(name)) throw new Error(`invalid cookie name ${JSON.stringify(name)}`);
  let o: Record<string, unknown>;
  if (spec === null) o = { value: "", max_age: 0 };
  else if (typeof spec === "string" || typeof spec === "number" || typeof spec === "boolean") {
    o = { value: String(spec) };
  } else if (isObject(spec)) o = spec;
  else throw new Error(`cookie ${name}: expected a string, null or an object`);
  const value = o.value === undefined || o.value === null ? "" : String(o.value);
  if (BAD.test(value)) throw new Error(`cookie ${name}: CR/LF in the value`);
  const attrs: CookieAttributes = {
    httpOnly: Boolean(o.http_only ?? true),
    secure: Boolean(o.secure ?? true),
  };
  // `max_age: null` makes a session cookie (no Max-Age).
  const maxAge = Object.hasOwn(o, "max_age") ? o.max_age : defaultMaxAge;
  if (maxAge !== null) {
    if (typeof maxAge !== "number" || !Number.isInteger(maxAge)) {
      throw new Error(`cookie ${name}: max_age must be an integer`);
    }
    attrs.maxAge = maxAge;
  }
  for (const key of ["path", "domain", "expires"] as const) {
    const v = key === "path" ? (o.path ?? "/") : o[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string" || BAD.test(v) || v.includes(";")) {
      throw new Error(`cookie ${name}: invalid ${key}`);
    }
    if (key !== "expires") attrs[key] = v;
    else if (Number.isNaN((attrs.expires = new Date(v)).getTime())) {
      throw new Error(`cookie ${name}: invalid expires (an HTTP date)`);
    }
  }
  const sameSite = o.same_site ?? "Lax";
  if (sameSite !== null) {
    if (sameSite !== "Strict" && sameSite !== "Lax" && sameSite !== "None") {
      throw new Error(`cookie ${name}: same_site must be Strict, Lax or None`);
    }
    attrs.sameSite = sameSite;
  }
  try {
    return setCookie(name, value, attrs);
  } catch (e) {
    throw new Error(`cookie ${name}: ${(e as Error).message}`);
  }
}

function randomNonce(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...b)).replace(/=+$/, "");
}

/**
 * Applies a function's `resp` and `content` to a Response. `resp` SQL/JSON null means the
 * defaults: 200 and `content` as JSON.
 */
export async function buildResponse(
  resp: unknown,
  content: unknown,
  ctx: ApplyContext,
): Promise<Applied> {
  const who = ctx.authId;
  if (resp !== null && resp !== undefined && !isObject(resp)) {
    throw malformed(who, "resp is not an object");
  }
  const r = (resp ?? {}) as Record<string, unknown>;
  const headers = new Headers();
  // status
  let status = 200;
  if (r.status !== undefined && r.status !== null) {
    if (
      typeof r.status !== "number" || !Number.isInteger(r.status) || r.status < 200 ||
      r.status > 599
    ) {
      throw malformed(who, `status ${JSON.stringify(r.status)} is not an integer HTTP status`);
    }
    status = r.status;
  }
  // headers
  if (r.headers !== undefined && r.headers !== null) {
    if (!isObject(r.headers)) throw malformed(who, "headers is not an object");
    for (const [k, v] of Object.entries(r.headers)) {
      if (!TOKEN.test(k)) throw malformed(who, `invalid header name ${JSON.stringify(k)}`);
      if (v === null || v === undefined) continue;
      const values = Array.isArray(v) ? v : [v];
      for (const one of values) {
        if (typeof one !== "string" && typeof one !== "number" && typeof one !== "boolean") {
          throw malformed(who, `header ${k}: value is not a string`);
        }
        const s = String(one);
        if (BAD.test(s)) throw malformed(who, `header ${k}: a control character in the value`);
        const lower = k.toLowerCase();
        if (
          (lower === "set-cookie" && setsCookie(s, ctx.sessionCookieName)) ||
          (lower === "clear-site-data" && clearsCookies(s))
        ) {
          throw malformed(
            who,
            `header ${k} would set or clear the session cookie ${ctx.sessionCookieName}: ` +
              "set resp.jwt instead",
          );
        }
        headers.append(k, s);
      }
    }
  }
  // cookies
  if (r.cookies !== undefined && r.cookies !== null) {
    if (!isObject(r.cookies)) throw malformed(who, "cookies is not an object");
    for (const [name, spec] of Object.entries(r.cookies)) {
      if (name === ctx.sessionCookieName) {
        throw malformed(who, `cookie ${name} is the session cookie: set resp.jwt instead`);
      }
      try {
        headers.append("set-cookie", cookieHeader(name, spec, ctx.cookiesMaxAge));
      } catch (e) {
        throw malformed(who, (e as Error).message);
      }
    }
  }
  // redirect
  if (r.redirect !== undefined && r.redirect !== null) {
    if (typeof r.redirect !== "string") throw malformed(who, "redirect is not a string");
    headers.set("location", safeRedirect(r.redirect));
    if (status < 300 || status > 399) status = 303;
  }
  // csp
  if (r.csp !== undefined && r.csp !== null) {
    if (typeof r.csp !== "string" || BAD.test(r.csp)) {
      throw malformed(who, "csp is not a single-line string");
    }
    headers.set("content-security-policy", r.csp);
  }
  // jwt: null (logout, revocation) is always honoured; only minting is gated.
  let session = false;
  if (Object.hasOwn(r, "jwt")) {
    if (r.jwt !== null && !mayAuth(ctx.allowedAuth, ctx.authId)) {
      throw new SvcError(
        "AUTH_JWT_NOT_ALLOWED",
        `${ctx.authId ?? "this function"} may not set the session (http.functions.allowed_auth)`,
      );
    }
    session = true;
    if (r.jwt === null) headers.append("set-cookie", ctx.sessions.clearCookie());
    else if (isObject(r.jwt)) {
      try {
        const minted = await ctx.sessions.mint(r.jwt, { now: ctx.now });
        headers.append("set-cookie", ctx.sessions.cookie(minted.token));
      } catch (e) {
        throw malformed(who, `jwt cannot be minted: ${(e as Error).message}`);
      }
    } else throw malformed(who, "jwt is neither an object nor null");
  }
  // body
  const template = r.template ?? ctx.template ?? null;
  let body: string | null;
  if (template !== null) {
    if (typeof template !== "string") throw malformed(who, "template is not a string");
    if (!ctx.hooks?.render) throw malformed(who, `template ${template}: no template renderer`);
    const nonce = randomNonce();
    const it = isObject(content) ? { ...content, nonce } : { content, nonce };
    body = await ctx.hooks.render(template, it, nonce);
    if (!headers.has("content-type")) headers.set("content-type", "text/html; charset=utf-8");
    // The page's policy carries this response's nonce (resp.csp replaces the configured one).
    if (ctx.hooks.csp) {
      const override = typeof r.csp === "string" ? r.csp : null;
      headers.set("content-security-policy", ctx.hooks.csp(nonce, override));
    }
  } else if (status === 204 || status === 304 || (status >= 300 && status < 400 && !content)) {
    body = null;
  } else {
    const type = mediaType(headers.get("content-type"));
    if (type && !isJsonType(type)) {
      body = typeof content === "string" ? content : content == null ? "" : JSON.stringify(content);
    } else {
      if (!type) headers.set("content-type", "application/json");
      body = JSON.stringify(content ?? null);
    }
  }
  return {
    response: new Response(ctx.head ? null : body, { status, headers }),
    session,
  };
}

/**
 * Applies a single-envelope HttpResponse-shaped value (as an SSO callback returns): `{status,
 * headers, cookies, jwt, csp, redirect, template, content, template_data}`. With a template,
 * `template_data` (else `content`) is the template's data; without, `content` is the body.
 */
export function applyHttpResponse(envelope: unknown, ctx: ApplyContext): Promise<Applied> {
  if (envelope === null || envelope === undefined) return buildResponse(null, null, ctx);
  if (!isObject(envelope)) throw malformed(ctx.authId, "the response is not an object");
  const { content, template_data, ...resp } = envelope;
  const template = resp.template ?? ctx.template ?? null;
  return buildResponse(
    resp,
    template !== null && template_data !== undefined ? template_data : content,
    ctx,
  );
}
