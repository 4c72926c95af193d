/**
 * The fifth step of every request (src/http/server.ts): the answer of a failure, then the session
 * cookie and the request id added to the response (copying one whose headers are immutable), the
 * request counted (`svc_http_requests_total`, its duration) and its access line written.
 *
 * @module
 */
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import { observeDbError, observeRequest } from "../observe/metrics.ts";
import type { PathKind } from "../observe/access.ts";
import { errorResponse } from "./error_response.ts";

/** The error answer of a failed request (an unexpected error is logged with its stack). */
export function failure(e: Error, dev: boolean, anonymous: boolean): Response {
  if (!(e instanceof SvcError) && !(e as { code?: string }).code) {
    log.error("unhandled error: {error}", { error: e.stack ?? String(e) });
  }
  observeDbError((e as { code?: unknown }).code);
  return errorResponse(e, { dev, anonymous });
}

/** What the access line and the metrics say of a request. */
export interface Finished {
  /** `performance.now()` when the request came. */
  t0: number;
  requestId: string;
  kind: PathKind;
  method: string;
  path: string;
  setCookie: string | null;
  /** Set when the answer itself set or cleared the session cookie (a route's `jwt`). */
  sessionAnswer?: boolean;
  role: string | undefined;
  /** False when the request ran as a session's role (its answer depends on the session). */
  anonymous?: boolean;
}

/**
 * The `Cache-Control` an answer needs for its session, or null: a session cookie set or cleared
 * must never be stored by a shared cache (`private, no-store`, over what the answer said), and an
 * answer for a session is the browser's alone (`private`, unless the answer says otherwise).
 */
function sessionCaching(t: Finished, has: boolean): string | null {
  if (t.setCookie || t.sessionAnswer) return "private, no-store";
  return t.anonymous === false && !has ? "private" : null;
}

/** Adds the session cookie and request id, counts the request, logs it; the response to send. */
export function finish(res: Response, t: Finished, record: boolean): Response {
  try {
    res.headers.set("x-request-id", t.requestId);
  } catch {
    // Immutable headers (e.g. Response.redirect): copy the response to add ours.
    res = new Response(res.body, res);
    res.headers.set("x-request-id", t.requestId);
  }
  if (t.setCookie) res.headers.append("set-cookie", t.setCookie);
  const caching = sessionCaching(t, res.headers.has("cache-control"));
  if (caching) res.headers.set("cache-control", caching);
  finished(t, res.status, record);
  return res;
}

/**
 * {@link finish}'s headers added to the fields of a response not built yet (a
 * src/http/plain_answer.ts answer); the request is counted and logged by {@link finished}.
 */
export function finishFields(t: Finished, fields: Record<string, string>): void {
  if (t.setCookie) fields["set-cookie"] = t.setCookie;
  fields["x-request-id"] = t.requestId;
  const caching = sessionCaching(t, fields["cache-control"] !== undefined);
  if (caching) fields["cache-control"] = caching;
}

/** Counts a request answered with `status` and writes its access line. */
export function finished(t: Finished, status: number, record: boolean): void {
  const ms = performance.now() - t.t0;
  if (record) observeRequest(t.kind, status, ms / 1000);
  // The line's fields are not even gathered when the level drops it (the bench runs at error).
  if (!log.isEnabledFor("info")) return;
  log.info("{method} {path} {status} {duration_ms} ms {role} {request_id}", {
    method: t.method,
    path: t.path,
    kind: t.kind,
    status,
    duration_ms: Math.round(ms * 100) / 100,
    role: t.role,
    request_id: t.requestId,
  });
}
