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
 * - `hand-written, bound as $1` (cases with a `floorSql`: the primary-key and nested reads): the
 *   case's SQL with its key or bound as `$1`, bound as svc binds it, so planned per call as svc's;
 * - `hand-written`: the case's SQL (literals, so one plan for all executions).
 *
 * It measures each backend's CPU time per execution and reads `pg_stat_statements` as
 * bench/lib/read_cost.ts does (`deno task bench` runs the same measure, without the cap's variant,
 * for its target on the nested read's SQL). Each statement runs on `--connections` backends in turn
 * (default 3): how a backend's heap lies decides whether a statement's per-execution memory is
 * given back to the kernel and taken again every time (two `brk` calls, ≈ 25 µs for the well-known
 * read's 10 kB row), which differs between backends running the very same statement.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { startCluster } from "../src/db/cluster.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { enableStatements } from "./lib/statements.ts";
import { measureReadCost } from "./lib/read_cost.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    scale: { type: "string", default: "20" },
    rounds: { type: "string", default: "11" },
    cases: { type: "string", default: "pk_read,nested_read,wellknown" },
    connections: { type: "string", default: "3" },
  },
});

const log = (s: string) => console.error(`[read_cost] ${s}`);
const cluster = await startCluster();
try {
  log(`loading Chinook ×${flags.scale}`);
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  await enableStatements(cluster, "bench");
  const costs = await measureReadCost(uri, flags.cases.split(","), {
    rounds: Number(flags.rounds),
    connections: Number(flags.connections),
    capBytes: 64 * 1024 * 1024,
    statements: true,
    log,
  });
  const num = (x: number | null, d: number) => (x === null ? "?" : x.toFixed(d));
  console.log([
    "| case | statement | PostgreSQL CPU µs per execution | ÷ hand-written | ÷ bound | exec ms | plan ms | plans per call |",
    "|---|---|---:|---:|---:|---:|---:|---:|",
    ...costs.map((c) =>
      `| ${c.case} | ${c.statement} | ${c.cpu_us.toFixed(1)} | ${c.ratio.toFixed(2)} | ${
        num(c.ratio_bound, 2)
      } | ${num(c.exec_ms, 3)} | ${num(c.plan_ms, 3)} | ${num(c.plans_per_call, 2)} |`
    ),
  ].join("\n"));
} finally {
  await cluster.stop();
}
