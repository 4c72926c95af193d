/**
 * Errors of svc's PostgreSQL client. A server's ErrorResponse becomes a {@link PgError} whose
 * fields keep the names svc's error mapping reads (`code`, `detail`, `hint`, `where`,
 * `table_name`, …). A failure of the connection itself (refused, closed, timed out, a protocol
 * violation, TLS) is a {@link PgConnectionError} whose `code` says which: svc answers those with
 * 503 PG_UNAVAILABLE.
 */

/** The fields of an ErrorResponse or NoticeResponse, by their one-byte field type. */
const FIELDS: Record<string, string> = {
  S: "severity_local",
  V: "severity",
  C: "code",
  M: "message",
  D: "detail",
  H: "hint",
  P: "position",
  p: "internal_position",
  q: "internal_query",
  W: "where",
  s: "schema_name",
  t: "table_name",
  c: "column_name",
  d: "data_type_name",
  n: "constraint_name",
  F: "file",
  L: "line",
  R: "routine",
};

/** The fields of an ErrorResponse or NoticeResponse, named. */
export interface PgFields {
  /** Severity, localized (`ERROR`, `FATAL`, `NOTICE`, …). */
  severity_local?: string;
  /** Severity, never localized (PostgreSQL 9.6+). */
  severity?: string;
  /** SQLSTATE. */
  code: string;
  /** Primary message. */
  message: string;
  /** Detail message. */
  detail?: string;
  /** Hint message. */
  hint?: string;
  /** Cursor position in the statement text (1-based characters), as text. */
  position?: string;
  /** Position in an internally generated statement. */
  internal_position?: string;
  /** The internally generated statement. */
  internal_query?: string;
  /** Context (call stack of PL functions, …). */
  where?: string;
  /** Schema of the object concerned. */
  schema_name?: string;
  /** Table of the object concerned. */
  table_name?: string;
  /** Column of the object concerned. */
  column_name?: string;
  /** Data type concerned. */
  data_type_name?: string;
  /** Constraint concerned. */
  constraint_name?: string;
  /** Server source file. */
  file?: string;
  /** Server source line. */
  line?: string;
  /** Server source routine. */
  routine?: string;
}

/** Parses the fields of an ErrorResponse/NoticeResponse body (`type` byte, C string, …, NUL). */
export function parseFields(body: Uint8Array): PgFields {
  const out: Record<string, string> = { code: "", message: "" };
  const dec = new TextDecoder();
  let i = 0;
  while (i < body.length && body[i] !== 0) {
    const type = String.fromCharCode(body[i]);
    let end = body.indexOf(0, i + 1);
    if (end < 0) end = body.length;
    const name = FIELDS[type];
    if (name) out[name] = dec.decode(body.subarray(i + 1, end));
    i = end + 1;
  }
  return out as unknown as PgFields;
}

/** The server's fields of a {@link PgError}: every member of {@link PgFields} but the message. */
export interface PgError extends Omit<PgFields, "message"> {}

/** An error reported by the server (ErrorResponse); its fields are those of {@link PgFields}. */
export class PgError extends Error {
  /** Index of the failed statement in the batch that carried it (set by the connection). */
  statementIndex?: number;

  /** An error from its parsed fields. */
  constructor(fields: PgFields) {
    super(fields.message);
    this.name = "PgError";
    Object.assign(this, fields);
    this.code = fields.code;
  }
}

/**
 * A row refused by the client itself: larger than its statement's row sink allows
 * ({@link RowSink} `maxRowBytes` in connection.ts). The server knows nothing of it: the rest of
 * the batch ran, its messages were read (the refused row's bytes skipped as they came, never
 * buffered) and the connection is usable. Code 54000 (program_limit_exceeded).
 */
export class PgRowTooLargeError extends PgError {
  /** The refused row's size in bytes (its columns' bytes). */
  readonly rowBytes: number;
  /** The limit it exceeded. */
  readonly maxRowBytes: number;

  /** A refusal of a row of `rowBytes` over `maxRowBytes`. */
  constructor(rowBytes: number, maxRowBytes: number) {
    super({
      severity: "ERROR",
      code: "54000",
      message: `a row of ${rowBytes} bytes is larger than the limit of ${maxRowBytes} bytes`,
    });
    this.name = "PgRowTooLargeError";
    this.rowBytes = rowBytes;
    this.maxRowBytes = maxRowBytes;
  }
}

/**
 * svc's client refused a row because it would take the rows of one statement or fetch past what
 * its sink takes at a time (`RowSink.maxFetchBytes`): like a {@link PgRowTooLargeError}, the
 * server knows nothing of it and the connection is usable; the portal of a fetch is still open.
 * `rows` rows fitted: the consumer asks for at most that many at a time. Code 54000.
 */
export class PgFetchTooLargeError extends PgError {
  /** Rows the sink took before the refused one. */
  readonly rows: number;
  /** The bytes one fetch may hand the sink. */
  readonly maxFetchBytes: number;

  /** A refusal after `rows` rows, past `maxFetchBytes`. */
  constructor(rows: number, maxFetchBytes: number) {
    super({
      severity: "ERROR",
      code: "54000",
      message: `the rows of one fetch would exceed ${maxFetchBytes} bytes after ${rows} rows`,
    });
    this.name = "PgFetchTooLargeError";
    this.rows = rows;
    this.maxFetchBytes = maxFetchBytes;
  }
}

/**
 * Codes of {@link PgConnectionError}: `CONNECTION_CLOSED` (the socket ended or errored, or the
 * server broke the protocol: the connection is unusable), `CONNECTION_ENDED` (closed by this
 * side), `CONNECT_TIMEOUT`, `ECONNREFUSED`, `ENOTFOUND`, and the SQLSTATE `08001` (the client could
 * not establish the connection: TLS refused or failed, an authentication method it cannot do) or
 * `08P01` (a protocol violation during startup).
 */
export type ConnectionErrorCode =
  | "CONNECTION_CLOSED"
  | "CONNECTION_ENDED"
  | "CONNECT_TIMEOUT"
  | "ECONNREFUSED"
  | "ENOTFOUND"
  | "08001"
  | "08P01";

/** The connection failed or is gone; no statement of it can run any more. */
export class PgConnectionError extends Error {
  /** Which failure (see {@link ConnectionErrorCode}). */
  readonly code: ConnectionErrorCode;

  /** An error with its code and message, and the low-level cause when there is one. */
  constructor(code: ConnectionErrorCode, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "PgConnectionError";
    this.code = code;
  }
}

/**
 * A statement of a pipeline that did not run because an earlier one of the same pipeline failed
 * (PostgreSQL skips everything up to the next Sync). Its code is 25P02, what PostgreSQL answers a
 * statement sent into a failed transaction.
 */
export class PgSkippedError extends Error {
  /** Always 25P02. */
  readonly code = "25P02";
  /** The root cause: the failure of the earlier statement. */
  readonly failure: unknown;

  /** A skipped statement, and why. */
  constructor(failure: unknown) {
    super("not run: an earlier statement of the same pipeline failed");
    this.name = "PgSkippedError";
    this.failure = failure;
  }
}
