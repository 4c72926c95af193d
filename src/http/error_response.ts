/**
 * The one place errors become HTTP responses (docs/query.md "Errors"): service errors keep their code,
 * database errors map by SQLSTATE (`PG_<sqlstate>`), `RSnnn` raised in SQL becomes status nnn,
 * anything else is INTERNAL. In dev mode generic errors carry the database text and a stack.
 */
import { batchIndexOf, markBatchIndex, SvcError } from "../svc_error.ts";
import { rowTooLarge } from "../compile/rowsize.ts";
import { PgFetchTooLargeError } from "../pg/errors.ts";

/** What the mapping needs to know about the request. */
export interface ErrorContext {
  dev: boolean;
  /**
   * Whether the request ran as the anonymous role. It does not change any status: a permission
   * denial (42501) is 403 for every role, the anonymous one included.
   */
  anonymous: boolean;
}

interface PgLike {
  code?: string;
  message: string;
  /** Where in the statement text the error is (set for errors of the statement itself). */
  position?: string;
  detail?: string;
  hint?: string;
  where?: string;
  column_name?: string;
  constraint_name?: string;
  table_name?: string;
  internal_position?: string;
}

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ENOTFOUND",
  "EPIPE",
  "57P01",
  "57P02",
  "57P03",
  "08000",
  "08003",
  "08006",
  "08001",
  "08004",
  "08P01",
]);

function isPgError(e: unknown): e is PgLike & Error {
  return e instanceof Error && typeof (e as PgLike).code === "string";
}

/**
 * Status of a SQLSTATE (docs/query.md "Errors"). A permission denial is 403 whoever asked: 401
 * is kept for what svc itself decides about the session (no anonymous role, a route the
 * anonymous role cannot reach, a role that cannot be assumed) and for `RS401`.
 */
export function statusOfSqlState(code: string): number {
  if (/^RS\d{3}$/.test(code)) return Number(code.slice(2));
  if (code === "42501") return 403;
  // Conflicts with existing rows: a key taken, a reference missing, a range overlapping.
  if (code === "23505" || code === "23503" || code === "23P01") return 409;
  // Values a constraint refuses: not null, a check, a view's WITH CHECK OPTION.
  if (code === "23502" || code === "23514" || code === "44000") return 400;
  // A write in a read-only transaction: GET /svc reads only (a VOLATILE function that writes).
  if (code === "25006") return 405;
  if (code.startsWith("22")) return 400;
  // Operand types that do not fit (e.g. comparing text with a number), writing a generated column.
  if (["42883", "42804", "42846", "42725", "428C9"].includes(code)) return 400;
  // An object named by a client value that does not exist (a text search configuration, a
  // reg* function argument): identifiers are checked before SQL, so only values reach here. Raised
  // inside a function instead, the function named it: 500 (see statusOfPgError).
  if (code === "42704") return 400;
  if (code === "P0001") return 400;
  // A limit of PostgreSQL's a request's values or shape reach (an array nested too deep, a word
  // too long for a tsvector, too many columns or arguments, a statement too complex), and a row
  // met twice where once is allowed (one write naming a key twice, in spellings PostgreSQL reads
  // as one value): the request's, never the server's fault.
  if (code.startsWith("54") || code === "21000") return 400;
  if (code === "40001" || code === "40P01") return 503;
  if (code === "57014") return 504;
  if (code.startsWith("53")) return 503;
  return 500;
}

/**
 * Status of a database error: {@link statusOfSqlState}, but an undefined object (42704) raised
 * inside a function — a PL/pgSQL or SQL function (inlined or not), a route, a trigger — is 500:
 * the function named the object, not the client. Only one raised by svc's own statement, naming a
 * client's value, is 400.
 */
export function statusOfPgError(code: string, where: string | undefined): number {
  if (code === "42704" && raisedInFunction(where)) return 500;
  return statusOfSqlState(code);
}

/**
 * A bind parameter's line of an error context, the only one svc's own statement gets: `unnamed
 * portal parameter $1 = '…'` or `portal "p" parameter $2` (no value). Matched by its end — `$n`,
 * or a number, then ` = ` and the quoted value (quotes doubled inside, newlines allowed) — which
 * the translations keep (`paramètre de portail non nommé $1 = '…'`); no function's line ends so.
 */
const PARAM_CONTEXT = /[^\n]*(?:\$\d+|\d[^\n]*? = '(?:[^']|'')*')(?=\n|$)/g;

/**
 * Whether an error's context (its `where` field) shows it was raised inside a function: PostgreSQL
 * adds a line for each function it ran (`PL/pgSQL function f() line 1 at RETURN`, `SQL function
 * "f" during inlining`, `SQL function "f" during startup`, …). An error of svc's own statement
 * has no context, or only the line naming the bind parameter whose input failed (a client's value
 * bound as regconfig).
 */
export function raisedInFunction(where: string | undefined): boolean {
  if (!where) return false;
  return where.replace(PARAM_CONTEXT, "").trim() !== "";
}

/** Converts any thrown value into a SvcError (keeping database details for dev mode). */
export function toSvcError(e: unknown, ctx: ErrorContext): SvcError {
  const err = convert(e, ctx);
  const index = err === e ? undefined : batchIndexOf(e);
  if (index !== undefined) markBatchIndex(err, index);
  return err;
}

function convert(e: unknown, ctx: ErrorContext): SvcError {
  if (e instanceof SvcError) return e;
  if (isPgError(e)) {
    // A syntax error with no position in a statement is a value's: a type's input function
    // (tsquery, jsonpath) rejecting it. It answers like any value that does not convert (22P02);
    // a 42601 from a statement carries its position.
    const code = e.code === "42601" && !e.position && !e.internal_position ? "22P02" : e.code!;
    if (e instanceof PgFetchTooLargeError) {
      return new SvcError(
        "QUERY_RESULT_TOO_LARGE",
        `the answer's rows grew past ${e.maxFetchBytes} bytes in one fetch of a streamed read; ` +
          "narrow the query (select, where, limit on joins)",
      );
    }
    const tooLarge = rowTooLarge(e);
    if (tooLarge !== null) {
      return new SvcError(
        "QUERY_RESULT_TOO_LARGE",
        `one answer row is ${tooLarge} bytes, more than pg.query.max_row_size allows; narrow the ` +
          "query (select, where, limit on joins)",
      );
    }
    if (CONNECTION_CODES.has(code)) {
      return withDb(new SvcError("PG_UNAVAILABLE", "the database is unavailable"), e, ctx);
    }
    if (/^RS\d{3}$/.test(code)) {
      const status = Number(code.slice(2));
      const err = new SvcError(code as `RS${number}`, e.message, {
        status: status >= 400 && status < 600 ? status : 400,
        details: e.detail || undefined,
        hint: e.hint || undefined,
      });
      return err;
    }
    if (/^[0-9A-Z]{5}$/.test(code)) {
      const status = statusOfPgError(code, e.where);
      const message = status >= 500 ? "internal database error" : e.message;
      const details: Record<string, unknown> = {};
      if (status < 500) {
        if (e.detail) details.detail = e.detail;
        if (e.column_name) details.column = e.column_name;
        if (e.constraint_name) details.constraint = e.constraint_name;
        if (e.table_name) details.table = e.table_name;
      }
      const err = new SvcError(`PG_${code}`, message, {
        status,
        details: Object.keys(details).length ? details : undefined,
        hint: status < 500 ? e.hint || undefined : undefined,
      });
      return withDb(err, e, ctx);
    }
  }
  const err = new SvcError("INTERNAL", "internal error");
  if (ctx.dev && e instanceof Error) (err as SvcError & { cause?: unknown }).cause = e;
  return err;
}

const DB = Symbol("db");

function withDb(err: SvcError, e: PgLike & Error, ctx: ErrorContext): SvcError {
  if (ctx.dev) {
    (err as unknown as Record<symbol, unknown>)[DB] = {
      sqlstate: e.code,
      message: e.message,
      detail: e.detail ?? null,
      hint: e.hint ?? null,
      where: e.where ?? null,
      stack: e.stack,
    };
  }
  return err;
}

/** The JSON body of an error, with dev-mode extras for generic (5xx or database) errors. */
export function errorBody(err: SvcError, ctx: ErrorContext): Record<string, unknown> {
  const body = err.toJSON();
  if (ctx.dev && err.devReason !== undefined) body.dev_reason = err.devReason;
  if (ctx.dev) {
    const db = (err as unknown as Record<symbol, unknown>)[DB] as
      | Record<string, unknown>
      | undefined;
    if (db) {
      const { stack, ...rest } = db;
      body.db_error = rest;
      body.stack = stack;
    } else if (err.status >= 500) {
      const cause = (err as SvcError & { cause?: unknown }).cause;
      body.stack = cause instanceof Error ? cause.stack : err.stack;
    }
  }
  return body;
}

/** The HTTP response of an error. */
export function errorResponse(e: unknown, ctx: ErrorContext, headers?: HeadersInit): Response {
  const err = toSvcError(e, ctx);
  const h = new Headers(headers);
  h.set("content-type", "application/json");
  // Transient unavailability: tell clients (and proxies) when to try again.
  if (
    err.code === "PG_UNAVAILABLE" || err.code === "PG_POOL_EXHAUSTED" || err.code === "HTTP_BUSY"
  ) h.set("retry-after", "1");
  // A GET that tried to write (read-only transaction): only POST may.
  if (err.code === "PG_25006") h.set("allow", "POST");
  h.set("x-svc-errorcode", err.code);
  return new Response(JSON.stringify(errorBody(err, ctx)), { status: err.status, headers: h });
}
