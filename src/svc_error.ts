/**
 * The service's own error: a code of docs/query.md "Errors" with its HTTP status. Everything that rejects
 * a request throws this; the HTTP layer turns it into the JSON error body and X-Svc-Errorcode.
 */

/** Status of every service error code (docs/query.md "Errors"). */
export const STATUS = {
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
  HTTP_ROUTE_RESPONSE_INVALID: 500,
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
  HTTP_BUSY: 503,
  QUERY_UNKNOWN_TYPE: 400,
  QUERY_RESULT_TOO_LARGE: 400,
  HTTP_UNSUPPORTED_MEDIA_TYPE: 415,
  INTERNAL: 500,
} as const satisfies Record<string, number>;

/** Codes svc itself raises: exactly the keys of {@link STATUS}, so a misspelled code does not compile. */
export type ErrorCode = keyof typeof STATUS;

/**
 * Codes the database raises: `RSnnn` (a function's `raise sqlstate 'RSnnn'`, status nnn) and
 * `PG_<SQLSTATE>` (any other database error, status by SQLSTATE). They always come with a status.
 */
export type DatabaseErrorCode = `RS${number}` | `PG_${string}`;

/** What a SvcError carries beside its code and message. */
export interface SvcErrorOptions {
  details?: unknown;
  hint?: string;
  /** Overrides the code's status in {@link STATUS}. */
  status?: number;
}

/** A request-level error with a stable code (the pair code + X-Svc-Errorcode identifies it). */
export class SvcError extends Error {
  override name = "SvcError";
  readonly code: ErrorCode | DatabaseErrorCode;
  readonly status: number;
  details?: unknown;
  hint?: string;
  /**
   * Why, for the operator: logged, and in the body only in dev mode (`dev_reason`), because it
   * names what a client must not learn in production (roles, memberships).
   */
  devReason?: string;

  /** A code of svc's own (status from {@link STATUS} unless given). */
  constructor(code: ErrorCode, message: string, opts?: SvcErrorOptions);
  /** A database's code, with the status it maps to. */
  constructor(
    code: DatabaseErrorCode,
    message: string,
    opts: SvcErrorOptions & { status: number },
  );
  constructor(
    code: ErrorCode | DatabaseErrorCode,
    message: string,
    opts: SvcErrorOptions = {},
  ) {
    super(message);
    this.code = code;
    this.status = opts.status ?? (STATUS as Record<string, number>)[code] ?? 500;
    if (opts.details !== undefined) this.details = opts.details;
    if (opts.hint !== undefined) this.hint = opts.hint;
  }

  /** The JSON error body (docs/query.md "Errors"). */
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

const BATCH_INDEX = Symbol("svc.batchIndex");

/**
 * Marks `e` as the failure of batch element `index`: its error answer carries `details.index`
 * (kept beside the other details; details that are not an object move to `details.cause`). The
 * one way a batch index is attached: a SvcError takes it at once, any other error keeps it until
 * the HTTP layer converts it (which calls this again with the converted error).
 */
export function markBatchIndex(e: unknown, index: number): void {
  if (e instanceof SvcError) {
    const d = e.details;
    e.details = d === undefined
      ? { index }
      : typeof d === "object" && d !== null && !Array.isArray(d)
      ? { ...d, index }
      : { cause: d, index };
  } else if (e instanceof Error) {
    (e as Error & { [BATCH_INDEX]?: number })[BATCH_INDEX] = index;
  }
}

/** The batch index {@link markBatchIndex} left on an error that is not a SvcError. */
export function batchIndexOf(e: unknown): number | undefined {
  return e instanceof Error ? (e as Error & { [BATCH_INDEX]?: number })[BATCH_INDEX] : undefined;
}
