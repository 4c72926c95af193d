/**
 * svc CPU time per primary-key read: `deno run -A bench/pk_cpu.ts`.
 *
 * Starts a private PostgreSQL cluster with Chinook (bench/lib/data.ts), one svc process per
 * variant (one worker, `--http.workers=1`, unless the variant's flags say otherwise), and drives
 * the `pk_read` case (bench/lib/cases.ts: POST /svc reading one track by key) with wrk at 10
 * connections. For each round and variant it reports svc's CPU time (user + system
 * of the svc process, from /proc/<pid>/stat) divided by the requests wrk completed; rounds
 * alternate between variants (the order rotates each round), so drift of a shared machine hits
 * every variant alike. The summary gives each variant's median, min and max ms/request, and each
 * variant's per-round ratio to the first one (median and spread).
 *
 * Flags:
 * - `--variant=NAME[@MAIN]:FLAG,FLAG…` (repeatable; default one variant `svc:`): svc
 *   configuration flags per variant (a `NAME=value` entry with an upper-case name is an
 *   environment variable instead), and optionally another checkout's main.ts (e.g. an older
 *   commit in a temp worktree). Example: `--variant=on:--http.metrics.enable=true --variant=off:`.
 * - `--rounds=7`, `--duration=5` (s of load per round and variant), `--warmup=3` (s, once per
 *   variant), `--connections=10`, `--scale=1` (Chinook copies), `--pool=10`.
 * - `--cpu-prof=DIR`: runs each svc under `--cpu-prof` (profiles written to DIR/<variant>/ when
 *   svc exits) and prints the top self-time functions and files of each.
 * - `--concurrent`: loads every variant at the same time in each round (one wrk each) instead of
 *   one after the other, so that load from other processes on a shared machine falls on all
 *   variants alike (tighter ratios; absolute figures then include the variants' contention).
 * - `--json=FILE`: also writes the rounds and the summary as JSON.
 * - `--case=pk_read`: another case of bench/lib/cases.ts (nested_read, nested_write, wellknown…).
 * - A variant named `floor` runs bench/floor.ts instead of svc (cases with a `floorSql`:
 *   pk_read, nested_read): the driverless floor, e.g. `--variant=svc: --variant=floor:`.
 * - A variant named `pgbench` runs the case's hand-written SQL with pgbench (`-M prepared`, inside
 *   the same begin / role switch / commit as `deno task bench`) instead of svc: its PostgreSQL
 *   CPU and statement times per transaction beside svc's (its own CPU is not counted).
 * - `--statements`: loads pg_stat_statements into the cluster and prints, per variant, PostgreSQL's
 *   time per request for each statement (median over the rounds; bench/lib/statements.ts).
 *
 * - `--latency=ab`: drives svc with ApacheBench (`ab -k`) instead of wrk and reports each
 *   request's own latency (p50, p99, max, requests over 50 ms); wrk's percentiles are corrected
 *   for coordinated omission (bench/lib/load.ts), so one pause of svc sets their p99.
 *
 * Every round also reports PostgreSQL's CPU per request (all of the cluster's processes), and
 * latency figures of svc's runs.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { startCluster } from "../src/db/cluster.ts";
import { CASES } from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { ab, ensureWrk, pgbench, pgbenchScript, which, wrk } from "./lib/load.ts";
import { type Child, CpuMonitor, cpuMs, readMem, startFloor } from "./lib/procs.ts";
import { summarizeProfile } from "./lib/cpuprof.ts";
import { findPgBin } from "../src/db/cluster.ts";
import { Client } from "../src/pg/client.ts";
import {
  enableStatements,
  formatStatements,
  readStatements,
  resetStatements,
  type StatementsPerRequest,
} from "./lib/statements.ts";
import { parseVariant, startVariant, toolDir, type Variant } from "./lib/variants.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    variant: { type: "string", multiple: true, default: ["svc:"] },
    rounds: { type: "string", default: "7" },
    duration: { type: "string", default: "5" },
    warmup: { type: "string", default: "3" },
    connections: { type: "string", default: "10" },
    scale: { type: "string", default: "1" },
    pool: { type: "string", default: "10" },
    "cpu-prof": { type: "string" },
    json: { type: "string" },
    concurrent: { type: "boolean", default: false },
    case: { type: "string", default: "pk_read" },
    statements: { type: "boolean", default: false },
    latency: { type: "string", default: "wrk" },
  },
});

const variants = flags.variant.map(parseVariant);
if (new Set(variants.map((v) => v.name)).size !== variants.length) {
  throw new Error("variant names must differ");
}
const ROUNDS = Number(flags.rounds);
const DURATION = Number(flags.duration);
const WARMUP = Number(flags.warmup);
const CONNS = Number(flags.connections);
const PROF = flags["cpu-prof"];
const STATEMENTS = flags.statements;
if (STATEMENTS && flags.concurrent) throw new Error("--statements needs one variant at a time");

const log = (s: string) => console.error(`[pk_cpu] ${s}`);
const med = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const pk = CASES.find((c) => c.id === flags.case);
if (!pk) throw new Error(`unknown case ${flags.case} (${CASES.map((c) => c.id).join(", ")})`);
if (!pk.floorSql && variants.some((v) => v.name === "floor")) {
  throw new Error(`case ${pk.id} has no floor (bench/lib/cases.ts floorSql)`);
}
if (!await ensureWrk(log)) throw new Error("wrk is required (apt-get install wrk)");
const AB = flags.latency === "ab";
if (!AB && flags.latency !== "wrk") throw new Error("--latency is wrk or ab");
if (AB && !await which("ab")) {
  throw new Error("--latency=ab needs ab (apt-get install apache2-utils)");
}

const tmp = await toolDir("svc-pk-cpu-");
const bodyFile = `${tmp}/${pk.id}.json`;
Deno.writeTextFileSync(bodyFile, JSON.stringify(pk.body));

log("starting PostgreSQL");
const cluster = await startCluster();
const procs = new Map<string, Child>();
let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  for (const c of procs.values()) await c.stop().catch(() => {});
  await cluster.stop().catch(() => {});
  await Deno.remove(tmp, { recursive: true }).catch(() => {});
}
Deno.addSignalListener("SIGINT", async () => {
  await cleanup();
  Deno.exit(130);
});

/** One round of one variant. */
interface Round {
  variant: string;
  round: number;
  requests: number;
  rps: number;
  cpu_ms: number;
  ms_per_request: number;
  /** PostgreSQL's CPU (all its processes) per request. */
  pg_ms_per_request: number;
  /**
   * Latency (null for pgbench): median, p99, slowest — wrk's (p99 after its correction) or, with
   * `--latency=ab`, as ab saw each request, with the count of requests over 50 ms.
   */
  p50_ms: number | null;
  p99_ms: number | null;
  max_ms: number | null;
  over_50ms?: number | null;
  statements?: StatementsPerRequest;
}

try {
  log(`loading Chinook ×${flags.scale}`);
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  if (STATEMENTS) await enableStatements(cluster, "bench");
  const admin = new Client(cluster.uriFor("bench"));
  const postmaster = Number(
    Deno.readTextFileSync(`${cluster.dir}/data/postmaster.pid`).split("\n")[0],
  );
  const pgbenchFile = `${tmp}/pgbench.sql`;
  Deno.writeTextFileSync(
    pgbenchFile,
    pgbenchScript(
      pk.rollback ? ["savepoint bench", pk.sql, "rollback to savepoint bench"] : [pk.sql],
      { role: "~anonymous", claims: "null", pipeline: false },
    ),
  );
  for (const v of variants) {
    if (v.name === "pgbench") continue;
    const profDir = PROF ? `${PROF}/${v.name}` : undefined;
    if (profDir) Deno.mkdirSync(profDir, { recursive: true });
    const child = v.name === "floor"
      ? await startFloor({
        pgPort: cluster.port,
        database: "bench",
        poolSize: Number(flags.pool),
        sql: pk.floorSql!,
        role: "~anonymous",
        claims: "null",
        logFile: `${tmp}/floor.log`,
        denoArgs: profDir ? ["--cpu-prof", `--cpu-prof-dir=${profDir}`] : [],
      })
      : await startVariant(v, {
        pgUri: uri,
        poolSize: Number(flags.pool),
        tmp,
        // One worker, as the bench's figures and its goals (a variant's own flag wins).
        flags: ["--http.workers=1"],
        denoArgs: profDir ? ["--cpu-prof", `--cpu-prof-dir=${profDir}`] : [],
      });
    procs.set(v.name, child);
    const check = await fetch(`${child.url}/svc`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(pk.body),
    });
    const text = await check.text();
    if (check.status !== 200 || (pk.id === "pk_read" && !text.includes('"track_id":1234'))) {
      throw new Error(`${v.name}: ${pk.id} answered ${check.status}: ${text.slice(0, 300)}`);
    }
    log(
      `${v.name}: svc pid ${child.pid} ${v.main ?? ""} ${v.flags.join(" ")} ${
        Object.entries(v.env).map(([k, x]) => `${k}=${x}`).join(" ")
      }`,
    );
    await wrk({ url: `${child.url}/svc`, bodyFile, connections: CONNS, duration: WARMUP });
  }

  const rounds: Round[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const order = variants.map((_, i) => variants[(i + r) % variants.length]);
    const one = async (v: Variant): Promise<Round> => {
      // A write case's rolled-back rows leave dead tuples: every run starts vacuumed (as in
      // `deno task bench`).
      if (pk.rollback) await admin.simple("vacuum (analyze) invoice, invoice_line");
      if (STATEMENTS) await resetStatements(admin);
      const child = procs.get(v.name);
      const mon = new CpuMonitor(child?.pid ?? null, postmaster);
      const c0 = child ? cpuMs(child.pid)! : 0;
      mon.start();
      let requests: number;
      let rps: number;
      let lat: Pick<Round, "p50_ms" | "p99_ms" | "max_ms" | "over_50ms"> = {
        p50_ms: null,
        p99_ms: null,
        max_ms: null,
      };
      if (child) {
        const run = {
          url: `${child.url}/svc`,
          bodyFile,
          connections: CONNS,
          duration: DURATION,
        };
        const w = AB ? await ab({ ...run, logFile: `${tmp}/ab.tsv` }) : await wrk(run);
        if (w.non2xx || w.socket_errors) {
          throw new Error(`${v.name}: ${w.non2xx} non-2xx, ${w.socket_errors} socket errors`);
        }
        requests = w.requests;
        rps = w.rps;
        lat = {
          p50_ms: w.p50_ms,
          p99_ms: w.p99_ms,
          max_ms: w.max_ms ?? null,
          over_50ms: w.over_50ms,
        };
      } else {
        const p = await pgbench({
          pgbench: `${findPgBin()}/pgbench`,
          host: "127.0.0.1",
          port: cluster.port,
          user: "postgres",
          database: "bench",
          logDir: tmp,
          scriptFile: pgbenchFile,
          clients: CONNS,
          duration: DURATION,
          pipeline: false,
        });
        requests = p.transactions;
        rps = p.tps;
      }
      const cpu = mon.stop();
      const c1 = child ? cpuMs(child.pid)! : 0;
      const round: Round = {
        variant: v.name,
        round: r,
        requests,
        rps,
        cpu_ms: c1 - c0,
        ms_per_request: (c1 - c0) / requests,
        pg_ms_per_request: (cpu.postgres / 100) * (cpu.seconds ?? DURATION) * 1000 / requests,
        ...lat,
      };
      if (STATEMENTS) round.statements = await readStatements(admin, "bench", requests);
      return round;
    };
    const done: Round[] = [];
    if (flags.concurrent) done.push(...await Promise.all(order.map(one)));
    else for (const v of order) done.push(await one(v));
    for (const row of done) {
      rounds.push(row);
      log(
        `round ${r + 1}/${ROUNDS} ${row.variant.padEnd(12)} ${
          row.ms_per_request.toFixed(4)
        } ms/req (${row.requests} req, ${row.rps.toFixed(0)} req/s, svc CPU ${
          row.cpu_ms.toFixed(0)
        } ms, PostgreSQL ${row.pg_ms_per_request.toFixed(4)} ms/req${
          row.p50_ms === null
            ? ""
            : `; p50 ${row.p50_ms.toFixed(2)} p99 ${row.p99_ms?.toFixed(1)} max ${
              row.max_ms?.toFixed(0) ?? "–"
            } ms${row.over_50ms == null ? "" : `, ${row.over_50ms} > 50 ms`}`
        })`,
      );
    }
  }

  const base = variants[0].name;
  const of = (name: string) => rounds.filter((x) => x.variant === name);
  const summary = variants.map((v) => {
    const rs = of(v.name);
    const per = rs.map((x) => x.ms_per_request);
    const ratios = rs.map((x, i) => x.ms_per_request / of(base)[i].ms_per_request);
    return {
      variant: v.name,
      flags: v.flags,
      main: v.main ?? null,
      median_ms: med(per),
      min_ms: Math.min(...per),
      max_ms: Math.max(...per),
      median_rps: med(rs.map((x) => x.rps)),
      median_pg_ms: med(rs.map((x) => x.pg_ms_per_request)),
      median_p50_ms: rs[0]?.p50_ms === null ? null : med(rs.map((x) => x.p50_ms!)),
      median_p99_ms: rs[0]?.p99_ms === null ? null : med(rs.map((x) => x.p99_ms!)),
      slowest_ms: rs[0]?.max_ms == null ? null : Math.max(...rs.map((x) => x.max_ms!)),
      median_max_ms: rs[0]?.max_ms == null ? null : med(rs.map((x) => x.max_ms!)),
      over_50ms: rs[0]?.over_50ms == null ? null : rs.reduce((a, x) => a + x.over_50ms!, 0),
      requests: rs.reduce((a, x) => a + x.requests, 0),
      peak_rss_mb: procs.has(v.name) ? readMem(procs.get(v.name)!.pid).hwm_mb : null,
      pg_min_ms: Math.min(...rs.map((x) => x.pg_ms_per_request)),
      pg_max_ms: Math.max(...rs.map((x) => x.pg_ms_per_request)),
      ratio_to_first: { median: med(ratios), min: Math.min(...ratios), max: Math.max(...ratios) },
    };
  });
  console.log(
    `\nsvc CPU per ${pk.id} request, ${ROUNDS} rounds × ${DURATION} s, c=${CONNS}${
      flags.concurrent ? ", variants loaded concurrently" : ""
    }:`,
  );
  for (const s of summary) {
    console.log(
      `  ${s.variant.padEnd(12)} median ${s.median_ms.toFixed(4)} ms (min ${
        s.min_ms.toFixed(4)
      }, max ${s.max_ms.toFixed(4)}), ${s.median_rps.toFixed(0)} req/s; PostgreSQL ${
        s.median_pg_ms.toFixed(4)
      } ms (${s.pg_min_ms.toFixed(4)}–${s.pg_max_ms.toFixed(4)})` +
        (s.variant === base
          ? ""
          : `; vs ${base}: ×${s.ratio_to_first.median.toFixed(3)} (${
            s.ratio_to_first.min.toFixed(3)
          }–${s.ratio_to_first.max.toFixed(3)})`),
    );
    if (s.median_p50_ms !== null) {
      console.log(
        `  ${"".padEnd(12)} latency (${flags.latency}) p50 ${s.median_p50_ms.toFixed(2)} ms, p99 ${
          s.median_p99_ms?.toFixed(1)
        } ms (medians); max ${s.median_max_ms?.toFixed(0) ?? "–"} ms (median), ${
          s.slowest_ms?.toFixed(0) ?? "–"
        } ms (all);${
          s.over_50ms === null ? "" : ` ${s.over_50ms} of ${s.requests} requests > 50 ms;`
        } peak RSS ${s.peak_rss_mb?.toFixed(0) ?? "–"} MiB`,
      );
    }
  }
  if (STATEMENTS) {
    for (const v of variants) {
      const rs = of(v.name).map((x) => x.statements!);
      // Per statement text: the median over the rounds of its µs per request.
      const texts = [...new Set(rs.flatMap((x) => x.statements.map((s) => s.query)))];
      const merged: StatementsPerRequest = {
        requests: med(rs.map((x) => x.requests)),
        total_us_per_request: med(rs.map((x) => x.total_us_per_request)),
        statements: texts.map((q) => {
          const all = rs.map((x) => x.statements.find((s) => s.query === q));
          const got = all.filter((s) => s !== undefined);
          return {
            ...got[0]!,
            calls: med(got.map((s) => s!.calls)),
            plans: med(got.map((s) => s!.plans)),
            exec_us_per_request: med(all.map((s) => s?.exec_us_per_request ?? 0)),
            plan_us_per_request: med(all.map((s) => s?.plan_us_per_request ?? 0)),
          };
        }).sort((a, b) => b.exec_us_per_request - a.exec_us_per_request),
      };
      console.log("");
      for (const line of formatStatements(`${v.name} (medians of ${rs.length} rounds)`, merged)) {
        console.log(line);
      }
    }
  }
  await admin.close();
  if (flags.json) Deno.writeTextFileSync(flags.json, JSON.stringify({ rounds, summary }, null, 2));

  if (PROF) {
    for (const c of procs.values()) await c.stop();
    for (const v of variants) {
      for (const f of Deno.readDirSync(`${PROF}/${v.name}`)) {
        if (!f.name.endsWith(".cpuprofile")) continue;
        const s = summarizeProfile(`${PROF}/${v.name}/${f.name}`, 30);
        console.log(`\nprofile ${v.name} (${f.name}, ${s.samples} samples; % of busy samples)`);
        console.log("  self time by function:");
        for (const e of s.functions) console.log(`    ${e.pct.toFixed(1).padStart(5)}%  ${e.name}`);
        console.log("  self time by file:");
        for (const e of s.files) console.log(`    ${e.pct.toFixed(1).padStart(5)}%  ${e.name}`);
        console.log("  inclusive time by function:");
        for (const e of s.inclusive) console.log(`    ${e.pct.toFixed(1).padStart(5)}%  ${e.name}`);
      }
    }
  }
} finally {
  await cleanup();
}
