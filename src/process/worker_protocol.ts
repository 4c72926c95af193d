/**
 * Messages between the supervisor (main thread) and its HTTP workers (`http.workers` > 1).
 * Every message is structured-cloned; the state travels as {@link SharedState}.
 *
 * @module
 */
import type { Config } from "../config/load.ts";
import type { Schema } from "../db/schema.ts";
import type { LoadWarning, WellKnown } from "../wellknown/registry.ts";

/** The part of the live state the supervisor builds once and hands to every worker. */
export interface SharedState {
  schema: Schema;
  wellknown: { queries: WellKnown[]; warnings: LoadWarning[] };
  anonymousExists: boolean;
  loadedAt: Date;
}

/** What a worker can be asked to report (summed or merged by the supervisor). */
export type ReportKind = "metrics" | "pool";

/** How a worker failed to listen (main.ts turns it into the same message as one process). */
export type ListenFailure = "AddrInUse" | "AddrNotAvailable" | "PermissionDenied" | "other";

/** Supervisor → worker. */
export type ToWorker =
  | {
    t: "init";
    cfg: Config;
    /** 0-based worker number (in log lines as `worker`). */
    index: number;
    count: number;
    /** The port to bind with SO_REUSEPORT (0 only for the first worker). */
    port: number;
    /** This worker's share of `pg.pool_size`. */
    poolSize: number;
    /** The session secret, loaded once by the supervisor. */
    secret: Uint8Array;
  }
  /** Swap in a new state (and end a hold). */
  | { t: "state"; state: SharedState }
  /** Hold new requests and drain in-flight ones; answer `held`. */
  | { t: "hold"; id: number }
  /** End a hold without a new state (the reload failed). */
  | { t: "release" }
  /** Report figures for a collection started by some worker; answer `reported`. */
  | { t: "report"; id: number; what: ReportKind }
  /** The answer to this worker's `collect`: one value per worker (and the supervisor's metrics). */
  | { t: "collected"; id: number; values: unknown[] }
  /** The answer to this worker's `claim` (null: it cannot be recorded, SSO_NOT_READY). */
  | { t: "claimed"; id: number; ok: boolean | null }
  /** Stop accepting, drain, close the pool; answer `stopped`. */
  | { t: "shutdown" };

/** Worker → supervisor. */
export type FromWorker =
  | { t: "listening"; port: number }
  | { t: "failed"; error: ListenFailure; message: string }
  | { t: "held"; id: number }
  | { t: "reported"; id: number; value: unknown }
  | { t: "collect"; id: number; what: ReportKind }
  | { t: "claim"; id: number; ns: string; key: string; expiresAt: number }
  | { t: "stopped" };
