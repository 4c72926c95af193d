/**
 * The request pool, on svc's own PostgreSQL client (src/pg/): connection slots, leases (one
 * request per connection at a time, bounded waits, the lease deadline), idle close, reconnect
 * backoff, stats and close. What a request runs on its lease — `begin`, the role switch, its
 * statements and the end, in one batch — is src/db/run_as.ts (docs/database-client.md, "The pool").
 *
 * @module
 */
import { Connection } from "../pg/connection.ts";
import { type ConnectConfig, resolveConfig } from "../pg/config.ts";
import { PgConnectionError } from "../pg/errors.ts";
import type { Statement } from "../pg/connection.ts";
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import { metrics } from "../observe/metrics.ts";
import { deadline } from "../util/deadline.ts";
import { paramsError, WIRE_MAX_PARAMS } from "./bind_limit.ts";

const ROLLBACK: Statement = { sql: "rollback" };

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

/** Pool limits (docs/configuration.md: `pg.pool_size`, `pg.pool_timeout`, …). */
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
   * Named prepared statements (`pg.prepared_statements`, default true); false: unnamed statements
   * only, for PgBouncer in transaction mode (still one round trip per request).
   */
  preparedStatements?: boolean;
}

/** Default of `pg.lease_grace`, in seconds. */
export const DEFAULT_LEASE_GRACE = 5;

/**
 * Named prepared statements kept per pooled connection; beyond it the least recently used one is
 * closed (see src/pg/connection.ts).
 */
export const MAX_STATEMENTS = 1000;

// Times here are `Date.now()`: millisecond precision is enough, and it costs no runtime op
// (`performance.now()` does, several times per request).

/** A free connection unused this long is closed (the next request opens a new one). */
const IDLE_CLOSE_MS = 60_000;

/** Reconnect backoff after consecutive failed connects: 10 ms doubling, at most 250 ms. */
function backoffMs(failures: number): number {
  return failures === 0 ? 0 : Math.min(10 * 2 ** (failures - 1), 250);
}

/** A leased connection and the way to give it back. */
export interface Lease {
  conn: Connection;
  /**
   * Gives the connection back. `ok`: the request ended its transaction normally. Otherwise a
   * transaction left open is rolled back (pipelined ahead of the next request). A no-op once the
   * lease deadline closed the connection.
   */
  release(ok?: boolean): void;
  /**
   * Records progress (a statement answered, a streamed batch taken by the client): the lease
   * deadline runs from the last progress.
   */
  touch(): void;
  /**
   * Sends a CancelRequest for what the connection runs. The connection is closed when the lease
   * ends (a cancel arriving late must not hit the next request's statement).
   */
  cancel(): void;
}

/** The lease a slot is under, as the lease deadline sees it. */
interface Holder {
  /** `Date.now()` of the lease or of its last progress. */
  activeAt: number;
  /** Set when the lease deadline closed the connection; the lease's release is then a no-op. */
  killed: boolean;
  /** Set when a cancel was sent: the connection is not reused. */
  cancelled: boolean;
  /** The request's `X-Request-Id` (for the log line). */
  requestId?: string;
}

/** One connection place of the pool. */
interface Slot {
  /** Its open connection (null: the next request connects). */
  conn: Connection | null;
  /** The lease the slot is under (null: free, or connecting for a request not yet granted). */
  holder: Holder | null;
  /** Consecutive failed connects (for the backoff). */
  failures: number;
  /** `Date.now()` of the last failed connect. */
  failedAt: number;
  /** When the slot last went back to the free list (`Date.now()`). */
  freeAt: number;
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
 */
export class Database {
  readonly #config: ConnectConfig;
  readonly #slots: Slot[];
  readonly #free: Slot[];
  readonly #waiters: ((slot: Slot) => void)[] = [];
  readonly #poolTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  readonly #maxStatements: number;
  /** Milliseconds a lease may go without progress; 0: no deadline. */
  readonly #leaseDeadlineMs: number;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  #closing = false;
  /** Set while {@link close} waits for every slot to come back to the free list. */
  #allFree: (() => void) | null = null;
  /** `pg.query.statement_timeout` in milliseconds, applied in every request's prelude. */
  readonly statementTimeout: number;
  /** Most bind parameters one statement may carry (`pg.query.max_params`). */
  readonly maxParams: number;

  /** Opens a lazy pool (`opts` or just its size); nothing connects before the first request. */
  constructor(uri: string, opts: PoolOptions | number) {
    const o = typeof opts === "number" ? { size: opts } : opts;
    this.#config = resolveConfig(uri);
    this.#poolTimeoutMs = (o.poolTimeout ?? 5) * 1000;
    this.#connectTimeoutMs = (o.connectTimeout ?? 5) * 1000;
    this.#maxStatements = o.preparedStatements === false ? 0 : MAX_STATEMENTS;
    this.statementTimeout = o.statementTimeout ?? 0;
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
  #kill(slot: Slot, holder: Holder, now: number): void {
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
   * Takes a free slot, waiting at most `pg.pool_timeout` (then 503 PG_POOL_EXHAUSTED). The wait
   * is a coarse shared deadline (src/util/deadline.ts), not a timer per waiting request.
   */
  #take(signal?: AbortSignal): Promise<Slot> {
    return new Promise((resolve, reject) => {
      const done = () => {
        limit.clear();
        signal?.removeEventListener("abort", onAbort);
      };
      const grant = (slot: Slot) => {
        done();
        resolve(slot);
      };
      const giveUp = (e: unknown) => {
        done();
        const i = this.#waiters.indexOf(grant);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(e);
      };
      const onAbort = () => giveUp(signal!.reason);
      const ms = this.#poolTimeoutMs;
      const limit = deadline(ms, () =>
        giveUp(
          new SvcError(
            "PG_POOL_EXHAUSTED",
            `no database connection became free within ${ms / 1000} s`,
          ),
        ));
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(grant);
    });
  }

  /** Returns a slot to the longest waiter, or to the free list. */
  #give(slot: Slot): void {
    const next = this.#waiters.shift();
    if (next) return next(slot);
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

  /** A lease of `slot` whose connection is `conn`. */
  #lease(slot: Slot, conn: Connection, requestId?: string): Lease {
    const holder: Holder = {
      activeAt: Date.now(),
      killed: false,
      cancelled: false,
      requestId,
    };
    slot.holder = holder;
    if (this.#watchdog === undefined) this.#watch();
    let released = false;
    return {
      conn,
      touch: () => (holder.activeAt = Date.now()),
      cancel: () => {
        holder.cancelled = true;
        conn.cancel().catch(() => {});
      },
      release: (ok?: boolean) => {
        if (released) return;
        released = true;
        if (holder.killed) return; // closed by the lease deadline; the slot is in use again
        slot.holder = null;
        if (conn.error || holder.cancelled || this.#closing) {
          // Dead, or a cancel may still be on its way: never handed out again.
          if (slot.conn === conn) slot.conn = null;
          if (!conn.error) void conn.close();
        } else if (!ok || conn.txStatus !== "I") {
          // Whatever the request left open is rolled back ahead of the next request's batch.
          conn.execute([ROLLBACK]).catch(() => {});
        }
        this.#give(slot);
      },
    };
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
    if (live && !live.error) return this.#lease(slot, live, requestId);
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
