/**
 * What svc's read SQL costs PostgreSQL beside the hand-written SQL of the same answer:
 * `deno run -A bench/read_cost.ts [--scale=20] [--rounds=11] [--cases=pk_read,nested_read,wellknown]`.
 *
 * Starts a private cluster with Chinook ×scale (bench/lib/data.ts) and, per read case of
 * bench/lib/cases.ts, runs these statements, each prepared (named, values bound as svc binds them)
 * on connections of its own switched to svc's anonymous role:
 * - `svc`: what svc sends for the plain read (src/compile/sql.ts): the read alone, its row-size cap
 *   checked by svc's client (src/pg/connection.ts);
 * - `svc, SQL cap`: the same read under the row-size cap of src/compile/rowsize.ts at the default
 *   64 MiB — what every plain read sent before the client checked the cap, and what a read calling
 *   a VOLATILE function and a write's read-back still send;
 * - `hand-written`: the case's SQL (literals, so one plan for all executions).
 *
 * It measures each backend's CPU time (`/proc/<pid>/schedstat`: the cluster must run on this
 * machine) per execution, the statements interleaved five executions at a time so that load from
 * other work falls on all alike, and reads `pg_stat_statements` (execution and planning time,
 * plans per call). Each statement runs on `--connections` backends in turn (default 3): how a
 * backend's heap lies decides whether a statement's per-execution memory is given back to the
 * kernel and taken again every time (two `brk` calls, ≈ 25 µs for the well-known read's 10 kB row),
 * which differs between backends running the very same statement.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { startCluster } from "../src/db/cluster.ts";
import { introspect } from "../src/db/introspect.ts";
import { parseQuery } from "../src/compile/parse.ts";
import { compileRead } from "../src/compile/sql.ts";
import { capRowSize } from "../src/compile/rowsize.ts";
import { Client } from "../src/pg/client.ts";
import { CASES, WELLKNOWN_FILE } from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { enableStatements } from "./lib/statements.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    scale: { type: "string", default: "20" },
    rounds: { type: "string", default: "11" },
    cases: { type: "string", default: "pk_read,nested_read,wellknown" },
    connections: { type: "string", default: "3" },
  },
});
const ROUNDS = Number(flags.rounds);
const CONNS = Number(flags.connections);
const CAP = 64 * 1024 * 1024;
/** Executions per round and statement, by case (about the same time each). */
const EXECS: Record<string, number> = { pk_read: 1000, nested_read: 40, wellknown: 200 };

const log = (s: string) => console.error(`[read_cost] ${s}`);
const med = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const cpuNs = (pid: number) =>
  Number(Deno.readTextFileSync(`/proc/${pid}/schedstat`).split(" ")[0]);

interface Variant {
  name: string;
  sql: string;
  params: unknown[];
  conns: { c: Client; pid: number }[];
  cpuUs: number[];
}

const cluster = await startCluster();
try {
  log(`loading Chinook ×${flags.scale}`);
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  await enableStatements(cluster, "bench");
  const schema = await introspect(uri);
  const admin = new Client(uri);
  const out: string[] = [
    "| case | statement | PostgreSQL CPU µs per execution | ÷ hand-written | exec ms | plan ms | plans per call |",
    "|---|---|---:|---:|---:|---:|---:|",
  ];
  for (const id of flags.cases.split(",")) {
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
    const capped = capRowSize(rows, CAP);
    const variants: Variant[] = [];
    for (
      const [name, sql, params] of [
        ["svc", rows.sql, rows.params],
        ["svc, SQL cap", capped.sql, capped.params],
        ["hand-written", c.sql, []],
      ] as [string, string, unknown[]][]
    ) {
      const conns = [];
      for (let i = 0; i < CONNS; i++) {
        const cl = new Client(uri);
        await cl.query("select set_config('role', '~anonymous', false)");
        const [{ pid }] = await cl.query<{ pid: number }>("select pg_backend_pid() as pid");
        conns.push({ c: cl, pid: Number(pid) });
      }
      // Tagged (a trailing comment) so that pg_stat_statements' entry is found by its text.
      const tag = ` /*read_cost:${variants.length}*/`;
      variants.push({ name, sql: sql + tag, params, conns, cpuUs: [] });
    }
    // The same answer from each, and past the plan cache's first five custom plans.
    let expected: string | null = null;
    for (const v of variants) {
      for (const { c: cl } of v.conns) {
        for (let i = 0; i < 8; i++) {
          const got = JSON.stringify(await cl.query(v.sql, v.params));
          expected ??= got;
          if (got !== expected) throw new Error(`${id}: ${v.name} answers differently`);
        }
      }
    }
    await admin.query("select pg_stat_statements_reset()");
    const n = EXECS[id] ?? 100;
    for (let r = 0; r < ROUNDS; r++) {
      const acc = variants.map(() => 0);
      for (let k = 0; k < n; k += 5) {
        for (let i = 0; i < variants.length; i++) {
          const at = (i + k / 5) % variants.length;
          const v = variants[at];
          const { c: cl, pid } = v.conns[(k / 5) % CONNS];
          const t0 = cpuNs(pid);
          for (let q = 0; q < 5; q++) await cl.query(v.sql, v.params);
          acc[at] += cpuNs(pid) - t0;
        }
      }
      variants.forEach((v, i) => v.cpuUs.push(acc[i] / n / 1000));
    }
    const stats = await admin.query<Record<string, unknown>>(
      "select query, calls, plans, mean_exec_time, mean_plan_time from pg_stat_statements",
    );
    const hand = variants[variants.length - 1];
    for (const v of variants) {
      const tag = v.sql.slice(v.sql.lastIndexOf(" /*read_cost:"));
      const s = stats.find((x) => String(x.query).endsWith(tag));
      const ratio = med(v.cpuUs.map((u, i) => u / hand.cpuUs[i]));
      const num = (x: unknown, d: number) => (s ? Number(x).toFixed(d) : "?");
      out.push(
        `| ${id} | ${v.name} | ${med(v.cpuUs).toFixed(1)} | ${ratio.toFixed(2)} | ${
          num(s?.mean_exec_time, 3)
        } | ${num(s?.mean_plan_time, 3)} | ${
          s ? (Number(s.plans) / Number(s.calls)).toFixed(2) : "?"
        } |`,
      );
      log(`${id} ${v.name}: ${v.cpuUs.map((u) => u.toFixed(0)).join(" ")}`);
      for (const { c: cl } of v.conns) await cl.close();
    }
  }
  await admin.close();
  console.log(out.join("\n"));
} finally {
  await cluster.stop();
}
