/**
 * The request pool and per-request transactions, on svc's own PostgreSQL client (src/pg/).
 * Every request runs on a leased connection as `begin; select set_config('role', $1, true),
 * set_config('svc.jwt.claims', $2, true) (also statement_timeout and svc.request_id); …; commit`,
 * all in one batch (one write, one Sync), so a single read costs one round trip (DECISIONS.md §5).
 * The role switch is its own statement because privileges are checked per statement.
 */
import type { Connection } from "../pg/connection.ts";
import { PgError, PgSkippedError } from "../pg/errors.ts";
import { JsonArraySink } from "../pg/json.ts";
import type { Result, RowSink, Statement } from "../pg/connection.ts";
import type { Row, Tx } from "./tx.ts";
import { SvcError } from "../svc_error.ts";
import { type RequestRole, roleError, setRole } from "../auth/roles.ts";
import type { Database, Lease } from "./pool.ts";

const BEGIN: Statement = { sql: "begin" };
const COMMIT: Statement = { sql: "commit" };
/** A SQL NULL row of a streamed read, as JSON. */
const NULL_JSON = new TextEncoder().encode("null");
const ROLLBACK: Statement = { sql: "rollback" };

/** A transaction on a leased connection. */
export interface RequestTx extends Tx {
  /** The leased connection. */
  conn: Connection;
  /**
   * Sends a statement whose result nobody waits for (a savepoint, its rollback): it is pipelined
   * ahead of whatever follows, and its failure fails the transaction at commit.
   */
  send(sql: string): void;
  /**
   * Runs a read whose rows are JSON texts (first column) through a protocol cursor: `each` gets
   * `batch` raw rows at a time, and the next batch is fetched only once its promise resolved
   * (a rejection ends the read with that error), so one batch is in memory at a time.
   */
  rows(
    sql: string,
    params: unknown[],
    batch: number,
    each: (rows: Uint8Array[]) => Promise<void> | void,
  ): Promise<void>;
}

/**
 * Runs `body` in a transaction as `who`. `begin` and the role switch go out with the body's
 * first statements (one batch: the statements issued in the same tick share a write and a
 * Sync); `commit` follows the body.
 */
export async function transaction<T>(
  db: Database,
  who: RequestRole,
  body: (tx: RequestTx) => Promise<T>,
): Promise<T> {
  const lease = await db.acquire(who.signal, who.requestId);
  const conn = lease.conn;
  const touch = lease.touch;
  const sent: Promise<unknown>[] = [];
  let portals = 0;
  const signal = who.signal;
  const onAbort = () => lease.cancel();
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  const tx: RequestTx = {
    conn,
    send(sql) {
      const q = conn.query({ sql });
      q.then(touch, touch); // failures are reported through `sent` below
      sent.push(q);
    },
    query: (sql, params, opts) => {
      // Too many bind parameters: refused before the statement is sent.
      const tooMany = db.paramsError(params);
      if (tooMany) return Promise.reject(tooMany);
      const q = conn.query({ sql, params, prepare: opts?.prepare ?? true });
      q.then(touch, touch);
      return q.then(withCount);
    },
    rows: async (sql, params, batch, each) => {
      const tooMany = db.paramsError(params);
      if (tooMany) throw tooMany;
      // A named portal with a row limit: it survives the transaction's other statements (which
      // use the unnamed one) between fetches, and ends with the transaction.
      const portal = `svc_rows${++portals}`;
      let got: Uint8Array[] = [];
      const sink: RowSink = {
        row: (buf, start, end) => got.push(end < start ? NULL_JSON : buf.slice(start, end)),
      };
      let r = await conn.query({ sql, params, prepare: true, sink, maxRows: batch, portal });
      touch(); // a batch of rows came: the lease makes progress
      for (;;) {
        if (got.length) {
          const rows = got;
          got = [];
          await each(rows); // back-pressure: the next batch is asked for once these are taken
        }
        if (!r.suspended) return;
        r = await conn.fetch(portal, batch, { sink });
        touch();
      }
    },
  };
  const begin = conn.query(BEGIN);
  const role = conn.query(setRole(who, db.statementTimeout));
  const started = Promise.all([begin, role.catch((e) => Promise.reject(roleError(e)))]);
  started.then(touch, () => {});
  let ok = false;
  try {
    let result: T;
    try {
      result = await body(tx);
    } catch (e) {
      // A failed role switch, then a failed pipelined statement, is the root cause of whatever
      // failed after it.
      await started;
      const failed = (await Promise.allSettled(sent)).find((x) =>
        x.status === "rejected" && !isFollowUp(x.reason)
      ) as PromiseRejectedResult | undefined;
      throw failed ? failed.reason : rootCause(e);
    }
    await started;
    // A request cancelled (client gone, drain) while its last statement ran never commits.
    if (who.signal?.aborted) {
      throw new SvcError("PG_57014", "the request was cancelled before it committed", {
        status: 504,
      });
    }
    const commit = conn.query(COMMIT);
    const [done] = await Promise.all([commit, ...sent]);
    if (done.command === "ROLLBACK") {
      // The body went on after a failure it caught: the transaction was not committed.
      throw new PgError({
        code: "25P02",
        message: "the transaction was rolled back: one of its statements had failed",
      });
    }
    ok = true;
    return result;
  } finally {
    signal?.removeEventListener("abort", onAbort);
    lease.release(ok);
  }
}

/**
 * Runs `statements` in one transaction as `who`, in one batch with begin, the role switch and
 * commit: one write, one round trip. A failure skips the rest (PostgreSQL) and is thrown with
 * `statementIndex` (the failing statement, -1 for the prelude or the end); the transaction is
 * rolled back. With `end: "rollback"` the transaction is rolled back instead of committed (a
 * request asking for rollback).
 */
export async function pipeline(
  db: Database,
  who: RequestRole,
  statements: { sql: string; params: unknown[] }[],
  end: "commit" | "rollback" = "commit",
): Promise<Row[][]> {
  // Too many bind parameters: refused before a connection is taken.
  for (const s of statements) {
    const tooMany = db.paramsError(s.params);
    if (tooMany) throw tooMany;
  }
  const lease = await db.acquire(who.signal, who.requestId);
  const batch: Statement[] = [BEGIN, setRole(who, db.statementTimeout)];
  for (const s of statements) batch.push({ sql: s.sql, params: s.params });
  const conn = lease.conn;
  const signal = who.signal;
  const onAbort = () => lease.cancel();
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  // The end is a batch of its own (its own Sync) in the same write: after a failed statement it
  // still runs and ends the transaction (PostgreSQL answers the commit of a failed transaction
  // with ROLLBACK), so no separate rollback follows the error — one round trip either way.
  const [body, closing] = conn.corked(() => [
    conn.execute(batch),
    conn.execute([end === "commit" ? COMMIT : ROLLBACK]),
  ]);
  const [ran, ended] = await Promise.allSettled([body, closing]);
  signal?.removeEventListener("abort", onAbort);
  const ok = ran.status === "fulfilled" && ended.status === "fulfilled";
  // Over either way once the end went through: nothing left to roll back.
  lease.release(ok || (ended.status === "fulfilled" && conn.txStatus === "I"));
  if (ran.status === "rejected") throw statementError(ran.reason, statements.length);
  if (ended.status === "rejected") throw statementError(ended.reason, -1);
  const results = ran.value;
  const out: Row[][] = new Array(statements.length);
  for (let i = 0; i < statements.length; i++) out[i] = withCount(results[i + 2]);
  return out;
}

/** A result's rows carrying the command's row count as `count` (see {@link Tx.query}). */
function withCount(r: Result): Row[] {
  const rows = Object.isFrozen(r.rows) ? [] : r.rows;
  return Object.assign(rows, { count: r.rowCount });
}

/** Whether `e` only follows an earlier failure (skipped, or sent into a failed transaction). */
function isFollowUp(e: unknown): boolean {
  return e instanceof PgSkippedError || (e as { code?: string } | null)?.code === "25P02";
}

/** The failure a skipped statement's error stands for. */
function rootCause(e: unknown): unknown {
  return e instanceof PgSkippedError ? e.failure : e;
}

/**
 * Runs a request's batch (`begin`, role switch, `n` statements, then the end) on its lease with
 * the request's cancel, and releases the lease. Rejects with the failure: a failed role switch
 * becomes AUTH_ROLE_INVALID; a statement's failure carries `statementIndex` (-1: prelude or end).
 */
async function run(
  lease: Lease,
  batch: Statement[],
  signal: AbortSignal | undefined,
  n: number,
): Promise<Result[]> {
  const onAbort = () => lease.cancel();
  if (signal) {
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  }
  let ok = false;
  try {
    const results = await lease.conn.execute(batch);
    ok = true;
    return results;
  } catch (e) {
    throw statementError(e, n);
  } finally {
    if (signal) signal.removeEventListener("abort", onAbort);
    lease.release(ok);
  }
}

/** Maps a batch failure: role switch → AUTH_ROLE_INVALID; `statementIndex` of the request's. */
function statementError(e: unknown, n: number): unknown {
  if (e instanceof PgError) {
    const at = e.statementIndex ?? -1;
    if (at === 1) return roleError(e);
    e.statementIndex = at >= 2 && at < 2 + n ? at - 2 : -1;
  }
  return e;
}

/** Rows fetched per round trip of a read; a first batch smaller than this ends the read. */
export const FETCH_BATCH = 1000;

/**
 * Runs a read whose rows are JSON texts (first column) and answers a JSON array; the rows' bytes
 * go from the connection's receive buffer into the answer, never becoming strings.
 * - Known to fit one batch (`opts.small`): begin, role switch, query and commit in one batch, one
 *   round trip.
 * - Otherwise: begin, role switch and the query's first `batch` rows (a portal with a row limit)
 *   in one batch, one round trip. A first part that completes the query is returned at once and
 *   the commit follows off the response's critical path. Otherwise the answer is a stream that
 *   asks the portal for the next `batch` rows only when the client has taken the earlier ones
 *   (back-pressure), so memory stays flat.
 * Errors before the first row reject, so the caller can still answer with an error status.
 */
export async function readJson(
  db: Database,
  who: RequestRole,
  sql: string,
  params: unknown[],
  opts: { small?: boolean; batch?: number } = {},
): Promise<Uint8Array | ReadableStream<Uint8Array>> {
  const batch = opts.batch ?? FETCH_BATCH;
  // Too many bind parameters: refused before a connection is taken.
  const tooMany = db.paramsError(params);
  if (tooMany) throw tooMany;
  const lease = await db.acquire(who.signal, who.requestId);
  const sink = new JsonArraySink();
  if (opts.small) {
    try {
      await run(
        lease,
        [BEGIN, setRole(who, db.statementTimeout), { sql, params, sink }, COMMIT],
        who.signal,
        1,
      );
      return sink.take(true);
    } finally {
      sink.release();
    }
  }
  const conn = lease.conn;
  const signal = who.signal;
  const onAbort = () => lease.cancel();
  if (signal) {
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  }
  let ended = false;
  let streaming = false;
  /** Ends the transaction (commit when `ok`) and gives the connection back. */
  const finish = (ok: boolean) => {
    if (ended) return;
    ended = true;
    signal?.removeEventListener("abort", onAbort);
    // A streamed answer's sink may still be written by a fetch in flight: left to the GC.
    if (!streaming) sink.release();
    if (!ok || conn.error) return lease.release(false);
    conn.execute([COMMIT]).then(() => lease.release(true), () => lease.release(false));
  };
  let first: Result;
  try {
    [, , first] = await conn.execute([
      BEGIN,
      setRole(who, db.statementTimeout),
      { sql, params, sink, maxRows: batch },
    ]);
    lease.touch();
  } catch (e) {
    finish(false);
    throw statementError(e, 1);
  }
  if (!first.suspended) {
    const out = sink.take(true);
    finish(true);
    return out;
  }
  const head = sink.take(false);
  streaming = true;
  let sentHead = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!sentHead) {
        sentHead = true;
        controller.enqueue(head);
        return;
      }
      try {
        const more = await conn.fetch("", batch, { sink });
        // Progress: a batch came and the client took the earlier ones. A client that stops
        // reading holds the lease only until the lease deadline (see Database).
        lease.touch();
        if (ended) return; // cancelled meanwhile
        const done = !more.suspended;
        controller.enqueue(sink.take(done));
        if (done) {
          finish(true);
          controller.close();
        }
      } catch (e) {
        if (ended) return;
        finish(false);
        controller.error(e);
      }
    },
    cancel() {
      // The client went away: the open portal and transaction are rolled back.
      finish(false);
    },
  }, { highWaterMark: 1 });
}
