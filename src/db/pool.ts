/**
 * The request pool and per-request transactions. Every request runs on a reserved connection as
 * `begin; select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true) (also
 * statement_timeout and svc.request_id); …; commit`,
 * all pipelined, so a single read costs one round trip (DECISIONS.md §5). The role switch is its
 * own statement because privileges are checked per statement. postgres.js queries are lazy (sent
 * when first awaited), so every pipelined query is started with `.execute()` in protocol order.
 */
import net from "node:net";
import postgres from "postgres";
import type { Row, Tx } from "./tx.ts";
import { SvcError } from "../errors.ts";
import { deadline } from "../util/deadline.ts";
import { log } from "../log.ts";
import { metrics } from "../metrics.ts";
import { paramsError, WIRE_MAX_PARAMS } from "./params.ts";

/** A failed role switch means the session's role is unusable: 401, no database text. */
function roleError(e: unknown): unknown {
  const code = (e as { code?: string }).code;
  if (code === "22023" || code === "42501" || code === "42704") {
    return new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be assumed");
  }
  return e;
}

/** Who a request runs as. */
export interface RequestRole {
  role: string;
  /** Session claims, or null when anonymous (set as JSON `null`). */
  claims: Record<string, unknown> | null;
  /** Aborting it cancels the request's running statement (reload drain timeout, shutdown). */
  signal?: AbortSignal;
  /** The request's `X-Request-Id`, set as `svc.request_id` for the transaction. */
  requestId?: string;
}

/** Sends the transaction's role, claims, statement timeout and request id (one statement). */
function setRole(
  conn: postgres.ReservedSql,
  who: RequestRole,
  statementTimeout: number,
): Promise<unknown> {
  return conn.unsafe(SET_ROLE, [
    who.role,
    JSON.stringify(who.claims),
    String(statementTimeout),
    who.requestId ?? "",
  ], { prepare: true }).execute();
}

/**
 * Starts `begin` and the role switch on a reserved connection (sent now, in this order). Resolves
 * when both succeeded; a failed role switch becomes AUTH_ROLE_INVALID.
 */
function prelude(
  conn: postgres.ReservedSql,
  who: RequestRole,
  statementTimeout: number,
): Promise<unknown> {
  const begin = conn.unsafe("begin").execute();
  const role = setRole(conn, who, statementTimeout);
  const both = Promise.all([begin, role.catch((e) => Promise.reject(roleError(e)))]);
  both.catch(() => {}); // awaited by the caller; never an unhandled rejection
  return both;
}

const SET_ROLE = "select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true), " +
  "set_config('statement_timeout', $3, true), set_config('svc.request_id', $4, true)";

/**
 * Cancels a running query (PostgreSQL CancelRequest) when `signal` aborts. The listener is removed
 * once the query settles, so a long request's signal does not keep every finished query (and its
 * rows) alive. `settled` runs when the query settles (the lease's progress). Starts the query
 * (postgres.js queries are lazy): call it in protocol order.
 */
function cancellable<Q extends { cancel(): unknown } & PromiseLike<unknown>>(
  q: Q,
  signal?: AbortSignal,
  settled?: () => void,
): Q {
  if (signal) {
    if (signal.aborted) q.cancel();
    else {
      const onAbort = () => q.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
      const off = () => {
        signal.removeEventListener("abort", onAbort);
        settled?.();
      };
      q.then(off, off);
      return q;
    }
  }
  if (settled) q.then(settled, settled);
  return q;
}

/** A transaction on a reserved connection, with raw access for streaming. */
export interface RequestTx extends Tx {
  /** The reserved connection (for cursors and raw results). */
  conn: postgres.ReservedSql;
  /**
   * Sends a statement whose result nobody waits for (a savepoint, its rollback): it is pipelined
   * ahead of whatever follows, and its failure fails the transaction at commit.
   */
  send(sql: string): void;
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

/** Pool limits (DECISIONS.md §8). */
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
}

/** Default of `pg.lease_grace`, in seconds. */
export const DEFAULT_LEASE_GRACE = 5;

/** A reserved connection and the way to give it back. */
interface Lease {
  conn: postgres.ReservedSql;
  /**
   * Gives the connection back. `ok`: the request ended its transaction normally, so the
   * reservation may be kept for the next request; otherwise it is released (the next request
   * reserves afresh, as after any failure). A no-op once the lease deadline closed it.
   */
  release(ok?: boolean): void;
  /**
   * Records progress (a statement answered, a streamed batch taken by the client): the lease
   * deadline runs from the last progress.
   */
  touch(): void;
}

/** The lease a slot is under, as the lease deadline sees it. */
interface Holder {
  /** `performance.now()` of the lease or of its last progress. */
  activeAt: number;
  /** Set when the lease deadline closed the connection; the lease's release is then a no-op. */
  killed: boolean;
  /** The request's `X-Request-Id` (for the log line). */
  requestId?: string;
}

/** One single-connection client of the pool and svc's reservation of its connection. */
interface Slot {
  client: postgres.Sql;
  /** The client's open sockets (its connection, a cancel request in flight), to destroy them. */
  sockets: Set<net.Socket>;
  /** The lease the slot is under (null: free, or reserving for a request not yet granted). */
  holder: Holder | null;
  /**
   * The client's connection, still reserved from an earlier request (null: the next request
   * reserves it). Dropped when the connection closes, when a request fails, and after
   * {@link HOLD_IDLE_MS} unused (then postgres.js's own idle timeout applies).
   */
  held: postgres.ReservedSql | null;
  /** When the slot last went back to the free list (`performance.now()`). */
  freeAt: number;
}

/**
 * How long a free client keeps its connection reserved for the next request, in milliseconds.
 * Keeping it saves postgres.js's reserve/release (a new reserved `sql` function, queue moves and
 * an idle timer per request: measured ≈5% of svc's CPU per primary-key read).
 */
const HOLD_IDLE_MS = 10_000;

/**
 * Named prepared statements kept per pooled connection; statements of further new shapes run as
 * unnamed statements (parsed per execution) until the connection is replaced.
 */
export const MAX_STATEMENTS = 1000;

/**
 * The request pool: `size` single-connection postgres.js clients and a free list of them.
 * Requests queue here, never inside postgres.js: each client is reserved by at most one request at
 * a time, so postgres.js never queues a waiter of ours (its queue cannot drop one that gave up,
 * and its reconnect paths mishandle queued reservations), every wait is bounded and cancellable,
 * and a client whose connection died reconnects on its next use instead of being handed out dead.
 * A client's reservation outlives a successful request while the client stays busy (see
 * {@link Slot.held}); svc's own queue still hands it to one request at a time.
 *
 * Lease deadline: whatever the cause (a statement that never started, a network that stopped
 * answering, a client that stopped reading a streamed answer), no lease outlives
 * `statementTimeout` + `leaseGrace` without progress. Progress is a statement of the request
 * answered (PostgreSQL's statement timeout also runs per statement) or a streamed batch taken by
 * the client. Past it the connection's socket is destroyed (never handed out again), the slot gets
 * a fresh client, the request fails (503 PG_UNAVAILABLE), and the event is logged and counted
 * (`svc_pg_leases_killed_total`). A lease past `statementTimeout` alone is "overdue"
 * ({@link PoolStats.overdue}). With a statement timeout of 0 (statements may run for ever) there is
 * no deadline.
 */
export class Database {
  readonly #uri: string;
  readonly #slots: Slot[];
  readonly #free: Slot[];
  readonly #waiters: ((slot: Slot) => void)[] = [];
  readonly #poolTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  /** Milliseconds a lease may go without progress; 0: no deadline. */
  readonly #leaseDeadlineMs: number;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  #closing = false;
  /** Set while {@link close} waits for every client to come back to the free list. */
  #allFree: (() => void) | null = null;
  /** `pg.query.statement_timeout` in milliseconds, applied in every request's prelude. */
  readonly statementTimeout: number;
  /** Most bind parameters one statement may carry (`pg.query.max_params`). */
  readonly maxParams: number;

  /** Opens a lazy pool (`opts` or just its size); nothing connects before the first request. */
  constructor(uri: string, opts: PoolOptions | number) {
    const o = typeof opts === "number" ? { size: opts } : opts;
    this.#uri = uri;
    this.#poolTimeoutMs = (o.poolTimeout ?? 5) * 1000;
    this.#connectTimeoutMs = (o.connectTimeout ?? 5) * 1000;
    this.statementTimeout = o.statementTimeout ?? 0;
    this.maxParams = Math.min(o.maxParams ?? WIRE_MAX_PARAMS, WIRE_MAX_PARAMS);
    this.#leaseDeadlineMs = this.statementTimeout > 0
      ? this.statementTimeout + (o.leaseGrace ?? DEFAULT_LEASE_GRACE) * 1000
      : 0;
    this.#slots = Array.from({ length: Math.max(1, o.size) }, () => {
      const slot: Slot = {
        client: null!,
        sockets: new Set(),
        holder: null,
        held: null,
        freeAt: 0,
      };
      this.#open(slot);
      return slot;
    });
    this.#free = [...this.#slots];
  }

  /**
   * Gives `slot` a new single-connection client. Its sockets are made here (postgres.js's `socket`
   * option, connected as postgres.js itself would) so that the lease deadline can destroy them.
   */
  #open(slot: Slot): void {
    const sockets = new Set<net.Socket>();
    let next = 0;
    const socket = (o: { host: string[]; port: number[]; path?: string | false }) => {
      const s = new net.Socket();
      sockets.add(s);
      s.once("close", () => sockets.delete(s));
      if (o.path) s.connect(o.path);
      else {
        const i = next;
        next = (next + 1) % o.port.length;
        s.connect(o.port[i], o.host[i]);
        Object.assign(s, { host: o.host[i], port: o.port[i] }); // for postgres.js's messages
      }
      return s;
    };
    const client: postgres.Sql = postgres(this.#uri, {
      max: 1,
      prepare: true,
      // At most this many named prepared statements per connection (patches/postgres@3.4.9):
      // each stays cached in svc and in the server session until the connection closes.
      ...{ max_statements: MAX_STATEMENTS, socket },
      onnotice: () => {},
      // A closed connection ends its reservation (postgres.js fails the stale one's queries);
      // a client the lease deadline replaced no longer speaks for the slot.
      onclose: () => {
        if (slot.client === client) slot.held = null;
      },
      connection: { application_name: "svc" },
      idle_timeout: 60,
      connect_timeout: this.#connectTimeoutMs / 1000,
      // Reconnect at once when the database is back (the default backs off up to 20 s).
      backoff: (retries: number) => Math.min(0.01 * 2 ** retries, 0.25),
    });
    slot.client = client;
    slot.sockets = sockets;
  }

  /** Pool figures for health and metrics. */
  stats(): PoolStats {
    let overdue = 0;
    if (this.#leaseDeadlineMs > 0) {
      const since = performance.now() - this.statementTimeout;
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
    const now = performance.now();
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
   * Ends a lease past the deadline: destroys its connection's sockets (postgres.js fails the
   * request's queries), gives the slot a fresh client and hands it to the next request.
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
    const old = slot.client;
    const sockets = slot.sockets;
    slot.held = null;
    this.#open(slot);
    for (const s of sockets) s.destroy();
    old.end({ timeout: 0 }).catch(() => {});
    this.#give(slot);
  }

  /** Takes a free client, waiting at most `pg.pool_timeout` (then 503 PG_POOL_EXHAUSTED). */
  #take(signal?: AbortSignal): Promise<Slot> {
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
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
      const timer = setTimeout(() =>
        giveUp(
          new SvcError(
            "PG_POOL_EXHAUSTED",
            `no database connection became free within ${ms / 1000} s`,
          ),
        ), ms);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(grant);
    });
  }

  /** Returns a client to the longest waiter, or to the free list. */
  #give(slot: Slot): void {
    const next = this.#waiters.shift();
    if (next) return next(slot);
    this.#free.push(slot);
    if (this.#free.length === this.#slots.length) this.#allFree?.();
    if (slot.held) {
      slot.freeAt = performance.now();
      if (this.#idleTimer === undefined) this.#scheduleIdle(HOLD_IDLE_MS);
    }
  }

  /** Releases, in a while, the reservations of clients left unused for {@link HOLD_IDLE_MS}. */
  #scheduleIdle(ms: number): void {
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = undefined;
      const now = performance.now();
      let next = Infinity;
      for (const slot of this.#free) {
        if (!slot.held) continue;
        const left = slot.freeAt + HOLD_IDLE_MS - now;
        if (left <= 0) this.#drop(slot);
        else next = Math.min(next, left);
      }
      if (next !== Infinity) this.#scheduleIdle(next);
    }, ms);
    Deno.unrefTimer(this.#idleTimer);
  }

  /** Ends a slot's reservation (the connection goes back to postgres.js's own pool). */
  #drop(slot: Slot): void {
    const held = slot.held;
    slot.held = null;
    held?.release();
  }

  /** A lease of a slot whose connection is reserved as `conn`. */
  #lease(slot: Slot, conn: postgres.ReservedSql, requestId?: string): Lease {
    const holder: Holder = { activeAt: performance.now(), killed: false, requestId };
    slot.holder = holder;
    if (this.#watchdog === undefined) this.#watch();
    let released = false;
    return {
      conn,
      touch: () => (holder.activeAt = performance.now()),
      release: (ok?: boolean) => {
        if (released) return;
        released = true;
        if (holder.killed) return; // closed by the lease deadline; the slot is in use again
        slot.holder = null;
        // Kept only while it is still this connection's reservation (a close clears `held`).
        if (ok && slot.held === conn && !this.#closing) return this.#give(slot);
        if (slot.held === conn) slot.held = null;
        conn.release();
        this.#give(slot);
      },
    };
  }

  /**
   * Reserves a connection: waits at most `pg.pool_timeout` for a free one (503
   * PG_POOL_EXHAUSTED), then at most `pg.connect_timeout` for it to be connected (503
   * PG_UNAVAILABLE). A connection that arrives after its request gave up goes straight back.
   * A free client whose connection is still reserved is handed out at once.
   */
  async acquire(signal?: AbortSignal, requestId?: string): Promise<Lease> {
    const free = this.#free.pop();
    if (free?.held) return this.#lease(free, free.held, requestId);
    const slot = free ?? await this.#take(signal);
    if (slot.held) return this.#lease(slot, slot.held, requestId);
    const client = slot.client;
    const reserving = client.reserve();
    const ms = this.#connectTimeoutMs;
    let late: ((e: unknown) => void) | undefined;
    // The connect timeout is a coarse shared deadline (src/util/deadline.ts), not a timer and a
    // promise race per request.
    const limit = deadline(
      ms,
      () =>
        late?.(new SvcError("PG_UNAVAILABLE", `the database did not answer within ${ms / 1000} s`)),
    );
    try {
      const conn = await new Promise<postgres.ReservedSql>((resolve, reject) => {
        late = reject;
        reserving.then(resolve, reject);
      });
      slot.held = conn;
      return this.#lease(slot, conn, requestId);
    } catch (e) {
      // The client is free again only once its pending reservation settles (never two at once).
      reserving.then((c) => {
        c.release();
        this.#give(slot);
      }, () => this.#give(slot));
      throw e;
    } finally {
      limit.clear();
    }
  }

  /**
   * Runs `body` in a transaction as `who`. `begin` and the role switch are pipelined ahead of the
   * body's first statement; `commit` follows the body.
   */
  async transaction<T>(who: RequestRole, body: (tx: RequestTx) => Promise<T>): Promise<T> {
    const lease = await this.acquire(who.signal, who.requestId);
    const conn = lease.conn;
    const touch = lease.touch;
    const sent: Promise<unknown>[] = [];
    const tx: RequestTx = {
      conn,
      send(sql) {
        const q = conn.unsafe(sql).execute();
        q.then(touch, touch); // failures are reported through `sent` below
        sent.push(q);
      },
      query: (sql, params, opts) => {
        // Too many bind parameters: refused before the statement is sent.
        const tooMany = this.paramsError(params);
        if (tooMany) return Promise.reject(tooMany);
        return cancellable(
          conn.unsafe(sql, params as postgres.ParameterOrJSON<never>[], {
            prepare: opts?.prepare ?? true,
          }),
          who.signal,
          touch,
        ) as unknown as Promise<Row[]>;
      },
    };
    const started = prelude(conn, who, this.statementTimeout);
    started.then(touch, touch);
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
          x.status === "rejected" && (x.reason as { code?: string }).code !== "25P02"
        ) as PromiseRejectedResult | undefined;
        throw failed ? failed.reason : e;
      }
      await started;
      const commit = conn.unsafe("commit").execute();
      await Promise.all([...sent, commit]);
      ok = true;
      return result;
    } finally {
      if (!ok) await conn.unsafe("rollback").catch(() => {});
      lease.release(ok);
    }
  }

  /**
   * Runs `statements` in one transaction as `who`, pipelined with begin, the role switch and
   * commit: one round trip. A failure makes the commit a rollback (PostgreSQL ends a failed
   * transaction on COMMIT); the first failure that is not a 25P02 follow-up is thrown. With
   * `end: "rollback"` the transaction is rolled back instead (a request asking for rollback).
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
    const conn = lease.conn;
    const touch = lease.touch;
    let ok = false;
    try {
      const started = prelude(conn, who, this.statementTimeout);
      started.then(touch, touch);
      const qs = statements.map((s) =>
        cancellable(
          conn.unsafe(s.sql, s.params as postgres.ParameterOrJSON<never>[], { prepare: true }),
          who.signal,
          touch,
        ).execute()
      );
      const commit = conn.unsafe(end).execute();
      const settled = await Promise.allSettled([started, ...qs, commit]);
      // The first failure that is not a 25P02 follow-up; `statementIndex` says which statement
      // (-1: the prelude or the commit), for callers that map a statement's failure.
      const isRoot = (x: PromiseSettledResult<unknown>) =>
        x.status === "rejected" && (x.reason as { code?: string }).code !== "25P02";
      let at = settled.findIndex(isRoot);
      if (at < 0) at = settled.findIndex((x) => x.status === "rejected");
      if (at >= 0) {
        const reason = (settled[at] as PromiseRejectedResult).reason;
        if (reason !== null && typeof reason === "object") {
          (reason as { statementIndex?: number }).statementIndex =
            at >= 1 && at <= statements.length ? at - 1 : -1;
        }
        throw reason;
      }
      ok = true;
      return settled.slice(1, -1).map((x) => (x as PromiseFulfilledResult<Row[]>).value);
    } finally {
      if (!ok) await conn.unsafe("rollback").catch(() => {});
      lease.release(ok);
    }
  }

  /** Closes the pool, waiting up to `timeout` seconds for queries in flight. */
  async close(timeout = 5): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    clearInterval(this.#watchdog);
    this.#watchdog = undefined;
    // A reserved connection holds postgres.js's `end` until its timeout, even when it is given
    // back meanwhile: end only once every client is back (a read's commit sent after its answer,
    // a streamed answer), within the same timeout.
    for (const slot of this.#free) this.#drop(slot);
    const t0 = performance.now();
    if (this.#free.length < this.#slots.length) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((r) => (this.#allFree = r)),
        new Promise((r) => (timer = setTimeout(r, timeout * 1000))),
      ]);
      clearTimeout(timer);
      this.#allFree = null;
    }
    const left = Math.max(0, timeout - (performance.now() - t0) / 1000);
    await Promise.all(this.#slots.map((s) => s.client.end({ timeout: left })));
  }
}

const OPEN = new TextEncoder().encode("[");
const COMMA = new TextEncoder().encode(",");
const CLOSE = new TextEncoder().encode("]");

/**
 * Small answers are carved from 8 KiB slabs, as Node's Buffer pool does: an ArrayBuffer costs
 * 1–2 µs in Deno whatever its size. An answer is never written to once handed out.
 */
const SLAB = 8192;
let slab = new Uint8Array(0);
let slabAt = 0;

function alloc(n: number): Uint8Array {
  if (n > SLAB / 4) return new Uint8Array(n);
  if (slab.length - slabAt < n) {
    slab = new Uint8Array(SLAB);
    slabAt = 0;
  }
  return slab.subarray(slabAt, slabAt += n);
}

function concat(parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = alloc(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Joins raw JSON row texts into one JSON array text. */
export function jsonArray(rows: Uint8Array[]): Uint8Array {
  const parts: Uint8Array[] = [OPEN];
  rows.forEach((r, i) => {
    if (i) parts.push(COMMA);
    parts.push(r);
  });
  parts.push(CLOSE);
  return concat(parts);
}

/**
 * A read known to fit one batch (limit or unique key): begin, role switch, query and commit sent
 * in one burst, one round trip. Each is awaited in protocol order (all settle before an error is
 * thrown; the first failure is the root cause), with one cancel listener for the query: fewer
 * promises than Promise.all/allSettled over them, on the hottest path.
 */
async function smallRead(
  db: Database,
  lease: Lease,
  who: RequestRole,
  sql: string,
  params: unknown[],
): Promise<Uint8Array> {
  const conn = lease.conn;
  const begin = conn.unsafe("begin").execute();
  const role = setRole(conn, who, db.statementTimeout);
  const q = conn.unsafe(sql, params as postgres.ParameterOrJSON<never>[], { prepare: true }).raw()
    .execute();
  const commit = conn.unsafe("commit").execute();
  const signal = who.signal;
  let onAbort: (() => void) | undefined;
  if (signal) {
    if (signal.aborted) q.cancel();
    else {
      onAbort = () => q.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
    }
  }
  let failure: { error: unknown } | undefined;
  let rows: Uint8Array[][] = [];
  try {
    try {
      await begin;
    } catch (e) {
      failure = { error: e };
    }
    lease.touch();
    try {
      await role;
    } catch (e) {
      failure ??= { error: roleError(e) };
    }
    lease.touch();
    try {
      rows = await q as unknown as Uint8Array[][];
    } catch (e) {
      failure ??= { error: e };
    }
    lease.touch();
    try {
      await commit;
    } catch (e) {
      failure ??= { error: e };
    }
  } finally {
    if (onAbort) signal!.removeEventListener("abort", onAbort);
    lease.release(failure === undefined);
  }
  if (failure) throw failure.error;
  const parts: Uint8Array[] = [OPEN];
  for (let i = 0; i < rows.length; i++) {
    if (i) parts.push(COMMA);
    parts.push(rows[i][0]);
  }
  parts.push(CLOSE);
  return concat(parts);
}

/** Rows fetched per round trip of a read; a first batch smaller than this ends the read. */
export const FETCH_BATCH = 1000;

/**
 * Runs a read whose rows are JSON texts (first column) and answers a JSON array.
 * - Known to fit one batch (`opts.small`): begin, role switch, query and commit pipelined, one
 *   round trip.
 * - Otherwise: begin, role switch, `DECLARE` of a cursor over the query and `FETCH <batch>`
 *   pipelined, one round trip. A short first batch completes the read: its bytes are returned at
 *   once and the commit follows off the response's critical path. A full one returns a stream
 *   that continues through a protocol cursor over `FETCH ALL`, each batch written only when the
 *   client has taken the previous ones (backpressure), so memory stays flat.
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

  const conn = lease.conn;
  if (opts.small) return await smallRead(db, lease, who, sql, params);
  const started = prelude(conn, who, db.statementTimeout);
  started.then(lease.touch, lease.touch);
  const declare = cancellable(
    conn.unsafe(
      `declare svc_read no scroll cursor for ${sql}`,
      params as postgres.ParameterOrJSON<never>[],
      {
        prepare: true,
      },
    ),
    who.signal,
    lease.touch,
  ).execute();
  const first = cancellable(
    conn.unsafe(`fetch ${batch} from svc_read`, [], { prepare: true }).raw(),
    who.signal,
    lease.touch,
  ).execute() as unknown as Promise<Uint8Array[][]>;
  let done = false;
  const finish = async (ok: boolean) => {
    if (done) return;
    done = true;
    const ended = await conn.unsafe(ok ? "commit" : "rollback").then(() => true, () => false);
    lease.release(ok && ended);
  };
  const settled = await Promise.allSettled([started, declare, first]);
  const failed = settled.find((x) => x.status === "rejected") as PromiseRejectedResult | undefined;
  if (failed) {
    await finish(false);
    throw failed.reason;
  }
  const rows = (settled[2] as PromiseFulfilledResult<Uint8Array[][]>).value;
  if (rows.length < batch) {
    void finish(true);
    return jsonArray(rows.map((r) => r[0]));
  }
  // More rows: stream the rest of the cursor through a protocol-level cursor over
  // `FETCH ALL`, batch by batch, each batch written only when the client has taken the previous
  // ones (backpressure through the stream's small queue).
  const ts = new TransformStream<Uint8Array, Uint8Array>(undefined, { highWaterMark: 4 }, {
    highWaterMark: 4,
  });
  const writer = ts.writable.getWriter();
  const head: Uint8Array[] = [];
  rows.forEach((r, i) => head.push(i === 0 ? OPEN : COMMA, r[0]));
  void writer.write(concat(head)).catch(() => {});
  const rest = conn.unsafe("fetch all from svc_read", [], { prepare: true }).raw()
    .cursor(batch, async (more: Uint8Array[][]) => {
      const parts: Uint8Array[] = [];
      for (const r of more) parts.push(COMMA, r[0]);
      await writer.write(concat(parts));
      // Progress: a batch came and the client took the earlier ones. A client that stops reading
      // holds the lease only until the lease deadline (see Database).
      lease.touch();
    }) as unknown as Promise<unknown> & { cancel(): unknown };
  cancellable(rest, who.signal).then(
    async () => {
      await finish(true);
      await writer.write(CLOSE);
      await writer.close();
    },
    async (e) => {
      await finish(false);
      await writer.abort(e).catch(() => {});
    },
  ).catch(() => {});
  return ts.readable;
}
