/**
 * The answer-row size cap (`pg.query.max_row_size`), where PostgreSQL enforces it: a compiled read
 * is wrapped so that PostgreSQL itself refuses a row larger than the cap before sending it, and
 * the refusal fails the transaction. A plain read without VOLATILE functions is not wrapped: svc's
 * client refuses the row from its DataRow header and skips its bytes (src/pg/connection.ts, the
 * sink's `maxRowBytes`), which costs PostgreSQL nothing. The wrapper stays where the
 * transaction's outcome must follow the refusal (docs/performance.md "Read SQL cost"). The SQL
 * refusal is a data error whose text carries a marker; `rowTooLarge` recognises it and the
 * client's, and the HTTP layer answers 400 QUERY_RESULT_TOO_LARGE (or ends a stream that already
 * started with an error).
 */
import type { Statement } from "./ast.ts";
import { PgRowTooLargeError } from "../pg/errors.ts";
import { ROW_TOO_LARGE_MARKER } from "../util/markers.ts";

const MARKER = ROW_TOO_LARGE_MARKER;

/**
 * Wraps a read whose rows are one JSON column `j`. The failing branch depends on the row, so the
 * planner cannot fold it into a constant error at plan time. A read whose rows cannot exceed the
 * cap (`maxRowBytes`, bounded by its columns' types) is left as it is: no row of it can be refused.
 */
export function capRowSize(stmt: Statement, maxBytes: number): Statement {
  if (!(maxBytes > 0)) return stmt;
  const n = Math.floor(maxBytes);
  if (stmt.maxRowBytes !== undefined && stmt.maxRowBytes <= n) return stmt;
  const size = `octet_length("svc_r"."j"::text)`;
  // The read is a fence: a subquery with an OFFSET is never pulled up into the outer select, where
  // its "j" would be built once per reference. The compiler's reads take `OFFSET 0` (a no-op for
  // the executor) unless they have an OFFSET already; any other statement is wrapped in one.
  const fenced = stmt.hasOffset === undefined
    ? `SELECT * FROM (${stmt.sql}) AS "svc_q" OFFSET 0`
    : stmt.hasOffset
    ? stmt.sql
    : `${stmt.sql} OFFSET 0`;
  // pg_column_size (the datum's size with its header, never less than its text's: a row built by
  // the query is never compressed) decides almost every row without a copy; the exact size
  // (`::text` copies the row twice) is taken only for a row near or over the cap.
  return {
    sql: `SELECT CASE WHEN pg_column_size("svc_r"."j") <= ${n} OR ${size} <= ${n} ` +
      `THEN "svc_r"."j" ELSE (('${MARKER}' || ${size})::int)::text::json END AS "j" ` +
      `FROM (${fenced}) AS "svc_r"`,
    params: stmt.params,
  };
}

/**
 * The size of the refused row when `e` is the cap's refusal (PostgreSQL's or svc's client's),
 * else null.
 */
export function rowTooLarge(e: { code?: string; message?: string }): number | null {
  if (e instanceof PgRowTooLargeError) return e.rowBytes;
  if (e.code !== "22P02" || !e.message?.includes(MARKER)) return null;
  const m = new RegExp(`${MARKER}(\\d+)`).exec(e.message);
  return m ? Number(m[1]) : 0;
}
