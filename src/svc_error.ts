/**
 * The service's own error: a DECISIONS.md §1 code with its HTTP status. Everything that rejects
 * a request throws this; the HTTP layer turns it into the JSON error body and X-Svc-Errorcode.
 */

/** Status of every service error code (DECISIONS.md §1). */
export const STATUS: Record<string, number> = {
  QUERY_INVALID: 400,
  QUERY_UNKNOWN_RELATION: 404,
  QUERY_UNKNOWN_COLUMN: 400,
  QUERY_BAD_JOIN: 400,
  QUERY_MAX_DEPTH_EXCEEDED: 400,
  QUERY_DISTINCT_ON_NOT_PREFIX: 400,
  QUERY_NOT_WRITABLE: 400,
  QUERY_MANDATORY_COLUMN_MISSING: 400,
  QUERY_UNSUPPORTED_RETURNS: 400,
  QUERY_COUNT_IS_READ_ONLY: 400,
  QUERY_STATS_IS_WRITE_ONLY: 400,
  QUERY_STATS_QUERY_PLAN_CONFLICT: 400,
  QUERY_ROLLBACK_NOT_GRANTED: 403,
  QUERY_COMPLEX_NOT_ALLOWED_ON_GET: 400,
  QUERY_METHOD_NOT_ALLOWED: 405,
  WELL_KNOWN_UNKNOWN_QUERY: 404,
  WELL_KNOWN_PARAM_TYPE_MISMATCH: 400,
  WELL_KNOWN_PARAM_REQUIRED: 400,
  AUTH_ANONYMOUS_DISABLED: 401,
  AUTH_ROUTE_NOT_REACHABLE: 401,
  AUTH_JWT_NOT_ALLOWED: 403,
  AUTH_ROLE_INVALID: 401,
  AUTH_TOKEN_INVALID: 401,
  AUTH_JWKS_UNAVAILABLE: 503,
  HTTP_BODY_TOO_LARGE: 413,
  HTTP_TOO_MANY_PARTS: 413,
  HTTP_NOT_FOUND: 404,
  HTTP_METHOD_NOT_ALLOWED: 405,
  HTTP_RANGE_NOT_SATISFIABLE: 416,
  HTTP_MULTIPART_INVALID: 400,
  HTTP_UPLOAD_DISABLED: 400,
  HTTP_BODY_TIMEOUT: 408,
  HTTP_HEADERS_TOO_LARGE: 431,
  HTTP_UNSAFE_REDIRECT: 400,
  SSO_NOT_READY: 503,
  SSO_BAD_REQUEST: 400,
  SSO_BAD_STATE: 400,
  SSO_BAD_NONCE: 400,
  SSO_TOKEN_EXCHANGE_FAILED: 502,
  SSO_NO_ID_TOKEN: 502,
  SSO_INVALID_ID_TOKEN: 502,
  SSO_USERINFO_FAILED: 502,
  SSO_SAML_INVALID_RESPONSE: 400,
  SSO_INTERNAL: 500,
  PG_UNAVAILABLE: 503,
  PG_POOL_EXHAUSTED: 503,
  QUERY_UNKNOWN_TYPE: 400,
  QUERY_RESULT_TOO_LARGE: 400,
  HTTP_UNSUPPORTED_MEDIA_TYPE: 415,
  INTERNAL: 500,
};

/** Codes a SvcError may carry. */
export type ErrorCode = keyof typeof STATUS | `RS${number}` | `PG_${string}`;

/** A request-level error with a stable code (the pair code + X-Svc-Errorcode identifies it). */
export class SvcError extends Error {
  override name = "SvcError";
  readonly code: string;
  readonly status: number;
  details?: unknown;
  hint?: string;

  /** `status` defaults to the code's status in STATUS (500 when unknown). */
  constructor(
    code: ErrorCode,
    message: string,
    opts: { details?: unknown; hint?: string; status?: number } = {},
  ) {
    super(message);
    this.code = code;
    this.status = opts.status ?? STATUS[code] ?? 500;
    if (opts.details !== undefined) this.details = opts.details;
    if (opts.hint !== undefined) this.hint = opts.hint;
  }

  /** The JSON error body (DECISIONS.md §1). */
  toJSON(): Record<string, unknown> {
    const body: Record<string, unknown> = { code: this.code, message: this.message };
    if (this.details !== undefined) body.details = this.details;
    if (this.hint !== undefined) body.hint = this.hint;
    return body;
  }
}

/** Shorthand for a QUERY_INVALID error pointing at a node of the request (JSON pointer). */
export function invalid(pointer: string, message: string): SvcError {
  return new SvcError("QUERY_INVALID", message, { details: { pointer } });
}
