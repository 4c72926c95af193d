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
import {
  DEFAULT_MAX_STATEMENT_SIZE,
  paramsError,
  statementSizeError,
  WIRE_MAX_PARAMS,
} from "./bind_limit.ts";

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
   * Milliseconds a request may run its statements in all, time waiting for its client not counted
   * (`pg.query.transaction_timeout`, 0: no limit).
   */
  transactionTimeout?: number;
  /**
   * Seconds past the statement timeout a lease may go without progress before its connection is
   * closed and replaced (`pg.lease_grace`, default {@link DEFAULT_LEASE_GRACE}).
   */
  leaseGrace?: number;
  /**
   * Seconds a lease may wait for its client to take a streamed answer while requests wait for a
   * connection before the answer is asked to let go of it (`pg.stall_timeout`, default
   * {@link DEFAULT_STALL_TIMEOUT}; see {@link Lease.waitClient}).
   */
  stallTimeout?: number;
  /** Most bind parameters one statement may carry (`pg.query.max_params`; default: the hard limit). */
  maxParams?: number;
  /** Longest SQL text of one statement (`pg.query.max_statement_size`). */
  maxStatementSize?: number;
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

/** Default of `pg.stall_timeout`, in seconds. */
export const DEFAULT_STALL_TIMEOUT = 1;

/** Default of `pg.lease_grace`, in seconds. */
export const DEFAULT_LEASE_GRACE = 5;

/**
 * Named prepared statements kept per pooled connection; beyond it the least recently used one is
 * closed (see src/pg/connection.ts). Each costs its backend memory for as long as it is kept
 * (≈ 34 KiB for a 3-level nested read: 1,000 of them made a backend 36 MiB; see
 * docs/performance.md).
 */
export const MAX_STATEMENTS = 256;

/** Characters of a statement's text taken as one bind parameter's placeholder and cast. */
const PLACEHOLDER_ALLOWANCE = 32;

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
export class Lease {
  /** `Date.now()` of the lease or of its last progress. */
  activeAt = Date.now();
  /** Set when the lease deadline closed the connection; {@link release} is then a no-op. */
  killed = false;
  /** Set when a cancel was sent: the connection is not reused. */
  cancelled = false;
  /** Set once released. */
  released = false;
  /** `Date.now()` since when the lease waits for its client (0: it does not; {@link waitClient}). */
  clientSince = 0;
  /** What the lease's answer does to let go of the connection ({@link waitClient}). */
  onStall: (() => void) | null = null;
  /**
   * Milliseconds the lease has run the request's statements (its time not waiting for its client),
   * as of {@link sweptAt}: the whole request's budget is `pg.query.statement_timeout`.
   */
  busyMs = 0;
  /** `Date.now()` of the lease or of the pool's last sweep of it. */
  sweptAt = this.activeAt;
  /** Set when the request ran past its budget and was cancelled. */
  overBudget = false;
  /**
   * The request's statements sent in one pipeline (a write's, a batch's): PostgreSQL answers them
   * together at its end, each taking up to the statement timeout, so the lease deadline allows
   * each of them its time (the transaction timeout bounds them together). Set by runAs.
   */
  statements = 1;

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
   * Records that the lease waits for its client to take a chunk of a streamed answer. When the
   * client takes nothing for `pg.stall_timeout` while other requests wait for a connection, or
   * past the lease deadline, the pool calls `onStall` once: the answer then lets go of the
   * connection soon (reads the rest ahead or ends; src/http/read_ahead.ts).
   */
  waitClient(onStall: () => void): void {
    this.clientSince = Date.now();
    this.onStall = onStall;
  }

  /** The client took a chunk ({@link waitClient}): progress. */
  clientTook(): void {
    this.clientSince = 0;
    this.activeAt = Date.now();
  }

  /** Calls the lease's {@link onStall} (once), if it waits for its client. */
  stall(): boolean {
    const onStall = this.onStall;
    if (this.clientSince === 0 || onStall === null || this.released) return false;
    this.onStall = null;
    this.activeAt = Date.now(); // the answer gets a new deadline to let go
    onStall();
    return true;
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

  /** As an abort listener of the request's signal: {@link cancel}. */
  handleEvent(): void {
    this.cancel();
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
  /** Settles the waiter's {@link Database.acquire} with a lease (or its promise). */
  grant: (lease: Lease | Promise<Lease>) => void;
  fail: (e: unknown) => void;
  /** `Date.now()` when it started waiting. */
  at: number;
  signal: AbortSignal | undefined;
  /** The request's `X-Request-Id` (for its lease). */
  requestId: string | undefined;
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
 * the client; a pipeline of n statements, answered together at its end, is allowed (n − 1) more
 * statement timeouts, at most the transaction timeout. Past it the connection's statement is
 * cancelled and the connection destroyed (its pending statements fail, it is never handed out
 * again), the request fails (503 PG_UNAVAILABLE), the slot serves the next request
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
  /** Milliseconds a lease may run statements in all (`transactionTimeout`); 0: no limit. */
  readonly #budgetMs: number;
  /** `pg.query.transaction_timeout` in milliseconds (0: no limit). */
  get transactionTimeout(): number {
    return this.#budgetMs;
  }
  /** Milliseconds past {@link #budgetMs} before the lease's connection is closed. */
  readonly #graceMs: number;
  /** `pg.stall_timeout` in milliseconds. */
  readonly #stallMs: number;
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
  /** Longest SQL text of one statement (`pg.query.max_statement_size`). */
  readonly maxStatementSize: number;

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
    this.maxStatementSize = o.maxStatementSize ?? DEFAULT_MAX_STATEMENT_SIZE;
    this.#graceMs = (o.leaseGrace ?? DEFAULT_LEASE_GRACE) * 1000;
    this.#leaseDeadlineMs = this.statementTimeout > 0 ? this.statementTimeout + this.#graceMs : 0;
    this.#budgetMs = o.transactionTimeout ?? 0;
    this.#stallMs = (o.stallTimeout ?? DEFAULT_STALL_TIMEOUT) * 1000;
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

  /**
   * The 400 QUERY_INVALID for a statement with more bind parameters, or a longer SQL text, than
   * allowed; null when it may be sent.
   */
  statementError(sql: string, params: readonly unknown[]): SvcError | null {
    if (params.length > this.maxParams) return paramsError(params.length, this.maxParams);
    // Bind placeholders (`$n::type`) are what pg.query.max_params bounds: not counted here.
    const size = sql.length - PLACEHOLDER_ALLOWANCE * params.length;
    return size > this.maxStatementSize ? statementSizeError(size, this.maxStatementSize) : null;
  }

  /** Starts the lease deadline's sweep (it stops itself once no slot is leased). */
  #watch(): void {
    if (this.#watchdog !== undefined || this.#closing) return;
    if (this.#leaseDeadlineMs === 0 && this.#budgetMs === 0) return;
    const every = Math.min(1000, Math.max(50, (this.#leaseDeadlineMs || this.#budgetMs) / 10));
    this.#watchdog = setInterval(() => this.#sweep(), every);
    Deno.unrefTimer(this.#watchdog);
  }

  /**
   * Closes the connections of leases past the deadline, and bounds a request's statements
   * together: one whose statements have run longer than the transaction timeout in all (a batch of
   * statements each just under the statement timeout, a write of many) is cancelled (504
   * `PG_57014`), and its connection closed past the lease grace beyond that.
   */
  #sweep(): void {
    const now = Date.now();
    let leased = 0;
    for (const slot of this.#slots) {
      const holder = slot.holder;
      if (!holder) continue;
      if (holder.clientSince === 0) holder.busyMs += now - holder.sweptAt;
      holder.sweptAt = now;
      if (this.#budgetMs > 0 && holder.busyMs > this.#budgetMs) {
        if (holder.busyMs > this.#budgetMs + this.#graceMs) {
          this.#kill(slot, holder, now, "running statements");
          continue;
        }
        if (!holder.overBudget) {
          holder.overBudget = true;
          log.warn(
            "request {request_id} ran statements for {ms} ms in all, past " +
              "pg.query.transaction_timeout ({timeout} ms): cancelling it",
            { request_id: holder.requestId, ms: holder.busyMs, timeout: this.#budgetMs },
          );
          holder.cancel();
        }
      }
      if (this.#leaseDeadlineMs === 0 || now - holder.activeAt <= this.#deadlineOf(holder)) {
        leased++;
      } else if (holder.stall()) leased++; // waits for its client: it lets go of the connection
      else this.#kill(slot, holder, now, "without progress");
    }
    if (leased === 0) {
      clearInterval(this.#watchdog);
      this.#watchdog = undefined;
    }
  }

  /**
   * How long `holder` may go without progress: the lease deadline, plus the statement timeout for
   * each more statement of its pipeline (their answers come together at its end), at most the
   * transaction timeout (which bounds them together, {@link #sweep}). Found by a hostile probe: a
   * write of three 17 s statements was closed as stalled at 35 s, 503 PG_UNAVAILABLE.
   */
  #deadlineOf(holder: Lease): number {
    if (holder.statements <= 1) return this.#leaseDeadlineMs;
    const more = (holder.statements - 1) * this.statementTimeout;
    return this.#leaseDeadlineMs + (this.#budgetMs > 0 ? Math.min(more, this.#budgetMs) : more);
  }

  /**
   * Ends a lease past the deadline: destroys its connection (the request's pending statements
   * fail at once) and hands the slot to the next request, which connects anew.
   */
  #kill(slot: Slot, holder: Lease, now: number, why: string): void {
    holder.killed = true;
    slot.holder = null;
    metrics.leasesKilled.inc();
    log.error(
      "pooled connection leased for {ms} ms {why} (past its timeout, {timeout} ms, + " +
        "pg.lease_grace): closing it and opening a fresh one",
      {
        why,
        ms: Math.round(why === "without progress" ? now - holder.activeAt : holder.busyMs),
        timeout: why === "without progress" ? this.statementTimeout : this.#budgetMs,
        request_id: holder.requestId,
      },
    );
    const conn = slot.conn;
    slot.conn = null;
    // The backend may still run the statement: cancel it (over a connection of its own) rather
    // than leave it running, unseen, beside the fresh connection taking the slot.
    conn?.cancel().catch(() => {});
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
  #take(signal: AbortSignal | undefined, requestId: string | undefined): Promise<Lease> {
    return new Promise((grant, fail) => {
      this.#waiters.push({ grant, fail, at: Date.now(), signal, requestId });
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
    if (keep.length > 0) this.#unstall();
    if (keep.length === 0) {
      clearInterval(this.#waitTimer);
      this.#waitTimer = undefined;
    }
  }

  /**
   * Requests wait for a connection: the leases that waited for their client for `pg.stall_timeout`
   * are asked to let go of theirs ({@link Lease.waitClient}).
   */
  #unstall(): void {
    const since = Date.now() - this.#stallMs;
    for (const slot of this.#slots) {
      const holder = slot.holder;
      if (holder !== null && holder.clientSince !== 0 && holder.clientSince <= since) {
        holder.stall();
      }
    }
  }

  /** Returns a slot to the longest waiter (an aborted one fails instead), or to the free list. */
  #give(slot: Slot): void {
    for (let next = this.#waiters.shift(); next; next = this.#waiters.shift()) {
      // A live connection is leased at once: the waiter resumes with its lease.
      if (!next.signal?.aborted) return next.grant(this.#onSlot(slot, next.signal, next.requestId));
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
   * Leases a free slot's live connection at once, or null when that needs waiting or connecting
   * (then {@link acquire}): the common case without a promise.
   */
  tryAcquire(requestId?: string): Lease | null {
    if (this.#closing) return null;
    const free = this.#free;
    const slot = free[free.length - 1];
    if (slot === undefined) return null;
    const live = slot.conn;
    if (live === null || live.error || this.#expired(slot)) return null;
    free.pop();
    return this.#lease(slot, live, requestId);
  }

  /**
   * Leases a connection: waits at most `pg.pool_timeout` for a free slot (503
   * PG_POOL_EXHAUSTED), then, when the slot has no live connection, at most `pg.connect_timeout`
   * for a new one (503 PG_UNAVAILABLE).
   */
  acquire(signal?: AbortSignal, requestId?: string): Promise<Lease> {
    if (this.#closing) {
      return Promise.reject(new PgConnectionError("CONNECTION_ENDED", "the pool is closing"));
    }
    const slot = this.#free.pop();
    if (slot === undefined) return this.#take(signal, requestId);
    const lease = this.#onSlot(slot, signal, requestId);
    return lease instanceof Lease ? Promise.resolve(lease) : lease;
  }

  /**
   * The lease of a slot just taken: at once when its connection is live (no promise: a waiter
   * granted a slot resumes with its lease), else the promise of a new connection's.
   */
  #onSlot(slot: Slot, signal: AbortSignal | undefined, requestId?: string): Lease | Promise<Lease> {
    const live = slot.conn;
    if (live && !live.error) {
      if (!this.#expired(slot)) return this.#lease(slot, live, requestId);
      void live.close(); // past its lifetime while free: replaced below
    }
    return this.#connectSlot(slot, signal, requestId);
  }

  /** Opens a new connection on `slot` (after the backoff) and leases it. */
  async #connectSlot(
    slot: Slot,
    signal: AbortSignal | undefined,
    requestId: string | undefined,
  ): Promise<Lease> {
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
