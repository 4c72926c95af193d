/**
 * Turning a function's `resp` and `content` into an HTTP response (docs/routes.md): status,
 * headers, cookies (default `Max-Age=http.cookies_max_age; Path=/; HttpOnly; Secure;
 * SameSite=Lax`, attributes overridable), `redirect` (303, or `status` if 3xx, with `Location`),
 * `jwt` (object: mint the session, gated by `http.functions.allowed_auth`; null: clear it,
 * always), `csp`, `template` (through a render hook). A malformed `resp` (any field of the wrong
 * type or value: status not an integer, headers not an object of strings, a control character in
 * a header or cookie, an unknown cookie attribute, an `expires` that is not a date with a time
 * zone, a header or cookie that would set, clear or shadow the session cookie) is 500
 * HTTP_ROUTE_RESPONSE_INVALID saying what was wrong (the function author's error, never the
 * client's), never a split header. An unsafe `redirect` (control character, backslash, scheme-relative `//host`) is
 * 400 HTTP_UNSAFE_REDIRECT, checked before the function's transaction commits
 * ({@link checkRedirect}, and the same rule in SQL for routes: {@link UNSAFE_REDIRECT_SQL}).
 */
import { type CookieAttributes, setCookie, setsCookie } from "../../auth/cookies.ts";
import type { Sessions } from "../../auth/session.ts";
import { SvcError } from "../../svc_error.ts";
import { newNonce } from "../csp.ts";
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
  hooks?: RouteHooks;
  /** The session claims the request carried (kept as `auth_time` is not renewed on re-mint). */
  now?: number;
  /**
   * Whether the request came from another site's page (src/http/routes/cross_site.ts), asked when
   * its `jwt` would mint a session: then it may not (login CSRF); clearing one stays allowed.
   */
  crossSite?: () => boolean;
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

/**
 * 500 HTTP_ROUTE_RESPONSE_INVALID: the function's response cannot be sent as it is (its author's
 * bug, not the client's). The answer says what was wrong (`reason` names fields, never their
 * values); the log adds the function and `value`, when given.
 */
export function malformed(who: string | null, reason: string, value?: unknown): SvcError {
  log.error("route {function} returned a malformed response: {reason}", {
    function: who ?? "(middleware)",
    reason: value === undefined ? reason : `${reason} (${safeJson(value)})`,
  });
  return new SvcError(
    "HTTP_ROUTE_RESPONSE_INVALID",
    `the function's response cannot be sent: ${reason}`,
  );
}

function safeJson(v: unknown): string {
  try {
    return String(JSON.stringify(v)).slice(0, 200);
  } catch {
    return String(v);
  }
}

/** A name from the function (a header or cookie name) quoted for a message, at most 64 chars. */
function quoted(name: string): string {
  return JSON.stringify(name.length > 64 ? name.slice(0, 64) + "…" : name);
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a header value cannot hold (Deno's HTTP server would abort the process on it). */
// deno-lint-ignore no-control-regex
const BAD = /[\x00-\x08\x0a-\x1f\x7f]/;
/** What a header value cannot carry either: a character beyond Latin-1 (not one byte). */
const WIDE = /[\u0100-\u{10ffff}]/u;

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
  if (!isObject(envelope)) return;
  if (typeof envelope.redirect === "string") safeRedirect(envelope.redirect);
  if (!isObject(envelope.headers)) return;
  for (const [k, v] of Object.entries(envelope.headers)) {
    if (k.toLowerCase() !== "location") continue;
    for (const one of Array.isArray(v) ? v : [v]) if (typeof one === "string") safeRedirect(one);
  }
}

/**
 * Headers svc sets itself when it frames the answer (hop-by-hop and body framing): a function
 * giving one is refused rather than sent beside svc's own or silently replaced.
 */
const FRAMING = new Set([
  "connection",
  "keep-alive",
  "upgrade",
  "transfer-encoding",
  "te",
  "trailer",
  "proxy-connection",
  "content-length",
]);

/** Whether a `Clear-Site-Data` header value clears cookies (`"cookies"` or `"*"`). */
function clearsCookies(value: string): boolean {
  return value.split(",").some((d) => /^"?\s*(cookies|\*)\s*"?$/i.test(d.trim()));
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** The attributes a `resp.cookies` object may carry. */
const COOKIE_KEYS = new Set([
  "value",
  "max_age",
  "path",
  "domain",
  "expires",
  "http_only",
  "secure",
  "same_site",
]);

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const ISO_DATE =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}(?::?\d{2})?))?$/i;
const HTTP_DATE =
  /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/;

/**
 * A cookie's `expires` as a Date, or null when it is not one of the forms read (the same
 * whatever the server's time zone or JavaScript engine): ISO 8601 `YYYY-MM-DD` (midnight UTC) or
 * `YYYY-MM-DDThh:mm[:ss[.fraction]]` with `Z` or an offset (`+02`, `+02:00`; a space for the `T`
 * as in PostgreSQL's text), or an HTTP date (`Wed, 02 Jan 2030 03:04:05 GMT`); years 1601–9999.
 */
export function cookieExpires(v: string): Date | null {
  let y: number, mo: number, d: number, h = 0, mi = 0, s = 0, offset = 0;
  const iso = ISO_DATE.exec(v);
  const http = iso ? null : HTTP_DATE.exec(v);
  if (iso) {
    [y, mo, d] = [Number(iso[1]), Number(iso[2]), Number(iso[3])];
    if (iso[4] !== undefined) {
      [h, mi, s] = [Number(iso[4]), Number(iso[5]), Number(iso[6] ?? 0)];
      const z = iso[7].toUpperCase();
      if (z !== "Z") {
        const digits = z.slice(1).replace(":", "");
        const oh = Number(digits.slice(0, 2)), om = Number(digits.slice(2) || 0);
        if (oh > 23 || om > 59) return null;
        offset = (z[0] === "-" ? -1 : 1) * (oh * 60 + om);
      }
    }
  } else if (http) {
    [d, mo, y] = [Number(http[1]), MONTHS.indexOf(http[2]) + 1, Number(http[3])];
    [h, mi, s] = [Number(http[4]), Number(http[5]), Number(http[6])];
  } else return null;
  if (y < 1601 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59) return null;
  const t = Date.UTC(y, mo - 1, d, h, mi, s);
  const check = new Date(t);
  if (check.getUTCDate() !== d || check.getUTCMonth() !== mo - 1) return null; // 30 Feb
  const out = new Date(t - offset * 60_000);
  const year = out.getUTCFullYear();
  return year >= 1601 && year <= 9999 ? out : null;
}

/** One `Set-Cookie` value from a `resp.cookies` entry; throws an Error with the reason. */
export function cookieHeader(name: string, spec: unknown, defaultMaxAge: number): string {
  if (!TOKEN.test(name)) throw new Error(`invalid cookie name ${quoted(name)}`);
  const c = `cookie ${name}`;
  let o: Record<string, unknown>;
  if (spec === null) o = { value: "", max_age: 0 };
  else if (typeof spec === "string" || typeof spec === "number" || typeof spec === "boolean") {
    o = { value: String(spec) };
  } else if (isObject(spec)) o = spec;
  else throw new Error(`${c}: expected a string, null or an object`);
  for (const k of Object.keys(o)) {
    if (!COOKIE_KEYS.has(k)) {
      throw new Error(`${c}: unknown attribute ${quoted(k)} (${[...COOKIE_KEYS].join(", ")})`);
    }
  }
  const raw = o.value;
  if (raw !== undefined && raw !== null && typeof raw === "object") {
    throw new Error(`${c}: value must be a string, a number or a boolean`);
  }
  const value = raw === undefined || raw === null ? "" : String(raw);
  if (BAD.test(value)) throw new Error(`${c}: a control character in the value`);
  const flag = (key: "http_only" | "secure"): boolean => {
    const v = o[key];
    if (v === undefined || v === null) return true;
    if (typeof v !== "boolean") throw new Error(`${c}: ${key} must be true or false`);
    return v;
  };
  const attrs: CookieAttributes = { httpOnly: flag("http_only"), secure: flag("secure") };
  // `max_age: null` makes a session cookie (no Max-Age).
  const maxAge = Object.hasOwn(o, "max_age") ? o.max_age : defaultMaxAge;
  if (maxAge !== null) {
    if (typeof maxAge !== "number" || !Number.isSafeInteger(maxAge)) {
      throw new Error(`${c}: max_age must be an integer (seconds)`);
    }
    attrs.maxAge = maxAge;
  }
  for (const key of ["path", "domain", "expires"] as const) {
    const v = key === "path" ? (o.path ?? "/") : o[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string" || BAD.test(v) || WIDE.test(v) || v.includes(";")) {
      throw new Error(`${c}: ${key} must be a string without control characters or ';'`);
    }
    if (key !== "expires") attrs[key] = v;
    else {
      const date = cookieExpires(v);
      if (date === null) {
        throw new Error(
          `${c}: expires must be an ISO 8601 date (a time with Z or an offset) or an HTTP date, ` +
            "years 1601-9999",
        );
      }
      attrs.expires = date;
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
    throw new Error(`${c}: ${(e as Error).message.replace(/^cookie /, "")}`);
  }
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
    throw malformed(who, "resp is not an object (or null)");
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
      throw malformed(who, "status must be an integer HTTP status 200-599", r.status);
    }
    status = r.status;
  }
  // headers
  if (r.headers !== undefined && r.headers !== null) {
    if (!isObject(r.headers)) throw malformed(who, "headers is not an object");
    for (const [k, v] of Object.entries(r.headers)) {
      if (!TOKEN.test(k)) throw malformed(who, `invalid header name ${quoted(k)}`);
      const lower = k.toLowerCase();
      if (FRAMING.has(lower)) {
        throw malformed(who, `header ${k} is svc's own (it frames the answer)`);
      }
      if (v === null || v === undefined) continue;
      const values = Array.isArray(v) ? v : [v];
      for (const one of values) {
        if (typeof one !== "string" && typeof one !== "number" && typeof one !== "boolean") {
          throw malformed(who, `header ${k}: value is not a string`);
        }
        // A Location is a redirect target: the same check (and encoding) as `redirect`.
        const s = lower === "location" ? safeRedirect(String(one)) : String(one);
        if (BAD.test(s)) throw malformed(who, `header ${k}: a control character in the value`);
        if (WIDE.test(s)) {
          throw malformed(who, `header ${k}: a character beyond Latin-1 in the value`);
        }
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
    if (typeof r.csp !== "string" || BAD.test(r.csp) || WIDE.test(r.csp)) {
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
    if (r.jwt !== null && ctx.crossSite?.()) {
      throw new SvcError(
        "AUTH_JWT_NOT_ALLOWED",
        "a request from another site's page may not set the session (login CSRF): log in from " +
          "this site, or list the page's origin in http.cors.allowed_origins",
      );
    }
    if (r.jwt === null) headers.append("set-cookie", ctx.sessions.clearCookie());
    else if (isObject(r.jwt)) {
      try {
        const minted = await ctx.sessions.mint(r.jwt, { now: ctx.now });
        headers.append("set-cookie", ctx.sessions.sessionCookie(minted));
      } catch (e) {
        throw malformed(who, `jwt cannot be minted: ${(e as Error).message}`);
      }
    } else throw malformed(who, "jwt is neither an object nor null");
  }
  // body
  // `template: null` overrides the route's default: no template, the content as it is.
  const template = Object.hasOwn(r, "template") ? r.template ?? null : ctx.template ?? null;
  let body: string | null;
  if (template !== null) {
    if (typeof template !== "string") throw malformed(who, "template is not a string");
    if (!ctx.hooks?.render) throw malformed(who, `template ${template}: no template renderer`);
    const nonce = newNonce();
    const it = isObject(content) ? { ...content, nonce } : { content, nonce };
    body = await ctx.hooks.render(template, it, nonce);
    if (!headers.has("content-type")) headers.set("content-type", "text/html; charset=utf-8");
    // The page's policy carries this response's nonce (resp.csp replaces the configured one).
    if (ctx.hooks.csp) {
      const override = typeof r.csp === "string" ? r.csp : null;
      headers.set("content-security-policy", ctx.hooks.csp(nonce, override));
    }
  } else if (
    status === 204 || status === 205 || status === 304 ||
    (status >= 300 && status < 400 && !content)
  ) {
    body = null;
  } else {
    const type = mediaType(headers.get("content-type"));
    if (type && !isJsonType(type)) {
      body = typeof content === "string" ? content : content == null ? "" : JSON.stringify(content);
      // An HTML page's own policy (`resp.csp`) gets a fresh nonce as the configured one would.
      if (type === "text/html" && typeof r.csp === "string" && ctx.hooks?.csp) {
        headers.set("content-security-policy", ctx.hooks.csp(newNonce(), r.csp));
      }
    } else {
      if (!type) headers.set("content-type", "application/json");
      body = JSON.stringify(content ?? null);
    }
  }
  return {
    // HEAD: the runtime sends the headers (the length included) without the body.
    response: new Response(body, { status, headers }),
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
  const template = Object.hasOwn(resp, "template") ? resp.template ?? null : ctx.template ?? null;
  return buildResponse(
    resp,
    template !== null && template_data !== undefined ? template_data : content,
    ctx,
  );
}
