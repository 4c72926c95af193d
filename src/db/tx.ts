/**
 * The transaction handle the compilers' executors use: a reserved connection inside an open
 * transaction that already carries the request's role and claims.
 */

/** A row as returned by the database driver. */
export type Row = Record<string, unknown>;

/** An open transaction. */
export interface Tx {
  /**
   * Runs one parameterized statement (prepared when `prepare` is not false) and returns its rows;
   * the array's `count` is the command's row count (rows inserted, updated or deleted).
   */
  query(sql: string, params: unknown[], opts?: { prepare?: boolean }): Promise<Row[]>;
}
