/**
 * The request pool and per-request transactions, on svc's own PostgreSQL client (src/pg/).
 * Every request runs on a leased connection as `begin; select set_config('role', $1, true),
 * set_config('svc.jwt.claims', $2, true) (also statement_timeout and svc.request_id); …; commit`,
 * all in one batch (one write, one Sync), so a single read costs one round trip (a read known to
 * fit one batch drops `begin`/`commit`: the batch up to its Sync is already one transaction).
 * The role switch is its own statement because privileges are checked per statement.
 */
import { Connection } from "../pg/connection.ts";
import { type ConnectConfig, resolveConfig } from "../pg/config.ts";
import { PgConnectionError, PgError, PgSkippedError } from "../pg/errors.ts";
import { JsonArraySink } from "../pg/json.ts";
import type { Result, RowSink, Statement } from "../pg/connection.ts";
import type { Row, Tx } from "./tx.ts";
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import { metrics } from "../observe/metrics.ts";
import { paramsError, WIRE_MAX_PARAMS } from "./bind_limit.ts";
import { type RequestRole, roleError, setRole } from "../auth/roles.ts";

const BEGIN: Statement = { sql: "begin" };
const COMMIT: Statement = { sql: "commit" };
const ROLLBACK: Statement = { sql: "rollback" };
/** A SQL NULL row of a streamed read, as JSON. */
const NULL_JSON = new TextEncoder().encode("null");

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

/** Figures of a request pool (health, metrics). */
export interface PoolStats {
  size: number;
  in_use: number;
  waiting: number;
  /**
   * Connections leased for longer than `pg.query.statement_timeout` without progress (see
   * {@link Database}); when every connection is, the process is not ready.
   */
  overdue: number;
}

/** Pool limits (docs/database-client.md "The pool"). */
export interface PoolOptions {
  /** Connections for requests (`pg.pool_size`). */
  size: number;
  /** Seconds a request may wait for a free connection (`pg.pool_timeout`). */
  poolTimeout?: number;
  /** Seconds a new connection may take (`pg.connect_timeout`). */
  connectTimeout?: number;
  /** Milliseconds a request's statements may run (`pg.query.statement_timeout`, 0: no limit). */
  statementTimeout?: number;
  /**
   * Seconds past the statement timeout a lease may go without progress before its connection is
   * closed and replaced (`pg.lease_grace`, default {@link DEFAULT_LEASE_GRACE}).
   */
  leaseGrace?: number;
  /** Most bind parameters one statement may carry (`pg.query.max_params`; default: the hard limit). */
  maxParams?: number;
  /**
   * Seconds a connection serves before it is closed and replaced (`pg.max_lifetime`, default
   * {@link DEFAULT_MAX_LIFETIME}; 0: for ever). See {@link Database}.
   */
  maxLifetime?: number;
  /**
   * Named prepared statements (`pg.prepared_statements`, default true); false: unnamed statements
   * only, for PgBouncer in transaction mode (still one round trip per request).
   */
  preparedStatements?: boolean;
}

/** Default of `pg.max_lifetime`, in seconds. */
export const DEFAULT_MAX_LIFETIME = 3600;

/** Default of `pg.lease_grace`, in seconds. */
export const DEFAULT_LEASE_GRACE = 5;

/**
 * Named prepared statements kept per pooled connection; beyond it the least recently used one is
 * closed (see src/pg/connection.ts). Each costs its backend memory for as long as it is kept
 * (≈ 34 KiB for a 3-level nested read: 1,000 of them made a backend 36 MiB; see
 * docs/performance.md).
 */
export const MAX_STATEMENTS = 256;

// Times here are `Date.now()`: millisecond precision is enough, and it costs no runtime op
// (`performance.now()` does, several times per request).

/** How often the waiters for a free connection are checked for timeouts and aborts. */
const WAIT_SWEEP_MS = 50;

/** A free connection unused this long is closed (the next request opens a new one). */
const IDLE_CLOSE_MS = 60_000;

/** Reconnect backoff after consecutive failed connects: 10 ms doubling, at most 250 ms. */
function backoffMs(failures: number): number {
  return failures === 0 ? 0 : Math.min(10 * 2 ** (failures - 1), 250);
}

/**
 * A leased connection and the way to give it back; also what the lease deadline sees of it (one
 * object per lease: no closures per request).
 */
class Lease {
  /** `Date.now()` of the lease or of its last progress. */
  activeAt = Date.now();
  /** Set when the lease deadline closed the connection; {@link release} is then a no-op. */
  killed = false;
  /** Set when a cancel was sent: the connection is not reused. */
  cancelled = false;
  /** Set once released. */
  released = false;

  constructor(
    readonly slot: Slot,
    readonly conn: Connection,
    /** The request's `X-Request-Id` (for the log line). */
    readonly requestId: string | undefined,
    readonly end: (lease: Lease, ok: boolean) => void,
  ) {}

  /**
   * Records progress (a statement answered, a streamed batch taken by the client): the lease
   * deadline runs from the last progress.
   */
  touch(): void {
    this.activeAt = Date.now();
  }

  /**
   * Sends a CancelRequest for what the connection runs (not once released). The connection is
   * closed when the lease ends (a cancel arriving late must not hit the next request's
   * statement).
   */
  cancel(): void {
    if (this.released) return;
    this.cancelled = true;
    this.conn.cancel().catch(() => {});
  }

  /**
   * Gives the connection back. `ok`: the request ended its transaction normally. Otherwise a
   * transaction left open is rolled back (pipelined ahead of the next request). A no-op once the
   * lease deadline closed the connection.
   */
  release(ok = false): void {
    if (this.released) return;
    this.released = true;
    this.end(this, ok);
  }
}

/** A request waiting for a free slot. */
interface Waiter {
  grant: (slot: Slot) => void;
  fail: (e: unknown) => void;
  /** `Date.now()` when it started waiting. */
  at: number;
  signal: AbortSignal | undefined;
}

/** One connection place of the pool. */
interface Slot {
  /** Its open connection (null: the next request connects). */
  conn: Connection | null;
  /** The lease the slot is under (null: free, or connecting for a request not yet granted). */
  holder: Lease | null;
  /** Consecutive failed connects (for the backoff). */
  failures: number;
  /** `Date.now()` of the last failed connect. */
  failedAt: number;
  /** When the slot last went back to the free list (`Date.now()`). */
  freeAt: number;
  /** `Date.now()` past which its connection is replaced (`pg.max_lifetime`); 0: never. */
  expiresAt: number;
}

/**
 * The request pool: `size` connection slots and a free list of them. Requests queue here: every
 * wait is bounded (`pg.pool_timeout`) and cancellable, each connection serves one request at a
 * time, and a connection that died (socket error, server gone, protocol violation) fails
 * everything it had pending at once and is discarded, never handed out again: the next request
 * on its slot connects anew, after a short backoff when connects keep failing.
 *
 * Lease deadline: whatever the cause (a statement that never started, a network that stopped
 * answering, a client that stopped reading a streamed answer), no lease outlives
 * `statementTimeout` + `leaseGrace` without progress. Progress is a statement of the request
 * answered (PostgreSQL's statement timeout also runs per statement) or a streamed batch taken by
 * the client. Past it the connection is destroyed (its pending statements fail, it is never
 * handed out again), the request fails (503 PG_UNAVAILABLE), the slot serves the next request
 * with a new connection, and the event is logged and counted (`svc_pg_leases_killed_total`). A
 * lease past `statementTimeout` alone is "overdue" ({@link PoolStats.overdue}). With a statement
 * timeout of 0 (statements may run for ever) there is no deadline.
 *
 * Lifetime (`pg.max_lifetime`): a connection is used for at most that long (each for a random
 * 90–100% of it, so connections opened together are not replaced together). One past it is
 * closed when its lease ends, or when it is found free, and the slot's next request connects anew;
 * a lease is never interrupted by it.
 */
export class Database {
  readonly #config: ConnectConfig;
  readonly #slots: Slot[];
  readonly #free: Slot[];
  readonly #waiters: Waiter[] = [];
  /** Sweeps the waiters for timeouts and aborts while there are any. */
  #waitTimer: ReturnType<typeof setInterval> | undefined;
  readonly #end = (lease: Lease, ok: boolean) => this.#released(lease, ok);
  readonly #poolTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  readonly #maxStatements: number;
  /** `pg.max_lifetime` in milliseconds; 0: connections are kept for ever. */
  readonly #maxLifetimeMs: number;
  /** Milliseconds a lease may go without progress; 0: no deadline. */
  readonly #leaseDeadlineMs: number;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  #closing = false;
  /** Set while {@link close} waits for every slot to come back to the free list. */
  #allFree: (() => void) | null = null;
  /** `pg.query.statement_timeout` in milliseconds, applied in every request's prelude. */
  readonly statementTimeout: number;
  /** {@link statementTimeout} as the role switch's parameter. */
  readonly statementTimeoutText: string;
  /** Most bind parameters one statement may carry (`pg.query.max_params`). */
  readonly maxParams: number;

  /** Opens a lazy pool (`opts` or just its size); nothing connects before the first request. */
  constructor(uri: string, opts: PoolOptions | number) {
    const o = typeof opts === "number" ? { size: opts } : opts;
    this.#config = resolveConfig(uri);
    this.#poolTimeoutMs = (o.poolTimeout ?? 5) * 1000;
    this.#connectTimeoutMs = (o.connectTimeout ?? 5) * 1000;
    this.#maxStatements = o.preparedStatements === false ? 0 : MAX_STATEMENTS;
    this.#maxLifetimeMs = (o.maxLifetime ?? DEFAULT_MAX_LIFETIME) * 1000;
    this.statementTimeout = o.statementTimeout ?? 0;
    this.statementTimeoutText = String(this.statementTimeout);
    this.maxParams = Math.min(o.maxParams ?? WIRE_MAX_PARAMS, WIRE_MAX_PARAMS);
    this.#leaseDeadlineMs = this.statementTimeout > 0
      ? this.statementTimeout + (o.leaseGrace ?? DEFAULT_LEASE_GRACE) * 1000
      : 0;
    this.#slots = Array.from({ length: Math.max(1, o.size) }, () => ({
      conn: null,
      holder: null,
      failures: 0,
      failedAt: 0,
      freeAt: 0,
      expiresAt: 0,
    }));
    this.#free = [...this.#slots];
  }

  /** Pool figures for health and metrics. */
  stats(): PoolStats {
    let overdue = 0;
    if (this.#leaseDeadlineMs > 0) {
      const since = Date.now() - this.statementTimeout;
      for (const slot of this.#slots) if (slot.holder && slot.holder.activeAt < since) overdue++;
    }
    return {
      size: this.#slots.length,
      in_use: this.#slots.length - this.#free.length,
      waiting: this.#waiters.length,
      overdue,
    };
  }

  /** The 400 QUERY_INVALID for a statement with more bind parameters than allowed, or null. */
  paramsError(params: readonly unknown[]): SvcError | null {
    return params.length > this.maxParams ? paramsError(params.length, this.maxParams) : null;
  }

  /** Starts the lease deadline's sweep (it stops itself once no slot is leased). */
  #watch(): void {
    if (this.#watchdog !== undefined || this.#leaseDeadlineMs === 0 || this.#closing) return;
    const every = Math.min(1000, Math.max(50, this.#leaseDeadlineMs / 10));
    this.#watchdog = setInterval(() => this.#sweep(), every);
    Deno.unrefTimer(this.#watchdog);
  }

  /** Closes the connections of leases past the deadline. */
  #sweep(): void {
    const now = Date.now();
    let leased = 0;
    for (const slot of this.#slots) {
      const holder = slot.holder;
      if (!holder) continue;
      if (now - holder.activeAt > this.#leaseDeadlineMs) this.#kill(slot, holder, now);
      else leased++;
    }
    if (leased === 0) {
      clearInterval(this.#watchdog);
      this.#watchdog = undefined;
    }
  }

  /**
   * Ends a lease past the deadline: destroys its connection (the request's pending statements
   * fail at once) and hands the slot to the next request, which connects anew.
   */
  #kill(slot: Slot, holder: Lease, now: number): void {
    holder.killed = true;
    slot.holder = null;
    metrics.leasesKilled.inc();
    log.error(
      "pooled connection leased for {ms} ms without progress (pg.query.statement_timeout " +
        "{timeout} ms + pg.lease_grace): closing it and opening a fresh one",
      {
        ms: Math.round(now - holder.activeAt),
        timeout: this.statementTimeout,
        request_id: holder.requestId,
      },
    );
    const conn = slot.conn;
    slot.conn = null;
    conn?.destroy(
      new PgConnectionError(
        "CONNECTION_CLOSED",
        "the connection made no progress within the lease deadline and was closed",
      ),
    );
    this.#give(slot);
  }

  /**
   * Takes a free slot, waiting at most `pg.pool_timeout` (then 503 PG_POOL_EXHAUSTED) or until
   * `signal` aborts. Waiters are checked by one sweep of the pool every {@link WAIT_SWEEP_MS} (and
   * an aborted one is skipped when a slot comes free), not by a timer and a listener per request.
   */
  #take(signal?: AbortSignal): Promise<Slot> {
    return new Promise((grant, fail) => {
      this.#waiters.push({ grant, fail, at: Date.now(), signal });
      if (this.#waitTimer === undefined) {
        this.#waitTimer = setInterval(() => this.#sweepWaiters(), WAIT_SWEEP_MS);
        Deno.unrefTimer(this.#waitTimer);
      }
    });
  }

  /** Fails the waiters past `pg.pool_timeout` and those whose request was aborted. */
  #sweepWaiters(): void {
    const ms = this.#poolTimeoutMs;
    const since = Date.now() - ms;
    const keep: Waiter[] = [];
    for (const w of this.#waiters) {
      if (w.signal?.aborted) w.fail(w.signal.reason);
      else if (w.at <= since) {
        w.fail(
          new SvcError(
            "PG_POOL_EXHAUSTED",
            `no database connection became free within ${ms / 1000} s`,
          ),
        );
      } else keep.push(w);
    }
    this.#waiters.length = 0;
    this.#waiters.push(...keep);
    if (keep.length === 0) {
      clearInterval(this.#waitTimer);
      this.#waitTimer = undefined;
    }
  }

  /** Returns a slot to the longest waiter (an aborted one fails instead), or to the free list. */
  #give(slot: Slot): void {
    for (let next = this.#waiters.shift(); next; next = this.#waiters.shift()) {
      if (!next.signal?.aborted) return next.grant(slot);
      next.fail(next.signal.reason);
    }
    this.#free.push(slot);
    if (this.#free.length === this.#slots.length) this.#allFree?.();
    if (slot.conn) {
      slot.freeAt = Date.now();
      if (this.#idleTimer === undefined && !this.#closing) this.#scheduleIdle(IDLE_CLOSE_MS);
    }
  }

  /** Closes, in a while, the connections of slots left unused for {@link IDLE_CLOSE_MS}. */
  #scheduleIdle(ms: number): void {
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = undefined;
      const now = Date.now();
      let next = Infinity;
      for (const slot of this.#free) {
        if (!slot.conn) continue;
        const left = slot.freeAt + IDLE_CLOSE_MS - now;
        if (left <= 0) {
          const c = slot.conn;
          slot.conn = null;
          void c.close();
        } else next = Math.min(next, left);
      }
      if (next !== Infinity) this.#scheduleIdle(next);
    }, ms);
    Deno.unrefTimer(this.#idleTimer);
  }

  /** Whether the slot's connection is past its lifetime (`pg.max_lifetime`). */
  #expired(slot: Slot): boolean {
    return slot.expiresAt > 0 && Date.now() >= slot.expiresAt;
  }

  /** A lease of `slot` whose connection is `conn`. */
  #lease(slot: Slot, conn: Connection, requestId?: string): Lease {
    const lease = new Lease(slot, conn, requestId, this.#end);
    slot.holder = lease;
    if (this.#watchdog === undefined) this.#watch();
    return lease;
  }

  /** A lease ended (see {@link Lease.release}). */
  #released(lease: Lease, ok: boolean): void {
    if (lease.killed) return; // closed by the lease deadline; the slot is in use again
    const slot = lease.slot;
    const conn = lease.conn;
    slot.holder = null;
    if (conn.error || lease.cancelled || this.#closing || this.#expired(slot)) {
      // Dead, a cancel may still be on its way, or past its lifetime: never handed out again.
      if (slot.conn === conn) slot.conn = null;
      if (!conn.error) void conn.close();
    } else if (!ok || conn.txStatus !== "I") {
      // Whatever the request left open is rolled back ahead of the next request's batch.
      conn.execute([ROLLBACK]).catch(() => {});
    }
    this.#give(slot);
  }

  /**
   * Leases a connection: waits at most `pg.pool_timeout` for a free slot (503
   * PG_POOL_EXHAUSTED), then, when the slot has no live connection, at most `pg.connect_timeout`
   * for a new one (503 PG_UNAVAILABLE).
   */
  async acquire(signal?: AbortSignal, requestId?: string): Promise<Lease> {
    if (this.#closing) {
      throw new PgConnectionError("CONNECTION_ENDED", "the pool is closing");
    }
    const slot = this.#free.pop() ?? await this.#take(signal);
    const live = slot.conn;
    if (live && !live.error) {
      if (!this.#expired(slot)) return this.#lease(slot, live, requestId);
      void live.close(); // past its lifetime while free: replaced below
    }
    slot.conn = null;
    try {
      const wait = slot.failedAt + backoffMs(slot.failures) - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (signal?.aborted) throw signal.reason;
      const conn = await Connection.connect(this.#config, {
        connectTimeoutMs: this.#connectTimeoutMs,
        maxStatements: this.#maxStatements,
        applicationName: this.#config.applicationName ?? "svc",
        signal,
      });
      slot.failures = 0;
      slot.conn = conn;
      slot.expiresAt = this.#maxLifetimeMs > 0
        ? Date.now() + this.#maxLifetimeMs * (0.9 + 0.1 * Math.random())
        : 0;
      return this.#lease(slot, conn, requestId);
    } catch (e) {
      slot.failures++;
      slot.failedAt = Date.now();
      this.#give(slot);
      if (e instanceof PgConnectionError && e.code === "CONNECT_TIMEOUT") {
        const s = this.#connectTimeoutMs / 1000;
        throw new SvcError("PG_UNAVAILABLE", `the database did not answer within ${s} s`);
      }
      throw e;
    }
  }

  /**
   * Runs `body` in a transaction as `who`. `begin` and the role switch go out with the body's
   * first statements (one batch: the statements issued in the same tick share a write and a
   * Sync); `commit` follows the body.
   */
  async transaction<T>(who: RequestRole, body: (tx: RequestTx) => Promise<T>): Promise<T> {
    const lease = await this.acquire(who.signal, who.requestId);
    const conn = lease.conn;
    const touch = () => lease.touch();
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
        const tooMany = this.paramsError(params);
        if (tooMany) return Promise.reject(tooMany);
        const q = conn.query({ sql, params, prepare: opts?.prepare ?? true });
        q.then(touch, touch);
        return q.then(withCount);
      },
      rows: async (sql, params, batch, each) => {
        const tooMany = this.paramsError(params);
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
    const role = conn.query(setRole(who, this.statementTimeoutText));
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
  async pipeline(
    who: RequestRole,
    statements: { sql: string; params: unknown[] }[],
    end: "commit" | "rollback" = "commit",
  ): Promise<Row[][]> {
    // Too many bind parameters: refused before a connection is taken.
    for (const s of statements) {
      const tooMany = this.paramsError(s.params);
      if (tooMany) throw tooMany;
    }
    const lease = await this.acquire(who.signal, who.requestId);
    const batch: Statement[] = [BEGIN, setRole(who, this.statementTimeoutText)];
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

  /**
   * Closes the pool: waits up to `timeout` seconds for every lease to end (a read's commit sent
   * after its answer, a streamed answer), then closes the connections.
   */
  async close(timeout = 5): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    clearInterval(this.#watchdog);
    this.#watchdog = undefined;
    if (this.#free.length < this.#slots.length) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((r) => (this.#allFree = r)),
        new Promise((r) => (timer = setTimeout(r, timeout * 1000))),
      ]);
      clearTimeout(timer);
      this.#allFree = null;
    }
    await Promise.all(this.#slots.map(async (s) => {
      const c = s.conn;
      s.conn = null;
      if (c) await c.close(100).catch(() => {});
    }));
  }
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
  first = 2,
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
    throw statementError(e, n, first);
  } finally {
    if (signal) signal.removeEventListener("abort", onAbort);
    lease.release(ok);
  }
}

/**
 * Maps a batch failure: role switch (the statement before `first`) → AUTH_ROLE_INVALID;
 * `statementIndex` of the request's (`first`: the index of its first statement in the batch).
 */
function statementError(e: unknown, n: number, first = 2): unknown {
  if (e instanceof PgError) {
    const at = e.statementIndex ?? -1;
    if (at === first - 1) return roleError(e);
    e.statementIndex = at >= first && at < first + n ? at - first : -1;
  }
  return e;
}

/** Rows fetched per round trip of a read; a first batch smaller than this ends the read. */
export const FETCH_BATCH = 1000;

/**
 * Runs a read whose rows are JSON texts (first column) and answers a JSON array; the rows' bytes
 * go from the connection's receive buffer into the answer, never becoming strings.
 * - Known to fit one batch (`opts.small`): role switch and query in one batch, one round trip,
 *   which PostgreSQL runs as one transaction (the batch's implicit one, committed at its Sync).
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
    // No begin or commit: the statements of one batch (up to its Sync) already run as one
    // transaction, committed at the Sync (rolled back on error), and the role switch's settings
    // are local to it. Two statements instead of four, for svc and for PostgreSQL.
    try {
      await run(
        lease,
        [setRole(who, db.statementTimeoutText), { sql, params, sink }],
        who.signal,
        1,
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
      setRole(who, db.statementTimeoutText),
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
