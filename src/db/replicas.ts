/**
 * Read replicas (`pg.read_uri`): reads run on a streaming replica that is up and caught up, the
 * rest on the primary (docs/deployment.md, "Read replicas").
 *
 * - What is a read: `/svc` reads (POST and GET forms, well-known queries, ComplexQuery reads and
 *   batches of reads) whose query tree calls no VOLATILE function, `database.json`, and declared
 *   routes whose function and middleware are all STABLE or IMMUTABLE. Writes, VOLATILE routes,
 *   batches holding a write, anything with `rollback`, SSO callbacks, introspection and svc's own
 *   privilege lookups run on the primary.
 * - Forced primary (read-your-writes): the request header `X-Svc-Read: primary`, or the session
 *   claim named by `pg.read_primary_claim` holding `true` or a time (seconds since the epoch)
 *   still to come.
 * - Each replica has a pool of its own (`pg.read_pool_size`, split over workers like
 *   `pg.pool_size`) and a monitor connection that asks it every {@link CHECK_INTERVAL_MS} whether
 *   it is usable (see {@link replicaVerdict}); reads skip a replica that is down, does not answer
 *   within {@link CHECK_TIMEOUT_MS} or lags more than `pg.read_max_lag` seconds, and go to the
 *   primary while none is usable. A read whose replica refuses the connection goes to the
 *   primary at once (and the replica counts as down until its next good check).
 * - Reads are counted per target: `svc_pg_reads_total{target="primary"|"replica<i>"}`.
 *
 * @module
 */
import { Database, type Lease, type PoolOptions } from "./pool.ts";
import { Client } from "../pg/client.ts";
import { PgConnectionError, PgError } from "../pg/errors.ts";
import { SvcError } from "../svc_error.ts";
import type { Func } from "./schema.ts";
import { countRead } from "../observe/metrics.ts";
import { log } from "../observe/log.ts";

/** Milliseconds between two checks of a replica. */
export const CHECK_INTERVAL_MS = 500;
/** Milliseconds a check may take; a replica that does not answer in time is down. */
export const CHECK_TIMEOUT_MS = 1000;

/**
 * Consecutive good checks before a replica that was down (or not checked yet) is used: a replica
 * that has just started streaming may have received nothing yet, and looks caught up for a moment.
 */
export const UP_AFTER_CHECKS = 2;

/** The request header forcing a request's reads onto the primary (value `primary`). */
export const READ_HEADER = "x-svc-read";

/**
 * The monitor's question: in recovery (a standby) or not (a promoted replica, or a primary), the
 * age of the last replayed commit, whether everything received was replayed, and whether a WAL
 * receiver runs (streaming from the primary). Nothing here needs a privilege. (After a restart the
 * received position starts at the beginning of a WAL segment, behind what was replayed from local
 * WAL, until the primary sends something new: replayed ≥ received is caught up.)
 */
export const CHECK_SQL = "select pg_is_in_recovery() as recovery, " +
  "extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8 as age, " +
  "coalesce(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), false) as caught_up, " +
  "exists (select from pg_stat_wal_receiver) as streaming";

/** What a replica answered to {@link CHECK_SQL}. */
export interface ReplicaFacts {
  recovery: boolean;
  /** Seconds since the last replayed commit (null: none replayed since the replica started). */
  age: number | null;
  caught_up: boolean;
  streaming: boolean;
}

/** A replica's state as reads see it. */
export interface ReplicaState {
  up: boolean;
  /** Seconds behind the primary (0: caught up; null: unknown). */
  lag: number | null;
  /** Why it is skipped (absent while up). */
  reason?: string;
}

/**
 * Whether a replica may serve reads:
 * - not in recovery (promoted, or a primary given as replica): up, lag 0;
 * - streaming and everything received replayed: up, lag 0 — an idle primary commits nothing, so
 *   the last replayed commit grows old on a replica that is perfectly current;
 * - else the age of the last replayed commit is its lag: up while at most `maxLag` seconds (a
 *   replica cut off from its primary keeps serving until then: data at most `maxLag` old).
 */
export function replicaVerdict(f: ReplicaFacts, maxLag: number): ReplicaState {
  if (!f.recovery) return { up: true, lag: 0 };
  if (f.streaming && f.caught_up) return { up: true, lag: 0 };
  if (f.age !== null && f.age <= maxLag) return { up: true, lag: Math.max(0, f.age) };
  return {
    up: false,
    lag: f.age,
    reason: f.age === null
      ? "not caught up and no commit replayed yet"
      : `lags ${f.age.toFixed(1)} s (pg.read_max_lag ${maxLag} s)`,
  };
}

const NOT_CHECKED = "not checked yet";
const CHECKING_AGAIN = "usable: checking once more before use";

/** Asks a replica {@link CHECK_SQL} every {@link CHECK_INTERVAL_MS}, on a connection of its own. */
export class ReplicaMonitor {
  readonly #client: Client;
  readonly #maxLag: number;
  readonly #name: string;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #checking: Promise<void> | null = null;
  /** Consecutive checks that found the replica usable. */
  #good = 0;
  /** The current state (down until the first check succeeds). */
  state: ReplicaState = { up: false, lag: null, reason: NOT_CHECKED };
  /** When the state was last set. */
  checkedAt: Date | null = null;

  /** A monitor of the replica at `uri` (`name` for log lines); {@link start} runs it. */
  constructor(uri: string, maxLag: number, name: string) {
    this.#client = new Client(uri, {
      applicationName: "svc-replica-check",
      connectTimeoutMs: CHECK_TIMEOUT_MS,
      maxStatements: 0,
    });
    this.#maxLag = maxLag;
    this.#name = name;
  }

  /** Checks now and then every {@link CHECK_INTERVAL_MS}. */
  start(): this {
    this.#loop();
    return this;
  }

  #loop(): void {
    if (this.#closed) return;
    this.#checking = this.check().finally(() => {
      this.#checking = null;
      if (this.#closed) return;
      this.#timer = setTimeout(() => this.#loop(), CHECK_INTERVAL_MS);
      Deno.unrefTimer(this.#timer);
    });
  }

  /** One check (also called by reads that found the replica unreachable). */
  async check(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const q = this.#client.query<ReplicaFacts>(CHECK_SQL, [], false);
    q.catch(() => {}); // a late failure of an abandoned check is not an error
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)),
        CHECK_TIMEOUT_MS,
      );
    });
    try {
      const [facts] = await Promise.race([q, late]);
      const verdict = replicaVerdict(facts, this.#maxLag);
      this.#good = verdict.up ? this.#good + 1 : 0;
      if (verdict.up && !this.state.up && this.#good < UP_AFTER_CHECKS) {
        this.#set({ up: false, lag: verdict.lag, reason: CHECKING_AGAIN });
      } else this.#set(verdict);
    } catch (e) {
      // A connection that failed or did not answer in time is not trusted with the next check.
      this.#client.reset();
      this.markDown(e);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Marks the replica down for `e` until a check finds it usable again. */
  markDown(e: unknown): void {
    this.#good = 0;
    this.#set({ up: false, lag: null, reason: (e as Error)?.message ?? String(e) });
  }

  #set(next: ReplicaState): void {
    if (this.#closed) return;
    const was = this.state;
    this.state = next;
    this.checkedAt = new Date();
    if (next.up && !was.up) {
      log.info("read replica {replica} is used for reads", { replica: this.#name });
    } else if (
      !next.up && next.reason !== CHECKING_AGAIN &&
      (was.up || (was.reason === NOT_CHECKED || was.reason === CHECKING_AGAIN))
    ) {
      log.warn("read replica {replica} is skipped: {reason}", {
        replica: this.#name,
        reason: next.reason,
      });
    }
  }

  /** Stops checking and closes the connection. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#checking?.catch(() => {});
    await this.#client.close(500);
  }
}

/** Whether `e` (from leasing a replica's connection) means the replica cannot be reached. */
function unreachable(e: unknown): boolean {
  if (e instanceof PgConnectionError) return true;
  if (e instanceof SvcError) return e.code === "PG_UNAVAILABLE";
  // Connection exceptions, "cannot connect now" (starting up, shutting down), too many clients.
  if (e instanceof PgError) {
    return e.code.startsWith("08") || e.code.startsWith("57P") || e.code === "53300";
  }
  return false;
}

/**
 * A replica's request pool: a {@link Database} whose leases count as reads of the replica, and
 * which leases a connection of the primary instead when the replica cannot be reached.
 */
export class ReplicaPool extends Database {
  /** `replica<i>`: the metrics label and log name. */
  readonly target: string;
  readonly #primary: Database;
  readonly #monitor: ReplicaMonitor;

  /** A lazy pool of the replica at `uri`. */
  constructor(
    uri: string,
    opts: PoolOptions,
    index: number,
    primary: Database,
    monitor: ReplicaMonitor,
  ) {
    super(uri, opts);
    this.target = `replica${index}`;
    this.#primary = primary;
    this.#monitor = monitor;
  }

  /** The replica's monitor. */
  get monitor(): ReplicaMonitor {
    return this.#monitor;
  }

  /** Leases a free replica connection at once (counted as a read of the replica), or null. */
  override tryAcquire(requestId?: string): Lease | null {
    const lease = super.tryAcquire(requestId);
    if (lease) countRead(this.target);
    return lease;
  }

  /** Leases a replica connection, or a primary one when the replica cannot be reached. */
  override async acquire(
    signal?: AbortSignal,
    requestId?: string,
  ): ReturnType<Database["acquire"]> {
    try {
      const lease = await super.acquire(signal, requestId);
      countRead(this.target);
      return lease;
    } catch (e) {
      if (signal?.aborted || !unreachable(e)) throw e;
      this.#monitor.markDown(e);
      countRead("primary");
      return await this.#primary.acquire(signal, requestId);
    }
  }
}

/** A replica's state in `/svc/health`. */
export interface ReplicaHealth {
  /** 0-based position in `pg.read_uri`. */
  index: number;
  up: boolean;
  /** Seconds behind the primary (0: caught up; null: unknown). */
  lag_seconds: number | null;
  /** Why reads skip it (absent while up). */
  reason?: string;
}

/**
 * Whether a request's reads must run on the primary: `X-Svc-Read: primary`, or the session claim
 * `claim` holding `true` or a time (seconds since the epoch) still to come.
 */
export function primaryForced(
  headers: Headers,
  claims: Record<string, unknown> | null,
  claim: string | undefined,
  now = Date.now(),
): boolean {
  const h = headers.get(READ_HEADER);
  if (h !== null && h.trim().toLowerCase() === "primary") return true;
  if (claim === undefined || claims === null) return false;
  const v = claims[claim];
  return v === true || (typeof v === "number" && v * 1000 > now);
}

/** The request pools of the primary and the replicas, and where each read goes. */
export class ReadTargets {
  readonly #primary: Database;
  readonly #replicas: ReplicaPool[];
  readonly #claim: string | undefined;
  #next = 0;

  /** Targets over `primary` and `replicas` (monitors already started). */
  constructor(primary: Database, replicas: ReplicaPool[], claim?: string) {
    this.#primary = primary;
    this.#replicas = replicas;
    this.#claim = claim;
  }

  /** The replicas' pools, in `pg.read_uri` order. */
  get replicas(): readonly ReplicaPool[] {
    return this.#replicas;
  }

  /**
   * Where one read of a request runs: the next usable replica (round robin), or the primary
   * when the request forces it or none is usable. Call it once per read that runs (it counts).
   */
  forRead(headers: Headers, claims: Record<string, unknown> | null): Database {
    if (!primaryForced(headers, claims, this.#claim)) {
      const n = this.#replicas.length;
      for (let i = 0; i < n; i++) {
        const r = this.#replicas[(this.#next + i) % n];
        if (r.monitor.state.up) {
          this.#next = (this.#next + i + 1) % n;
          return r;
        }
      }
    }
    countRead("primary");
    return this.#primary;
  }

  /** Every replica's state, for `/svc/health`. */
  health(): ReplicaHealth[] {
    return this.#replicas.map((r, index) => {
      const s = r.monitor.state;
      return {
        index,
        up: s.up,
        lag_seconds: s.lag === null ? null : Math.round(s.lag * 1000) / 1000,
        ...(s.up ? {} : { reason: s.reason }),
      };
    });
  }

  /** Stops the monitors and closes the replicas' pools (the primary's is not closed here). */
  async close(): Promise<void> {
    await Promise.all(this.#replicas.map(async (r) => {
      await r.monitor.close();
      await r.close();
    }));
  }
}

/** This worker's share of `total` connections over `count` workers (at least 1). */
export function readPoolSlice(total: number, index: number, count: number): number {
  return Math.max(1, Math.floor(total / count) + (index < total % count ? 1 : 0));
}

/** The `pg.*` settings {@link openReadTargets} reads (a part of the configuration). */
export interface ReadTargetSettings {
  read_uri: string[];
  read_pool_size: number;
  read_max_lag: number;
  read_primary_claim?: string;
  pool_timeout: number;
  connect_timeout: number;
  lease_grace: number;
  /** Optional for callers that give none (default: the pool's). */
  stall_timeout?: number;
  prepared_statements: boolean;
  max_lifetime: number;
  query: {
    statement_timeout: number;
    transaction_timeout?: number;
    max_params: number;
    max_statement_size: number;
  };
}

/**
 * The read targets of a configuration with `pg.read_uri`, over the primary's pool `primary`;
 * null without read replicas. `worker` (index, count) splits `pg.read_pool_size` like
 * `pg.pool_size`.
 */
export function openReadTargets(
  cfg: { pg: ReadTargetSettings },
  primary: Database,
  worker?: { index: number; count: number },
): ReadTargets | null {
  const uris = cfg.pg.read_uri;
  if (uris.length === 0) return null;
  const size = readPoolSlice(cfg.pg.read_pool_size, worker?.index ?? 0, worker?.count ?? 1);
  const opts: PoolOptions = {
    size,
    poolTimeout: cfg.pg.pool_timeout,
    connectTimeout: cfg.pg.connect_timeout,
    statementTimeout: cfg.pg.query.statement_timeout,
    transactionTimeout: cfg.pg.query.transaction_timeout,
    leaseGrace: cfg.pg.lease_grace,
    stallTimeout: cfg.pg.stall_timeout,
    maxParams: cfg.pg.query.max_params,
    maxStatementSize: cfg.pg.query.max_statement_size,
    preparedStatements: cfg.pg.prepared_statements,
    maxLifetime: cfg.pg.max_lifetime,
  };
  const replicas = uris.map((uri, i) => {
    const monitor = new ReplicaMonitor(uri, cfg.pg.read_max_lag, `replica${i}`).start();
    return new ReplicaPool(uri, opts, i, primary, monitor);
  });
  return new ReadTargets(primary, replicas, cfg.pg.read_primary_claim);
}

/** Whether every function of `fns` is STABLE or IMMUTABLE (may run on a replica). */
export function readOnlyFunctions(fns: Iterable<Pick<Func, "volatility">>): boolean {
  for (const f of fns) if (f.volatility === "volatile") return false;
  return true;
}
