/**
 * Running a request's statements as its role. {@link runAs} is the one primitive: it leases a
 * connection from the pool (src/db/pool.ts), ties the request's cancel to it, sends `begin`, the
 * role switch and the statements in one batch, ends the transaction or leaves it open to the
 * caller, maps failures and gives the connection back. Every run mode is built on it:
 * - {@link pipeline}: statements known up front (a write, a route's function call), end included:
 *   one write, one round trip;
 * - {@link transaction}: statements issued as a body goes (batches, well-known candidates, logins);
 * - the reads of src/http/json_body.ts: a small read (query and commit in the same batch, one
 *   round trip) and a cursor read (the first rows, then more as the client takes them).
 *
 * The role switch is `select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true)`
 * (also statement_timeout and svc.request_id), a statement of its own because privileges are
 * checked per statement; its rules and its failure's meaning are in src/auth/roles.ts. Rows and
 * bytes come back to the caller: answers' bodies are built in the HTTP layer.
 *
 * @module
 */
import type { Connection } from "../pg/connection.ts";
import { PgError, PgFetchTooLargeError, PgSkippedError } from "../pg/errors.ts";
import type { Result, RowSink, Statement } from "../pg/connection.ts";
import type { Row, Tx } from "./tx.ts";
import { SvcError } from "../svc_error.ts";
import { type RequestRole, roleError, setRole } from "../auth/roles.ts";
import type { Database, Lease } from "./pool.ts";
import { markSole } from "../util/handoff.ts";

const BEGIN: Statement = { sql: "begin" };
const COMMIT: Statement = { sql: "commit" };
const ROLLBACK: Statement = { sql: "rollback" };
const COMMIT_ALONE: readonly Statement[] = [COMMIT];
const ROLLBACK_ALONE: readonly Statement[] = [ROLLBACK];
/** A SQL NULL row of a streamed read, as JSON. */
const NULL_JSON = new TextEncoder().encode("null");

/** The largest slab {@link JsonPieces} writes rows into (a row larger than that gets its own). */
export const ROW_SLAB_MAX = 256 * 1024;

const OPEN = 0x5b; // [
const COMMA = 0x2c; // ,

/**
 * A cursor read's rows as the pieces of a JSON array, written straight into shared slabs: `[` or
 * `,` before each row (no closing bracket), handed out as views of up to {@link ROW_SLAB_MAX}
 * bytes that the answer streams as they are. One array buffer per row (1,000 wide rows per batch:
 * 1,000 buffers of ≈ 6 KB, then copied again into the answer's chunks) outlived the young
 * generation while the client took them, was freed only at the next full collection, by then
 * scattered through glibc's heap, which stayed large (measured: +50–60 MiB resident for good after
 * a batch streaming ≈ 2 GB; docs/performance.md, "Memory"). Slabs start small (a short answer
 * costs little) and double up to {@link ROW_SLAB_MAX}. A view handed out is never written again.
 */
export class JsonPieces {
  #slab = new Uint8Array(0);
  #at = 0;
  /** Where the piece not yet handed out starts in the slab. */
  #from = 0;
  #next = 16 * 1024;
  #done: Uint8Array[] = [];
  /** Rows written so far. */
  rows = 0;
  /** The largest row written, in bytes (for {@link nextFetch}). */
  maxRow = 0;
  /** See RowSink.maxFetchBytes (src/pg/connection.ts). */
  readonly maxFetchBytes = FETCH_BYTES;

  /** Appends `buf[start, end)` (`end < start`: SQL NULL, written as `null`). */
  row(buf: Uint8Array, start: number, end: number): void {
    const len = end < start ? 4 : end - start;
    if (len > this.maxRow) this.maxRow = len;
    if (this.#slab.length - this.#at < len + 1) {
      // The slab's last piece: once it is handed on, nothing reads the slab (src/util/handoff.ts).
      this.#close(true);
      // A row larger than the next slab gets one of its own size.
      this.#slab = new Uint8Array(Math.max(this.#next, len + 1));
      this.#at = this.#from = 0;
      if (this.#next < ROW_SLAB_MAX) this.#next *= 2;
    }
    const slab = this.#slab;
    slab[this.#at++] = this.rows++ === 0 ? OPEN : COMMA;
    if (end < start) slab.set(NULL_JSON, this.#at);
    else slab.set(buf.subarray(start, end), this.#at);
    this.#at += len;
  }

  /**
   * The pieces written since the last take. `final`: no row follows, so the slab's last piece is
   * its last reader too and is marked like a retired slab's (an item's final slab is otherwise
   * freed only when the collector reaches it: ≈ 0.23 MiB per item of a wide batch kept to its end).
   */
  take(final = false): Uint8Array[] {
    this.#close(final);
    const out = this.#done;
    this.#done = [];
    return out;
  }

  #close(last = false): void {
    if (this.#at > this.#from) {
      const piece = new Uint8Array(this.#slab.buffer, this.#from, this.#at - this.#from);
      this.#done.push(last ? markSole(piece) : piece);
      this.#from = this.#at;
    }
  }
}
/** The listener options of a request's cancel (one object for every request). */
const ONCE: AddEventListenerOptions = { once: true };
const NO_PARAMS: readonly unknown[] = [];
const NO_STATEMENTS: readonly Statement[] = [];

/** Results of {@link runAs} before the statements': `begin` and the role switch. */
export const PRELUDE = 2;

/** Rows fetched per round trip of a read; a first batch smaller than this ends the read. */
export const FETCH_BATCH = 1000;

/**
 * The bytes one fetch of a read may bring (its first row always, up to `pg.query.max_row_size`):
 * what a read holds in memory at a time, whatever its rows' size. A first fetch that would bring
 * more is run again asking for the rows that fitted; later fetches ask for as many rows as
 * {@link FETCH_TARGET} holds at the largest row seen, and one bringing more anyway (rows growing
 * more than eightfold) fails the read (docs/endpoint.md, "Large rows").
 */
export const FETCH_BYTES = 16 * 1024 * 1024;

/** The bytes a fetch after the first aims at ({@link nextFetch}). */
export const FETCH_TARGET = 2 * 1024 * 1024;

/** Rows for the next fetch of a read whose largest row so far had `maxRow` bytes. */
export function nextFetch(maxRow: number, batch: number): number {
  return Math.max(1, Math.min(batch, Math.floor(FETCH_TARGET / Math.max(1, maxRow))));
}

/**
 * How {@link runAs} ends the transaction: `"commit"` or `"rollback"`, sent in the same write as
 * the statements (runAs resolves once it answered, the connection back in the pool).
 */
export interface EndOptions {
  end: "commit" | "rollback";
  /**
   * The end shares the statements' batch (one Sync): the fewest messages and promises, for the
   * read's hot path. A failed statement then skips it, and the connection's release rolls back
   * (pipelined ahead of its next request). Otherwise the end is a batch of its own in the same
   * write: it runs even after a failure (PostgreSQL answers the commit of a failed transaction
   * with ROLLBACK), so nothing is left to roll back — one round trip either way.
   */
  oneBatch?: boolean;
  /**
   * No `begin` and no end (with `oneBatch`): the statements of one batch, up to its Sync, already
   * run as one transaction, committed at the Sync (rolled back on a failure), and the role
   * switch's settings are local to it. A read known to fit one batch sends two statements
   * instead of four, for svc and for PostgreSQL. The results then start with the role switch
   * alone (one result before the statements').
   */
  implicit?: boolean;
}

/**
 * {@link runAs} leaves the transaction open: `body` gets it at once (in the tick that sent the
 * prelude) and ends it ({@link OpenTx.end}, {@link OpenTx.release}), now or later (a streamed
 * answer); runAs resolves with what `body` resolves with.
 */
export interface OpenOptions<T> {
  end: "open";
  body: (open: OpenTx) => Promise<T>;
}

/** A request's transaction that {@link runAs} left open to its body. */
export interface OpenTx {
  /** The leased connection, inside the transaction, as the request's role. */
  readonly conn: Connection;
  /**
   * Settles once `begin`, the role switch and the statements given to runAs answered: their
   * results ({@link PRELUDE} first), or the failure mapped as runAs maps it.
   */
  readonly started: Promise<Result[]>;
  /** Records progress: the lease deadline runs from the last one (src/db/pool.ts). */
  touch(): void;
  /**
   * Records that the transaction waits for its client to take a streamed chunk; `onStall` is
   * called (once) when the pool needs the connection meanwhile (src/db/pool.ts Lease.waitClient).
   */
  waitClient(onStall: () => void): void;
  /** The client took the chunk it was waiting for ({@link waitClient}). */
  clientTook(): void;
  /**
   * Continues the suspended `portal` with at most `rows` more rows into `sink`, recording
   * progress when they came.
   */
  fetch(portal: string, rows: number, sink: RowSink): Promise<Result>;
  /**
   * Ends the transaction: `commit` sends the commit and gives the connection back once it
   * answered (off the caller's path); otherwise, or on a dead connection, gives it back at once
   * (what is open is rolled back ahead of its next request).
   */
  end(commit: boolean): void;
  /**
   * Gives the connection back, the caller having ended the transaction (`ok`) or not (it is
   * rolled back ahead of the connection's next request). Only the first call counts.
   */
  release(ok: boolean): void;
}

/**
 * Runs `statements` in one transaction as `who` on a leased connection: `begin`, the role switch
 * and the statements go out as one batch (one write), a request's cancel ({@link RequestRole}
 * `signal`) cancels what the connection runs, and the connection goes back to the pool when the
 * transaction ended. A statement with more bind parameters than allowed is refused before a
 * connection is taken (400 QUERY_INVALID).
 *
 * Ended here (`end: "commit" | "rollback"`, {@link EndOptions}): resolves with every result of
 * the batch ({@link PRELUDE} first); rejects with the first failure: a failed role switch as
 * AUTH_ROLE_INVALID (src/auth/roles.ts), a statement's failure with `statementIndex` its index in
 * `statements` (-1: `begin` or the end).
 *
 * Left open (`end: "open"`, {@link OpenOptions}): with no statements, `begin` and the role switch
 * are queued for the current tick, so the body's first statements (issued before it awaits) join
 * their batch. A body that fails gives the connection back.
 */
export function runAs(
  db: Database,
  who: RequestRole,
  statements: readonly Statement[],
  opts: EndOptions,
): Promise<Result[]>;
export function runAs<T>(
  db: Database,
  who: RequestRole,
  statements: readonly Statement[],
  opts: OpenOptions<T>,
): Promise<T>;
export async function runAs<T>(
  db: Database,
  who: RequestRole,
  statements: readonly Statement[],
  opts: EndOptions | OpenOptions<T>,
): Promise<Result[] | T> {
  const n = statements.length;
  // Too many bind parameters or too long a text: refused before a connection is taken.
  for (let i = 0; i < n; i++) {
    const tooMany = db.statementError(statements[i].sql, statements[i].params ?? NO_PARAMS);
    if (tooMany) throw tooMany;
  }
  const lease = db.tryAcquire(who.requestId) ?? await db.acquire(who.signal, who.requestId);
  const role = setRole(who, db.statementTimeoutText);
  // Answered together at the pipeline's end: the lease deadline allows each its time.
  if (n > 1) lease.statements = n;
  tie(who, lease);
  try {
    if (opts.end === "open") return await open(lease, who, role, statements, opts.body);
    const conn = lease.conn;
    const end = opts.end === "commit" ? COMMIT : ROLLBACK;
    if (opts.oneBatch) {
      let ok = false;
      const implicit = opts.implicit === true;
      try {
        const results = await conn.execute(
          implicit
            ? (n === 1 ? [role, statements[0]] : [role, ...statements])
            : batchOf(role, statements, end),
        );
        ok = true;
        return results;
      } catch (e) {
        throw statementError(e, n, implicit ? 1 : PRELUDE);
      } finally {
        untie(who, lease);
        lease.release(ok);
      }
    }
    // The end is a batch of its own (its own Sync) in the same write: after a failed statement it
    // still runs and ends the transaction (PostgreSQL answers the commit of a failed transaction
    // with ROLLBACK), so no separate rollback follows the error — one round trip either way.
    const [body, closing] = conn.corked(() => [
      conn.execute(batchOf(role, statements, null)),
      conn.execute(end === COMMIT ? COMMIT_ALONE : ROLLBACK_ALONE),
    ]);
    const [ran, ended] = await Promise.allSettled([body, closing]);
    untie(who, lease);
    const ok = ran.status === "fulfilled" && ended.status === "fulfilled";
    // Over either way once the end went through: nothing left to roll back.
    lease.release(ok || (ended.status === "fulfilled" && conn.txStatus === "I"));
    if (ran.status === "rejected") throw statementError(ran.reason, n);
    if (ended.status === "rejected") throw statementError(ended.reason, -1);
    return ran.value;
  } catch (e) {
    throw lease.overBudget ? pastTransactionTimeout(e, db.transactionTimeout) : e;
  }
}

/**
 * The failure of a request the pool cancelled past `pg.query.transaction_timeout` (src/db/pool.ts):
 * its statement's 57014 ("canceling statement due to user request") said as what happened.
 */
function pastTransactionTimeout(e: unknown, ms: number): unknown {
  const code = (e as { code?: unknown } | null)?.code;
  if (code !== "57014" && code !== "PG_57014") return e;
  return new SvcError(
    "PG_57014",
    `the request's statements ran longer than pg.query.transaction_timeout (${ms} ms) in all: ` +
      "cancelled",
    { status: 504 },
  );
}

/**
 * Ties the request's cancel to its lease (a cancel sent for what the connection runs): through the
 * request's own hooks when it has them (src/http/identify.ts), else a listener on its signal.
 */
function tie(who: RequestRole, lease: Lease): void {
  const signal = who.signal;
  if (!signal) return;
  if (signal.aborted) lease.cancel();
  else if (who.cancels) who.cancels.hook(lease);
  else signal.addEventListener("abort", lease, ONCE);
}

/** Unties what {@link tie} tied (the lease's statements are over). */
function untie(who: RequestRole, lease: Lease): void {
  const signal = who.signal;
  if (!signal) return;
  if (who.cancels) who.cancels.unhook(lease);
  else signal.removeEventListener("abort", lease);
}

/** `begin`, the role switch, `statements` and `end` (null: none) as one batch. */
function batchOf(
  role: Statement,
  statements: readonly Statement[],
  end: Statement | null,
): Statement[] {
  const n = statements.length;
  if (n === 1) return end ? [BEGIN, role, statements[0], end] : [BEGIN, role, statements[0]];
  const batch = [BEGIN, role];
  for (let i = 0; i < n; i++) batch.push(statements[i]);
  if (end) batch.push(end);
  return batch;
}

/** The open transaction of {@link runAs}: sends the prelude and hands the transaction to `body`. */
async function open<T>(
  lease: Lease,
  who: RequestRole,
  role: Statement,
  statements: readonly Statement[],
  body: (open: OpenTx) => Promise<T>,
): Promise<T> {
  const conn = lease.conn;
  const n = statements.length;
  let started: Promise<Result[]>;
  if (n === 0) {
    const begin = conn.query(BEGIN);
    const switched = conn.query(role);
    started = Promise.all([begin, switched.catch((e) => Promise.reject(roleError(e)))]);
  } else {
    started = conn.execute(batchOf(role, statements, null))
      .catch((e) => Promise.reject(statementError(e, n)));
  }
  const release = (ok: boolean) => {
    untie(who, lease);
    lease.release(ok);
  };
  const tx: OpenTx = {
    conn,
    started,
    touch: () => lease.touch(),
    waitClient: (onStall) => lease.waitClient(onStall),
    clientTook: () => lease.clientTook(),
    fetch: async (portal, rows, sink) => {
      const r = await conn.fetch(portal, rows, { sink });
      lease.touch();
      return r;
    },
    end: (commit) => {
      if (!commit || conn.error) return release(false);
      untie(who, lease);
      conn.execute(COMMIT_ALONE).then(() => lease.release(true), () => lease.release(false));
    },
    release,
  };
  try {
    return await body(tx);
  } catch (e) {
    release(false);
    throw e;
  }
}

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
   * `batch` rows at a time as pieces of one JSON array ({@link JsonPieces}: `[` or `,` before
   * each row, no closing bracket), and the next batch is fetched only once its promise resolved
   * (a rejection ends the read with that error), so one batch is in memory at a time. Resolves
   * with the number of rows.
   */
  rows(
    sql: string,
    params: unknown[],
    batch: number,
    each: (pieces: Uint8Array[]) => Promise<void> | void,
  ): Promise<number>;
  /** See {@link OpenTx.waitClient}. */
  waitClient(onStall: () => void): void;
  /** See {@link OpenTx.clientTook}. */
  clientTook(): void;
}

/**
 * Runs `body` in a transaction as `who` ({@link runAs}, left open). `begin` and the role switch
 * go out with the body's first statements (one batch: the statements issued in the same tick
 * share a write and a Sync); `commit` follows the body.
 */
export function transaction<T>(
  db: Database,
  who: RequestRole,
  body: (tx: RequestTx) => Promise<T>,
): Promise<T> {
  return runAs(db, who, NO_STATEMENTS, {
    end: "open",
    body: (open) => inside(db, who, open, body),
  });
}

/** The body of {@link transaction}: its statements, the root cause of a failure, the commit. */
async function inside<T>(
  db: Database,
  who: RequestRole,
  open: OpenTx,
  body: (tx: RequestTx) => Promise<T>,
): Promise<T> {
  const conn = open.conn;
  const touch = open.touch;
  const sent: Promise<unknown>[] = [];
  let portals = 0;
  const tx: RequestTx = {
    conn,
    waitClient: open.waitClient,
    clientTook: open.clientTook,
    send(sql) {
      const q = conn.query({ sql });
      q.then(touch, touch); // failures are reported through `sent` below
      sent.push(q);
    },
    query: (sql, params, opts) => {
      // Too many bind parameters or too long a text: refused before the statement is sent.
      const tooMany = db.statementError(sql, params);
      if (tooMany) return Promise.reject(tooMany);
      const q = conn.query({ sql, params, prepare: opts?.prepare ?? true });
      q.then(touch, touch);
      return q.then(withCount);
    },
    rows: async (sql, params, batch, each) => {
      const tooMany = db.statementError(sql, params);
      if (tooMany) throw tooMany;
      // A named portal with a row limit: it survives the transaction's other statements (which
      // use the unnamed one) between fetches, closed once read to its end.
      let portal = `svc_rows${++portals}`;
      let sink = new JsonPieces();
      let r: Result;
      try {
        r = await conn.query({ sql, params, prepare: true, sink, maxRows: batch, portal });
      } catch (e) {
        // Rows too large to take 1,000 at a time: asked again, as many as fitted (its first
        // portal is closed with the next statement; nothing of it was handed on).
        if (!(e instanceof PgFetchTooLargeError)) throw e;
        conn.closePortal(portal);
        portal = `svc_rows${++portals}`;
        sink = new JsonPieces();
        r = await conn.query({ sql, params, prepare: true, sink, maxRows: e.rows, portal });
      }
      touch(); // a batch of rows came: the lease makes progress
      let handed = 0;
      for (;;) {
        // Back-pressure: the next batch is asked for once these are taken. They are not held
        // here meanwhile: the next fetch's round trip keeps nothing of them alive.
        const final = !r.suspended;
        if (sink.rows > handed) {
          handed = sink.rows;
          await each(sink.take(final));
        }
        if (final) {
          // Read to its end: its executor's memory goes with the next statement, not at commit.
          conn.closePortal(portal);
          return sink.rows;
        }
        r = await open.fetch(portal, nextFetch(sink.maxRow, batch), sink);
      }
    },
  };
  const started = open.started;
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
    open.release(ok);
  }
}

/**
 * Runs `statements` in one transaction as `who`, in one batch with begin, the role switch and
 * commit: one write, one round trip ({@link runAs}). A failure skips the rest (PostgreSQL) and is
 * thrown with `statementIndex` (the failing statement, -1 for the prelude or the end); the
 * transaction is rolled back. With `end: "rollback"` the transaction is rolled back instead of
 * committed (a request asking for rollback).
 */
export async function pipeline(
  db: Database,
  who: RequestRole,
  statements: { sql: string; params: unknown[] }[],
  end: "commit" | "rollback" = "commit",
): Promise<Row[][]> {
  const results = await runAs(db, who, statements, end === "commit" ? COMMIT_END : ROLLBACK_END);
  const out: Row[][] = new Array(statements.length);
  for (let i = 0; i < statements.length; i++) out[i] = withCount(results[i + PRELUDE]);
  return out;
}

const COMMIT_END: EndOptions = { end: "commit" };
const ROLLBACK_END: EndOptions = { end: "rollback" };

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

/** Maps a batch failure: role switch → AUTH_ROLE_INVALID; `statementIndex` of the request's. */
function statementError(e: unknown, n: number, first = PRELUDE): unknown {
  if (e instanceof PgError) {
    const at = e.statementIndex ?? -1;
    if (at === first - 1) return roleError(e);
    e.statementIndex = at >= first && at < first + n ? at - first : -1;
  }
  return e;
}
