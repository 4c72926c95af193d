/**
 * The request pool and per-request transactions. Every request runs on a reserved connection as
 * `begin; select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true); …; commit`,
 * all pipelined, so a single read costs one round trip (DECISIONS.md §5). The role switch is its
 * own statement because privileges are checked per statement. postgres.js queries are lazy (sent
 * when first awaited), so every pipelined query is started with `.execute()` in protocol order.
 */
import postgres from "postgres";
import type { Row, Tx } from "./tx.ts";
import { SvcError } from "../errors.ts";

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
}

/**
 * Starts `begin` and the role switch on a reserved connection (sent now, in this order). Resolves
 * when both succeeded; a failed role switch becomes AUTH_ROLE_INVALID.
 */
function prelude(conn: postgres.ReservedSql, who: RequestRole): Promise<unknown> {
  const begin = conn.unsafe("begin").execute();
  const role = conn.unsafe(SET_ROLE, [who.role, JSON.stringify(who.claims)], { prepare: true })
    .execute();
  const both = Promise.all([begin, role.catch((e) => Promise.reject(roleError(e)))]);
  both.catch(() => {}); // awaited by the caller; never an unhandled rejection
  return both;
}

/** Cancels a running query (PostgreSQL CancelRequest) when `signal` aborts. */
function cancellable<Q extends { cancel(): unknown }>(q: Q, signal?: AbortSignal): Q {
  if (signal) {
    if (signal.aborted) q.cancel();
    else signal.addEventListener("abort", () => q.cancel(), { once: true });
  }
  return q;
}

const SET_ROLE = "select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true)";

/** A transaction on a reserved connection, with raw access for streaming. */
export interface RequestTx extends Tx {
  /** The reserved connection (for cursors and raw results). */
  conn: postgres.ReservedSql;
}

/** The request pool. */
export class Database {
  readonly sql: postgres.Sql;

  /** Opens a lazy pool of at most `poolSize` connections. */
  constructor(uri: string, poolSize: number) {
    this.sql = postgres(uri, {
      max: poolSize,
      prepare: true,
      onnotice: () => {},
      connection: { application_name: "svc" },
      idle_timeout: 60,
    });
  }

  /**
   * Runs `body` in a transaction as `who`. `begin` and the role switch are pipelined ahead of the
   * body's first statement; `commit` follows the body.
   */
  async transaction<T>(who: RequestRole, body: (tx: RequestTx) => Promise<T>): Promise<T> {
    const conn = await this.sql.reserve();
    const tx: RequestTx = {
      conn,
      query: (sql, params, opts) =>
        cancellable(
          conn.unsafe(sql, params as postgres.ParameterOrJSON<never>[], {
            prepare: opts?.prepare ?? true,
          }),
          who.signal,
        ) as unknown as Promise<Row[]>,
    };
    const started = prelude(conn, who);
    let ok = false;
    try {
      let result: T;
      try {
        result = await body(tx);
      } catch (e) {
        // A failed role switch is the root cause of whatever failed after it.
        await started;
        throw e;
      }
      await started;
      await conn.unsafe("commit");
      ok = true;
      return result;
    } finally {
      if (!ok) await conn.unsafe("rollback").catch(() => {});
      conn.release();
    }
  }

  /**
   * One read in one round trip: begin, role switch, the query (raw rows) and commit, pipelined.
   * Returns the first column of each row as raw bytes.
   */
  async readRaw(who: RequestRole, sql: string, params: unknown[]): Promise<Uint8Array[]> {
    const conn = await this.sql.reserve();
    try {
      const started = prelude(conn, who);
      const q = cancellable(
        conn.unsafe(sql, params as postgres.ParameterOrJSON<never>[], { prepare: true }).raw(),
        who.signal,
      ).execute();
      const commit = conn.unsafe("commit").execute();
      const settled = await Promise.allSettled([started, q, commit]);
      for (const s of settled) if (s.status === "rejected") throw s.reason;
      return (settled[1] as PromiseFulfilledResult<Uint8Array[][]>).value.map((r) => r[0]);
    } finally {
      conn.release();
    }
  }

  /** Whether the database answers. */
  async ping(): Promise<boolean> {
    try {
      await this.sql`select 1`;
      return true;
    } catch {
      return false;
    }
  }

  /** Closes the pool, waiting up to `timeout` seconds for queries in flight. */
  close(timeout = 5): Promise<void> {
    return this.sql.end({ timeout });
  }
}

const OPEN = new TextEncoder().encode("[");
const COMMA = new TextEncoder().encode(",");
const CLOSE = new TextEncoder().encode("]");

function concat(parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
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
 * Streams a read as a JSON array: rows are fetched through a cursor in batches of `batchSize`
 * (each row already a complete JSON text) and written as they come, with backpressure, so memory
 * stays flat. Resolves once the first batch (or the end, or an error) arrives: an error before
 * the first row rejects, so the caller can still answer with an error status.
 */
export async function streamRaw(
  db: Database,
  who: RequestRole,
  sql: string,
  params: unknown[],
  batchSize = 1000,
): Promise<ReadableStream<Uint8Array>> {
  const conn = await db.sql.reserve();
  const ts = new TransformStream<Uint8Array, Uint8Array>(undefined, { highWaterMark: 4 }, {
    highWaterMark: 4,
  });
  const writer = ts.writable.getWriter();
  let first = true;
  let signal!: () => void;
  const started = new Promise<void>((r) => (signal = r));
  const tx = prelude(conn, who);
  const q = cancellable(
    conn.unsafe(sql, params as postgres.ParameterOrJSON<never>[], { prepare: true }).raw(),
    who.signal,
  ).cursor(batchSize, async (rows: Uint8Array[][]) => {
    const parts: Uint8Array[] = [];
    for (const r of rows) {
      parts.push(first ? OPEN : COMMA, r[0]);
      first = false;
    }
    signal();
    await writer.write(concat(parts));
  });
  // Not started yet: Promise.allSettled below starts q, then commit, in this order.
  const commit = conn.unsafe("commit");
  const all = Promise.allSettled([tx, q, commit]).then((s) => {
    for (const x of s) if (x.status === "rejected") throw x.reason;
  });
  const finished = all.finally(() => conn.release());
  try {
    await Promise.race([started, finished]);
  } catch (e) {
    await writer.abort(e).catch(() => {});
    throw e;
  }
  finished.then(
    async () => {
      await writer.write(first ? concat([OPEN, CLOSE]) : CLOSE);
      await writer.close();
    },
    (e) => writer.abort(e).catch(() => {}),
  ).catch(() => {});
  return ts.readable;
}
