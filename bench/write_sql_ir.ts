/**
 * What svc's write statements cost PostgreSQL, in instructions, on a loaded machine:
 * `deno run -A bench/write_sql_ir.ts [--old=DIR] [--scale=20] [--iterations=100]`.
 *
 * Compiles `deno task bench`'s nested write (invoice + 5 lines, bench/lib/cases.ts) in-process
 * (parse, plan, compile, read-back: the statements and parameters svc sends, see docs/endpoint.md)
 * against a private cluster with Chinook ×`scale`, stops the cluster, then runs PostgreSQL in
 * single-user mode under `valgrind --tool=callgrind`: the statements are prepared once, then
 * executed `iterations` times inside `begin; <role switch>; …; rollback`. Instructions are counted,
 * not timed, so the figures do not depend on what else the machine runs. Each statement's cost is
 * the difference between runs with and without it (the ones before it kept), per transaction;
 * the hand-written statement of the case is measured the same way. With `--old=DIR` (another
 * checkout, e.g. `git archive <commit> | tar -x -C /tmp/old`) its compiler's statements are
 * measured too. Needs valgrind and root or the cluster's owner.
 *
 * Prepared statements run as generic plans after five executions, as svc's named statements do;
 * `EXECUTE` adds the same small parse per statement to every variant.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { findPgBin, runCommand, startCluster } from "../src/db/cluster.ts";
import { introspect } from "../src/db/introspect.ts";
import type { parseQuery } from "../src/compile/parse.ts";
import type { compileRead } from "../src/compile/sql.ts";
import type { capRowSize } from "../src/compile/rowsize.ts";
import { CASES } from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    old: { type: "string" },
    scale: { type: "string", default: "20" },
    iterations: { type: "string", default: "100" },
  },
});
const ITER = Number(flags.iterations);
const write = CASES.find((c) => c.id === "nested_write")!;
const body = write.body as { query: unknown; data: unknown };
const log = (s: string) => console.error(`[write_sql_ir] ${s}`);

interface Stmt {
  label: string;
  sql: string;
  params: unknown[];
}

type Compiler = (schema: unknown) => Stmt[];

/** The statements of the nested write as the checkout at `dir` compiles them. */
async function compilerOf(dir: string): Promise<Compiler> {
  const { planWrite } = await import(`${dir}/src/write/plan.ts`);
  const { compileWrite } = await import(`${dir}/src/write/compile.ts`);
  const parse = (await import(`${dir}/src/compile/parse.ts`)).parseQuery as typeof parseQuery;
  const read = (await import(`${dir}/src/compile/sql.ts`)).compileRead as typeof compileRead;
  const cap = (await import(`${dir}/src/compile/rowsize.ts`)).capRowSize as typeof capRowSize;
  return (schema) => {
    const node = parse(schema as never, body.query, { maxDepth: 6, pointer: "/query" });
    const w = compileWrite(planWrite(node, body.data, "/data", { readBack: true }), {
      readBack: true,
    });
    const back = cap(read(node, { rootKeys: w.rootKeys }).rows, 64 * 1024 * 1024);
    return [
      ...w.statements.map((s: { path: string[]; sql: string; params: unknown[] }) => ({
        label: `write ${s.path.join(".") || "(root)"}`,
        sql: s.sql,
        params: s.params,
      })),
      {
        label: "read-back",
        sql: `SELECT "svc_b"."j"::text AS "j" FROM (${back.sql}) AS "svc_b"`,
        params: back.params,
      },
    ];
  };
}

const lit = (v: unknown) =>
  v === null || v === undefined ? "NULL" : `'${String(v).replaceAll("'", "''")}'`;
const oneLine = (s: string) => s.replace(/\s+/g, " ");

/** The single-user script: prepares, then `n` transactions running `count` of the statements. */
function script(stmts: Stmt[], count: number, n: number): string {
  const lines = stmts.map((s, i) =>
    `prepare s${i}${s.params.length ? `(${s.params.map(() => "text").join(",")})` : ""} as ${
      oneLine(s.sql)
    };`
  );
  const tx = [
    "begin;",
    "select set_config('role','~anonymous',true), set_config('svc.jwt.claims','null',true);",
    ...stmts.slice(0, count).map((s, i) =>
      `execute s${i}${s.params.length ? `(${s.params.map(lit).join(",")})` : ""};`
    ),
    "rollback;",
  ];
  for (let i = 0; i < n; i++) lines.push(...tx);
  return lines.join("\n") + "\n";
}

const bin = findPgBin();
if (!bin) throw new Error("PostgreSQL server binaries not found");
const dir = await Deno.makeTempDir({ prefix: "svc-ir-" });
await Deno.chmod(dir, 0o777);
log(`loading Chinook ×${flags.scale}`);
const cluster = await startCluster({ dir: `${dir}/pg` });
let variants: [string, Stmt[]][] = [];
try {
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  const schema = await introspect(uri);
  variants = [["svc", (await compilerOf(new URL("..", import.meta.url).pathname))(schema)]];
  if (flags.old) variants.unshift(["old", (await compilerOf(flags.old))(schema)]);
  variants.push(["hand-written", [{ label: "statement", sql: write.sql, params: [] }]]);
} finally {
  await cluster.ctl(["stop", "-m", "fast", "-w"]);
}

/** Instructions of one single-user run of `text`. */
async function instructions(text: string): Promise<number> {
  const out = `${dir}/callgrind.out`;
  const cmd = [
    "valgrind",
    "--tool=callgrind",
    `--callgrind-out-file=${out}`,
    `${bin}/postgres`,
    "--single",
    "-D",
    `${dir}/pg/data`,
    "-c",
    "shared_preload_libraries=",
    "bench",
  ];
  // Single-user mode reports a failed statement on standard error and goes on.
  const o = await runCommand(["sh", "-c", `${cmd.join(" ")} 2>&1`], {
    asPostgres: true,
    stdin: text,
  });
  if (/\bERROR:/.test(o)) throw new Error(`statement failed:\n${o.slice(-2000)}`);
  const m = /^(?:summary|totals): (\d+)/m.exec(Deno.readTextFileSync(out));
  Deno.removeSync(out);
  if (!m) throw new Error("no callgrind totals");
  return Number(m[1]);
}

/** Instructions per transaction of running the first `count` statements (warm, prepared). */
async function perTx(stmts: Stmt[], count: number): Promise<number> {
  const a = await instructions(script(stmts, count, 10));
  const b = await instructions(script(stmts, count, 10 + ITER));
  return (b - a) / ITER;
}

try {
  const empty = await perTx([], 0);
  console.log(`begin + role switch + rollback: ${(empty / 1000).toFixed(0)}k instructions`);
  for (const [name, stmts] of variants) {
    let prev = empty;
    const parts: string[] = [];
    for (let i = 1; i <= stmts.length; i++) {
      const t = await perTx(stmts, i);
      parts.push(`${stmts[i - 1].label} ${((t - prev) / 1000).toFixed(0)}k`);
      prev = t;
    }
    console.log(
      `${name}: ${((prev - empty) / 1000).toFixed(0)}k instructions per write (${
        parts.join(", ")
      }); transaction ${(prev / 1000).toFixed(0)}k`,
    );
  }
} finally {
  await Deno.remove(dir, { recursive: true }).catch(() => {});
}
