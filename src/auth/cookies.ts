/**
 * Cookies, read and written in one place. A `Cookie` header is parsed keeping every value of a
 * repeated name, in order: the session cookie present twice (set for several paths or domains)
 * ends the session (docs/security.md "Sessions and the authenticator role"), and a login state cookie must be there exactly
 * once. `Set-Cookie` values are written by the `cookie` library, values percent-encoded.
 */
import { stringifySetCookie } from "cookie";

/** Every cookie of a `Cookie` header: name → its values in header order (quotes removed, not decoded). */
export function parseCookieHeader(header: string | null | undefined): Map<string, string[]> {
  const out = new Map<string, string[]>();
  if (typeof header !== "string" || header.length === 0) return out;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq === -1) continue;
    const name = pair.slice(0, eq).trim();
    if (name === "") continue;
    let value = pair.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) {
      value = value.slice(1, -1);
    }
    const values = out.get(name);
    if (values) values.push(value);
    else out.set(name, [value]);
  }
  return out;
}

/**
 * All values of cookie `name` in a `Cookie` header, in order (surrounding double quotes
 * removed). More than one value means the cookie was set for several paths/domains.
 */
export function cookieValues(header: string | null | undefined, name: string): string[] {
  return parseCookieHeader(header).get(name) ?? [];
}

/**
 * The cookies a declared route's function sees (`req.cookies`): the first value of each name,
 * percent-decoded when it decodes to text PostgreSQL can hold (not when it is invalid UTF-8 or
 * holds NUL: a cookie any site of the domain can plant must not make every route fail), leaving
 * out `exclude` (the session cookie).
 */
export function requestCookies(
  header: string | null | undefined,
  exclude: string,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, [value]] of parseCookieHeader(header)) {
    if (name === exclude) continue;
    const raw = utf8Bytes(value);
    try {
      const decoded = decodeURIComponent(raw);
      out[name] = decoded.includes("\0") ? raw : decoded;
    } catch {
      out[name] = raw;
    }
  }
  return out;
}

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A header value's characters (one per byte, as HTTP hands them over) read as UTF-8 when they are
 * valid UTF-8 (a browser sends a cookie set to `café` as its UTF-8 bytes), else unchanged.
 */
function utf8Bytes(value: string): string {
  // deno-lint-ignore no-control-regex
  if (!/[^\u0000-\u007f]/.test(value) || /[^\u0000-\u00ff]/.test(value)) return value;
  try {
    return STRICT_UTF8.decode(Uint8Array.from(value, (c) => c.charCodeAt(0)));
  } catch {
    return value;
  }
}

/** A `Cookie` header without the pairs named `name` (empty when nothing else is left). */
export function withoutCookie(header: string, name: string): string {
  return header.split(";").filter((p) => {
    const eq = p.indexOf("=");
    return eq === -1 || p.slice(0, eq).trim() !== name;
  }).map((p) => p.trim()).join("; ");
}

/** The attributes of a `Set-Cookie` value. */
export interface CookieAttributes {
  /** `Max-Age` in seconds (0 deletes the cookie); unset makes a browser-session cookie. */
  maxAge?: number;
  path?: string;
  domain?: string;
  expires?: Date;
  httpOnly?: boolean;
  secure?: boolean;
  sameSite?: "Strict" | "Lax" | "None";
}

const SAME_SITE = { Strict: "strict", Lax: "lax", None: "none" } as const;

/**
 * A `Set-Cookie` value: `name=value` (percent-encoded) then `Max-Age`, `Domain`, `Path`,
 * `Expires`, `HttpOnly`, `Secure`, `SameSite`. Throws a TypeError naming what is invalid (a name
 * that is not a token, a domain or path a browser would not take, an out-of-range date).
 */
export function setCookie(name: string, value: string, attrs: CookieAttributes = {}): string {
  const { sameSite, ...rest } = attrs;
  return stringifySetCookie(
    { name, value, ...rest, sameSite: sameSite && SAME_SITE[sameSite] },
    { encode: encodeURIComponent },
  );
}

/**
 * The cookie name a client may take from one `Set-Cookie` value, as a browser reads it: the
 * name-value pair ends at the first `;`, the name at the first `=`, both trimmed; a quoted name
 * is read unquoted. A pair without a name (no `=`, or an empty name) is sent back by browsers as
 * its bare value, which a server then reads as `name=value`: its name is taken from the value.
 */
export function setCookieName(value: string): string {
  const pair = value.split(";", 1)[0];
  const eq = pair.indexOf("=");
  let name = eq < 0 ? "" : pair.slice(0, eq).trim();
  if (name === "") {
    const bare = (eq < 0 ? pair : pair.slice(eq + 1)).trim();
    const eq2 = bare.indexOf("=");
    name = (eq2 < 0 ? bare : bare.slice(0, eq2)).trim();
  }
  if (name.length >= 2 && name.startsWith('"') && name.endsWith('"')) {
    name = name.slice(1, -1).trim();
  }
  return name;
}

/**
 * Whether a `Set-Cookie` header value would set, clear or shadow the cookie `name` (any path,
 * domain or other attribute). Each comma-separated part is read as a cookie too, as a client
 * that splits a folded `Set-Cookie` line would (an `Expires` date's comma never yields a name).
 */
export function setsCookie(value: string, name: string): boolean {
  if (setCookieName(value) === name) return true;
  return value.includes(",") && value.split(",").some((part) => setCookieName(part) === name);
}
