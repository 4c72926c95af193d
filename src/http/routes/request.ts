/**
 * Building a route's `req` (docs/routes.md): `{method, path, params, query, headers, cookies,
 * body, jwt}`. Bodies are capped by `http.max_body_size` (413 before buffering more), strict
 * UTF-8 (400 QUERY_INVALID), and decoded by content type: JSON, urlencoded form, text; multipart
 * only through a hook (else 415).
 */
import type { ReceiveBudget } from "../../request/body_budget.ts";
import { bearerToken } from "../../auth/bearer.ts";
import { requestCookies, withoutCookie } from "../../auth/cookies.ts";
import {
  collectPairs,
  decodeUtf8,
  parseJson,
  readBodyBytes,
  requireIdentity,
  requireUtf8,
} from "../../request/body.ts";
import { SvcError } from "../../svc_error.ts";
import type { Route } from "../../state/route_table.ts";

/** Hooks other parts of svc plug into the route path. */
export interface RouteHooks {
  /** Renders a template with `it` (the content, `it.nonce` set) and the response's CSP nonce. */
  render?(template: string, it: unknown, nonce: string): Promise<string>;
  /** Decodes a multipart/form-data body for a route (fields, files; `stream_upload` aware). */
  decodeMultipart?(req: Request, route: Route, receiving?: ReceiveBudget): Promise<unknown>;
  /** The Content-Security-Policy of a rendered page: configured (or `override`) plus the nonce. */
  csp?(nonce: string, override: string | null): string;
}

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** The `req` argument of a full-control function. */
export interface RouteRequest {
  method: string;
  path: string;
  params: Record<string, string>;
  query: Record<string, string | string[]>;
  headers: Record<string, string>;
  cookies: Record<string, string>;
  body: unknown;
  jwt: Record<string, unknown> | null;
}

/** The media type of a Content-Type header, lower-case, without parameters. */
export function mediaType(contentType: string | null): string {
  return (contentType ?? "").split(";")[0].trim().toLowerCase();
}

/** Whether a media type is JSON (`application/json`, `…+json`). */
export function isJsonType(type: string): boolean {
  return type === "application/json" || type.endsWith("+json");
}

/**
 * A route request's body as read: bytes still to decode by their media type (JSON, urlencoded
 * form, `text/*`), or a value already decoded (multipart; no body → null). Reading and decoding are
 * two steps so that a large body is decoded only once the worker's body budget admits it
 * (src/request/body_budget.ts).
 */
export type ReadBody = { bytes: Uint8Array; type: string } | { value: unknown };

/**
 * Reads a request body: JSON, urlencoded form (repeated keys → arrays), `text/*` (a string) as
 * bytes still to decode ({@link decodeReadBody}), multipart decoded through
 * `hooks.decodeMultipart` (else 415); no body → null. Another content type with a body, a charset
 * other than UTF-8 or a `Content-Encoding` → 415 HTTP_UNSUPPORTED_MEDIA_TYPE.
 */
export async function readBody(
  req: Request,
  route: Route,
  maxBytes: number,
  hooks: RouteHooks,
  idleMs = 0,
  receiving?: ReceiveBudget,
): Promise<ReadBody> {
  const contentType = req.headers.get("content-type");
  const type = mediaType(contentType);
  if (type === "multipart/form-data") {
    if (!hooks.decodeMultipart) {
      throw new SvcError("HTTP_UNSUPPORTED_MEDIA_TYPE", "multipart bodies are not supported here");
    }
    requireIdentity(req);
    return { value: await hooks.decodeMultipart(req, route, receiving) };
  }
  if (req.method === "GET" || req.method === "HEAD") return { value: null };
  const bytes = await readBodyBytes(req, maxBytes, idleMs, receiving);
  if (bytes.length === 0) return { value: null };
  if (contentType !== null) requireUtf8(contentType);
  if (
    !isJsonType(type) && type !== "application/x-www-form-urlencoded" && !type.startsWith("text/")
  ) {
    throw new SvcError(
      "HTTP_UNSUPPORTED_MEDIA_TYPE",
      `unsupported request content type "${type || "(none)"}": send application/json, ` +
        "application/x-www-form-urlencoded, multipart/form-data or text/*",
    );
  }
  return { bytes, type };
}

/** The value of a body {@link readBody} read (invalid UTF-8 or JSON → 400 QUERY_INVALID). */
export function decodeReadBody(body: ReadBody, maxDepth = Infinity): unknown {
  if (!("bytes" in body)) return body.value;
  const text = decodeUtf8(body.bytes);
  if (isJsonType(body.type)) return parseJson(text, maxDepth);
  if (body.type === "application/x-www-form-urlencoded") {
    return collectPairs(new URLSearchParams(text));
  }
  return text;
}

/** Builds `req` (everything but the body, which the caller decodes). */
export function buildRequest(
  req: Request,
  url: URL,
  params: Record<string, string>,
  jwt: Record<string, unknown> | null,
  sessionCookie: string,
): RouteRequest {
  const headers: Record<string, string> = {};
  req.headers.forEach((v, k) => (headers[k.toLowerCase()] = v));
  const cookies = requestCookies(req.headers.get("cookie"), sessionCookie);
  // The session token is not handed to functions: they get its verified claims as `jwt`.
  if (headers.cookie !== undefined) {
    const kept = withoutCookie(headers.cookie, sessionCookie);
    if (kept) headers.cookie = kept;
    else delete headers.cookie;
  }
  // Nor is a Bearer token (src/auth/bearer.ts); another Authorization scheme is data.
  if (bearerToken(headers.authorization) !== undefined) delete headers.authorization;
  let path: string;
  try {
    path = decodeURIComponent(url.pathname);
  } catch {
    path = url.pathname;
  }
  return {
    method: req.method,
    path,
    params,
    query: collectPairs(url.searchParams),
    headers,
    cookies,
    body: null,
    jwt,
  };
}
