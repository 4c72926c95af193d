/**
 * PostgreSQL's time per statement from `pg_stat_statements`: loaded into a bench cluster (a
 * restart), reset before a run and read after it, so a run's statements can be compared per
 * request — svc's against pgbench's hand-written ones.
 */
import type { Cluster } from "../../src/db/cluster.ts";
import type { Client } from "../../src/pg/client.ts";

/** One normalized statement's figures over a run. */
export interface StatementStat {
  /** Normalized text (constants as `$n`), shortened. */
  query: string;
  calls: number;
  /** Execution time, ms, all calls. */
  exec_ms: number;
  /** Planning time, ms, all calls (pg_stat_statements.track_planning). */
  plan_ms: number;
  /** Times it was planned (a prepared statement's generic plan: once). */
  plans: number;
  rows: number;
}

/** A run's statements, per request. */
export interface StatementsPerRequest {
  /** Requests (svc) or transactions (pgbench) of the run. */
  requests: number;
  statements: (StatementStat & { exec_us_per_request: number; plan_us_per_request: number })[];
  /** Sum over the statements, µs per request. */
  total_us_per_request: number;
}

/**
 * Loads pg_stat_statements (planning times tracked, utility statements too) into `cluster` —
 * a restart — and creates the extension in `database`.
 */
export async function enableStatements(cluster: Cluster, database: string): Promise<void> {
  await Deno.writeTextFile(
    `${cluster.dir}/data/postgresql.conf`,
    "\nshared_preload_libraries = 'pg_stat_statements'\n" +
      "pg_stat_statements.track_planning = on\npg_stat_statements.max = 10000\n",
    { append: true },
  );
  await cluster.ctl(["restart", "-m", "fast", "-w"]);
  await cluster.psql("create extension if not exists pg_stat_statements;", database);
}

/** Forgets every statement's figures. */
export async function resetStatements(sql: Client): Promise<void> {
  await sql.query("select pg_stat_statements_reset()");
}

/**
 * The figures of database `database`'s statements since the last reset, by total time, divided
 * by `requests`; the bench's own bookkeeping (this query, resets, vacuum) is left out.
 */
export async function readStatements(
  sql: Client,
  database: string,
  requests: number,
): Promise<StatementsPerRequest> {
  const rows = await sql.query<Record<string, unknown>>(
    `select query, calls, total_exec_time, total_plan_time, plans, rows
       from pg_stat_statements s join pg_database d on d.oid = s.dbid
      where d.datname = $1 and query !~* 'pg_stat_statements|^vacuum|^select pg_log_backend'
      order by total_exec_time + total_plan_time desc`,
    [database],
  );
  const n = Math.max(1, requests);
  const statements = rows.map((r) => {
    const s: StatementStat = {
      query: shorten(String(r.query)),
      calls: Number(r.calls),
      exec_ms: Number(r.total_exec_time),
      plan_ms: Number(r.total_plan_time),
      plans: Number(r.plans),
      rows: Number(r.rows),
    };
    return {
      ...s,
      exec_us_per_request: (s.exec_ms * 1000) / n,
      plan_us_per_request: (s.plan_ms * 1000) / n,
    };
  }).filter((s) => s.calls >= n / 10);
  const total = statements.reduce(
    (a, s) => a + s.exec_us_per_request + s.plan_us_per_request,
    0,
  );
  return { requests, statements, total_us_per_request: total };
}

/** A statement's text on one line, at most 110 characters. */
function shorten(q: string): string {
  const one = q.replace(/\s+/g, " ").trim();
  return one.length > 110 ? `${one.slice(0, 107)}…` : one;
}

/** Lines describing a run's statements (for logs). */
export function formatStatements(label: string, s: StatementsPerRequest): string[] {
  return [
    `${label}: ${s.total_us_per_request.toFixed(1)} µs of PostgreSQL statement time per request ` +
    `(${s.requests} requests)`,
    ...s.statements.map((x) =>
      `  ${x.exec_us_per_request.toFixed(1).padStart(7)} µs exec ${
        x.plan_us_per_request.toFixed(1).padStart(6)
      } µs plan  ×${(x.calls / Math.max(1, s.requests)).toFixed(2)} plans ${x.plans}  ${x.query}`
    ),
  ];
}
