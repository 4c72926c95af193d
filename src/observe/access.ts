/**
 * Per-request identity for logs and metrics (docs/operations.md "Observability: request ids, access log, metrics"): the `X-Request-Id` (echoed when
 * the client sent a usable one, generated otherwise) and the request's path kind.
 */

/** Kinds of request, the `kind` field of the access log and the metrics label. */
export type PathKind =
  | "svc"
  | "svc_get"
  | "health"
  | "database_json"
  | "metrics"
  | "playground"
  | "route"
  | "static"
  | "auth"
  | "other";

const USABLE_ID = /^[\x21-\x7e]{1,128}$/;

/** The request id: the client's `X-Request-Id` if it is 1–128 visible ASCII chars, else a UUID. */
export function requestId(header: string | null | undefined): string {
  return header && USABLE_ID.test(header) ? header : crypto.randomUUID();
}

/**
 * The kind of a request from its method and path. Handlers that know better (declared routes,
 * static files) override it through the `kind` context variable.
 */
export function pathKind(method: string, path: string): PathKind {
  if (path === "/svc" || path === "/svc/") {
    return method === "GET" || method === "HEAD" ? "svc_get" : "svc";
  }
  if (path.startsWith("/svc/health")) return "health";
  if (path === "/svc/database.json") return "database_json";
  if (path === "/svc/metrics") return "metrics";
  if (path === "/svc/playground" || path.startsWith("/svc/playground/")) return "playground";
  if (path === "/auth" || path.startsWith("/auth/")) return "auth";
  return "other";
}
