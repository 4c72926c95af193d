/**
 * What svc's read SQL costs PostgreSQL beside the hand-written SQL of the same answer, as
 * PostgreSQL's own CPU time per execution: used by `deno task bench` (bench/run.ts, its target on
 * the nested read's SQL) and by bench/read_cost.ts (the same with more rounds and the row-size
 * cap's variant).
 *
 * Per read case of bench/lib/cases.ts, each statement is prepared (named, values bound as svc
 * binds them) on connections of its own switched to svc's anonymous role, checked to give the same
 * answer, run past the plan cache's first five custom plans, then measured: each backend's CPU
 * time (`/proc/<pid>/schedstat`: the cluster must run on this machine) over executions
 * interleaved five at a time, so load from other work falls on all alike. Each statement runs on
 * `connections` backends in turn: how a backend's heap lies decides whether a statement's
 * per-execution memory is given back to the kernel and taken again every time, which differs
 * between backends running the very same statement. With `pg_stat_statements` loaded, its mean
 * execution and planning time and plans per call are read too (wall time, for reference).
 *
 * @module
 */
import { introspect } from "../../src/db/introspect.ts";
import type { Schema } from "../../src/db/schema.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { capRowSize } from "../../src/compile/rowsize.ts";
import { Client } from "../../src/pg/client.ts";
import { CASES, floorKey, WELLKNOWN_FILE } from "./cases.ts";
import { median, type ReadCost } from "./report.ts";

/** Executions per round and statement, by case (about the same time each). */
export const READ_COST_EXECS: Record<string, number> = {
  pk_read: 1000,
  nested_read: 40,
  wellknown: 200,
};

/** How {@link measureReadCost} runs. */
export interface ReadCostOptions {
  /** Rounds of interleaved executions (the ratio is their median). */
  rounds: number;
  /** Backends per statement, used in turn. */
  connections: number;
  /** Also measure the read under the row-size cap's SQL wrapper at this many bytes. */
  capBytes?: number;
  log?: (s: string) => void;
}

/** The statement name of the hand-written SQL with its bound as `$1` (cases with a `floorSql`). */
export const BOUND = "hand-written, bound as $1";

const cpuNs = (pid: number) =>
  Number(Deno.readTextFileSync(`/proc/${pid}/schedstat`).split(" ")[0]);

interface Statement {
  name: string;
  sql: string;
  params: unknown[];
  conns: { c: Client; pid: number }[];
  cpuUs: number[];
}

/**
 * Measures the read cases `ids` against database `uri` (Chinook, bench/lib/data.ts);
 * `statements` tells whether pg_stat_statements is loaded in it (its figures are reset here).
 */
export async function measureReadCost(
  uri: string,
  ids: readonly string[],
  opts: ReadCostOptions & { statements: boolean },
): Promise<ReadCost[]> {
  const out: ReadCost[] = [];
  const schema = await introspect(uri);
  const admin = new Client(uri);
  try {
    for (const id of ids) out.push(...await measureCase(admin, uri, schema, id, opts));
  } finally {
    await admin.close();
  }
  return out;
}

async function measureCase(
  admin: Client,
  uri: string,
  schema: Schema,
  id: string,
  opts: ReadCostOptions & { statements: boolean },
): Promise<ReadCost[]> {
  const c = CASES.find((x) => x.id === id);
  if (!c) throw new Error(`unknown case ${id}`);
  const wellknown = id === "wellknown";
  const node = parseQuery(
    schema,
    wellknown ? WELLKNOWN_FILE.query : c.body,
    wellknown ? { maxDepth: 6, params: { album_id: {} } } : { maxDepth: 6 },
  );
  const values = wellknown ? (c.body as { params: Record<string, unknown> }).params : undefined;
  const rows = compileRead(node, { params: values }).rows;
  const specs: [string, string, unknown[]][] = [["svc", rows.sql, rows.params]];
  if (opts.capBytes !== undefined) {
    const capped = capRowSize(rows, opts.capBytes);
    specs.push(["svc, SQL cap", capped.sql, capped.params]);
  }
  // The hand-written SQL with its bound as `$1`, as svc binds it (and the floor): planned per call
  // as svc's statement is, where the hand-written one with literals is planned once.
  if (c.floorSql) specs.push([BOUND, c.floorSql, [floorKey(c)]]);
  specs.push(["hand-written", c.sql, []]);
  const stmts: Statement[] = [];
  try {
    for (const [name, sql, params] of specs) {
      const conns: Statement["conns"] = [];
      // Pushed before it connects, so that the finally below closes whatever was opened.
      // Tagged (a trailing comment) so that pg_stat_statements' entry is found by its text.
      stmts.push({ name, sql: `${sql} /*read_cost:${stmts.length}*/`, params, conns, cpuUs: [] });
      for (let i = 0; i < opts.connections; i++) {
        const cl = new Client(uri);
        await cl.query("select set_config('role', '~anonymous', false)");
        const [{ pid }] = await cl.query<{ pid: number }>("select pg_backend_pid() as pid");
        conns.push({ c: cl, pid: Number(pid) });
      }
    }
    // The same answer from each, and past the plan cache's first five custom plans.
    let expected: string | null = null;
    for (const s of stmts) {
      for (const { c: cl } of s.conns) {
        for (let i = 0; i < 8; i++) {
          const got = JSON.stringify(await cl.query(s.sql, s.params));
          expected ??= got;
          if (got !== expected) throw new Error(`${id}: ${s.name} answers differently`);
        }
      }
    }
    if (opts.statements) await admin.query("select pg_stat_statements_reset()");
    const n = READ_COST_EXECS[id] ?? 100;
    for (let r = 0; r < opts.rounds; r++) {
      const acc = stmts.map(() => 0);
      for (let k = 0; k < n; k += 5) {
        for (let i = 0; i < stmts.length; i++) {
          const at = (i + k / 5) % stmts.length;
          const s = stmts[at];
          const { c: cl, pid } = s.conns[(k / 5) % opts.connections];
          const t0 = cpuNs(pid);
          for (let q = 0; q < 5; q++) await cl.query(s.sql, s.params);
          acc[at] += cpuNs(pid) - t0;
        }
      }
      stmts.forEach((s, i) => s.cpuUs.push(acc[i] / n / 1000));
    }
    const stats = opts.statements
      ? await admin.query<Record<string, unknown>>(
        "select query, calls, plans, mean_exec_time, mean_plan_time from pg_stat_statements",
      )
      : [];
    const hand = stmts[stmts.length - 1];
    const handBound = stmts.find((s) => s.name === BOUND);
    return stmts.map((s) => {
      const tag = s.sql.slice(s.sql.lastIndexOf(" /*read_cost:"));
      const st = stats.find((x) => String(x.query).endsWith(tag));
      opts.log?.(`${id} ${s.name}: ${s.cpuUs.map((u) => u.toFixed(0)).join(" ")}`);
      return {
        case: id,
        statement: s.name,
        cpu_us: median(s.cpuUs),
        ratio: median(s.cpuUs.map((u, i) => u / hand.cpuUs[i])),
        ratio_bound: handBound ? median(s.cpuUs.map((u, i) => u / handBound.cpuUs[i])) : null,
        rounds_us: s.cpuUs,
        exec_ms: st ? Number(st.mean_exec_time) : null,
        plan_ms: st ? Number(st.mean_plan_time) : null,
        plans_per_call: st ? Number(st.plans) / Number(st.calls) : null,
      };
    });
  } finally {
    for (const s of stmts) for (const { c: cl } of s.conns) await cl.close().catch(() => {});
  }
}
