/**
 * How many bind parameters one statement may carry. The wire protocol counts them in an unsigned
 * 16-bit field (65,535 at most); svc keeps the limit it has always had, 65,533 (what its earlier
 * driver could send), so that no deployment's accepted queries change; `pg.query.max_params`
 * (default 10,000) lowers it. Every statement is checked here before
 * it is sent (src/db/run_as.ts), and the read compiler checks the hard limit as it builds one.
 *
 * @module
 */
import { SvcError } from "../svc_error.ts";

/** The most bind parameters svc can send in one statement (see the module comment). */
export const WIRE_MAX_PARAMS = 65533;

/** Default of `pg.query.max_params`. */
export const DEFAULT_MAX_PARAMS = 10_000;

/** The smallest `pg.query.max_params` accepted (a PostgreSQL function takes up to 100 arguments). */
export const MIN_MAX_PARAMS = 100;

/** Default of `pg.query.max_statement_size`, in characters. */
export const DEFAULT_MAX_STATEMENT_SIZE = 256 * 1024;

/** The 400 QUERY_INVALID for a statement whose SQL text is `size` characters, over `max`. */
export function statementSizeError(size: number, max: number): SvcError {
  const n = (x: number) => x.toLocaleString("en-US");
  return new SvcError(
    "QUERY_INVALID",
    `a statement's SQL text is at most ${n(max)} characters (pg.query.max_statement_size); ` +
      `this query compiles to ${n(size)}: ask for fewer or simpler expressions`,
    { details: { pointer: "", limit: "pg.query.max_statement_size" } },
  );
}

/**
 * The 400 QUERY_INVALID for a statement needing `count` bind parameters when at most `max` are
 * allowed, or null when it fits. `max` above {@link WIRE_MAX_PARAMS} counts as that.
 */
export function paramsError(count: number, max: number): SvcError | null {
  if (count <= max && count <= WIRE_MAX_PARAMS) return null;
  const n = (x: number) => x.toLocaleString("en-US");
  const message = max < WIRE_MAX_PARAMS
    ? `a statement takes at most ${n(max)} bind parameters (pg.query.max_params); ` +
      `this query needs ${n(count)}: send fewer values`
    : `a statement takes at most ${n(WIRE_MAX_PARAMS)} bind parameters (the most the ` +
      `PostgreSQL protocol and driver carry; pg.query.max_params cannot raise it); this query ` +
      `needs ${n(count)}: send fewer values`;
  return new SvcError("QUERY_INVALID", message, {
    details: { pointer: "", limit: "pg.query.max_params" },
  });
}
