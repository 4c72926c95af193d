/**
 * End-to-end load benchmark: `deno task bench` (= `deno run -A bench/run.ts`).
 *
 * 1. starts a private PostgreSQL cluster and loads Chinook scaled ×20 (bench/lib/data.ts);
 * 2. starts svc as a separate process (`deno run -A main.ts`, rollback allowed, a temp
 *    directory holding the bench's well-known query);
 * 3. probes the 100,000-row read one request at a time: first byte, total time, svc's RSS; and
 *    svc's RSS growth under a batch of 100 wide items (≈ 2 GB streamed; limit 200 MiB);
 * 4. checks for every case that svc's answer equals the answer of hand-written SQL;
 * 5. drives svc with wrk (installed with apt-get when missing; autocannon as a fallback) at 1,
 *    10 and 50 connections, and pgbench with the hand-written SQL inside the same transaction
 *    svc uses (role and claims set per transaction) at the same concurrency — once as the
 *    plain script, once pipelined (one round trip, as svc sends it);
 * 6. runs the nested read against PostGraphile v5 (npm, in bench/.peer) as a peer;
 * 7. writes bench/results/latest.md and bench/results/latest.json.
 *
 * Flags: --duration=10 (s per svc/pgbench/peer run), --pipeline-duration=5 (s per pipelined
 * pgbench run; 0 skips), --warmup=2, --connections=1,10,50, --scale=20, --pool=10 (svc's and
 * PostGraphile's pool size), --cases=pk_read,…,wide_batch, --no-peer, --out=bench/results
 * (`--cases=wide_batch --scale=1 --no-peer` runs the wide batch alone).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { Client } from "../src/pg/client.ts";
import { type Cluster, findPgBin, startCluster } from "../src/db/cluster.ts";
import {
  type Case,
  CASES,
  graphqlToSvcShape,
  jsonDiff,
  NESTED_READ_GRAPHQL,
  WELLKNOWN_FILE,
} from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { measureReadCost } from "./lib/read_cost.ts";
import {
  formatStatements,
  readStatements,
  resetStatements,
  type StatementsPerRequest,
} from "./lib/statements.ts";
import {
  autocannon,
  ensureWrk,
  type HttpResult,
  type HttpRun,
  pgbench,
  type PgbenchResult,
  type PgbenchRun,
  pgbenchScript,
  wrk,
} from "./lib/load.ts";
import {
  busyProcesses,
  type Child,
  childrenOf,
  CpuMonitor,
  cpuMs,
  type CpuUse,
  ensurePeer,
  readMem,
  startFloor,
  startPeer,
  startSvc,
  v8FlagsOf,
  withPeak,
} from "./lib/procs.ts";
import {
  type BigProbe,
  type CaseResult,
  evaluateTargets,
  type FloorCase,
  type FloorRow,
  type PeerRow,
  type ReadCost,
  renderMarkdown,
  type Report,
  type RunRow,
  type ScalingRow,
  type StatementCost,
} from "./lib/report.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    duration: { type: "string", default: "10" },
    "pipeline-duration": { type: "string", default: "5" },
    warmup: { type: "string", default: "2" },
    connections: { type: "string", default: "1,10,50" },
    scale: { type: "string", default: "20" },
    pool: { type: "string", default: "10" },
    workers: { type: "string", default: "1,2" },
    cases: { type: "string", default: [...CASES.map((c) => c.id), "wide_batch"].join(",") },
    "no-peer": { type: "boolean", default: false },
    /** V8 flags for every svc process (e.g. `--max-semi-space-size=2`), comma-separated. */
    "svc-v8-flags": { type: "string", default: "" },
    out: { type: "string", default: new URL("./results", import.meta.url).pathname },
  },
});
const DURATION = Number(flags.duration);
const PIPE_DURATION = Number(flags["pipeline-duration"]);
const WARMUP = Number(flags.warmup);
const CONNS = flags.connections.split(",").map(Number);
const SCALE = Number(flags.scale);
/** Interleaved rounds of the read-cost measure (bench/lib/read_cost.ts; ≈ 1 s each). */
const READ_COST_ROUNDS = 11;
const POOL = Number(flags.pool);
const CASE_IDS = flags.cases.split(",");
/** svc's `http.workers` for the main run, then the counts of the scaling runs. */
const WORKERS = flags.workers.split(",").map(Number);
/** `deno run` options of every svc process (`--svc-v8-flags`). */
const SVC_DENO_ARGS = flags["svc-v8-flags"] ? [`--v8-flags=${flags["svc-v8-flags"]}`] : [];
const ROLE = "~anonymous";
const CLAIMS = "null";
/** The amplification probe's query: one top-level row holding 1,297² track objects. */
const AMPLIFICATION = {
  relation: "genre",
  where: ["=", "genre_id", 1],
  join: {
    tracks: {
      relation: "track",
      on: { genre_id: "genre_id" },
      limit: 1297,
      join: {
        g: {
          relation: "genre",
          on: { genre_id: "genre_id" },
          join: { tracks: { relation: "track", on: { genre_id: "genre_id" }, limit: 1297 } },
        },
      },
    },
  },
};

/**
 * The wide batch: 100 items, each the first 3,503 tracks (all of unscaled Chinook) with 200 keys
 * (≈ 2 GB of JSON in all). Streamed, svc's RSS may grow by at most {@link WIDE_BATCH_LIMIT_MIB}.
 */
const WIDE_BATCH = Array.from({ length: 100 }, () => ({
  relation: "track",
  select: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`k${i}`, "name"])),
  order_by: ["track_id"],
  limit: 3503,
}));
const WIDE_BATCH_LIMIT_MIB = 200;

/** Requests of the 100,000-row probe. */
const PROBE_REQUESTS = 5;

const t0 = performance.now();
const log = (s: string) =>
  console.error(`[bench ${((performance.now() - t0) / 1000).toFixed(0).padStart(3)}s] ${s}`);
const problems: string[] = [];

const RUN_DIR = new URL("./.data/run", import.meta.url).pathname;
try {
  Deno.removeSync(RUN_DIR, { recursive: true });
} catch { /* first run */ }
Deno.mkdirSync(`${RUN_DIR}/pgbench`, { recursive: true });

let cluster: Cluster | null = null;
let svc: Child | null = null;
let peer: Child | null = null;
let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  await peer?.stop().catch(() => {});
  await svc?.stop().catch(() => {});
  cluster?.stopSync();
}
globalThis.addEventListener("unload", () => cluster?.stopSync());
Deno.addSignalListener("SIGINT", async () => {
  log("interrupted; cleaning up");
  await cleanup();
  Deno.exit(130);
});

/** The commit svc was measured at, and whether its sources had uncommitted changes. */
function svcVersion(): string {
  const git = (...args: string[]) => {
    try {
      const o = new Deno.Command("git", {
        args,
        cwd: new URL("..", import.meta.url).pathname,
        stdout: "piped",
        stderr: "null",
      }).outputSync();
      return o.success ? new TextDecoder().decode(o.stdout).trim() : "";
    } catch {
      return "";
    }
  };
  const head = git("rev-parse", "--short", "HEAD") || "unknown";
  const dirty = git("status", "--porcelain", "--", "main.ts", "src/");
  return dirty ? `${head} + uncommitted changes in main.ts/src/` : head;
}

/** Machine facts for the report. */
function machineInfo(wrkVersion: string | null): Record<string, string | number> {
  const cpuinfo = Deno.readTextFileSync("/proc/cpuinfo");
  const meminfo = Deno.readTextFileSync("/proc/meminfo");
  const memKb = Number(/MemTotal:\s+(\d+)/.exec(meminfo)?.[1] ?? 0);
  let os = "";
  try {
    os = /PRETTY_NAME="([^"]*)"/.exec(Deno.readTextFileSync("/etc/os-release"))?.[1] ?? "";
  } catch { /* unknown */ }
  const nproc = new Deno.Command("nproc", { stdout: "piped" }).outputSync();
  return {
    nproc: Number(new TextDecoder().decode(nproc.stdout).trim()) || navigator.hardwareConcurrency,
    cpu: /model name\s*:\s*(.*)/.exec(cpuinfo)?.[1]?.trim() ?? "unknown",
    memory_gib: Math.round(memKb / 1024 / 1024 * 10) / 10,
    os,
    kernel: Deno.osRelease(),
    deno: Deno.version.deno,
    load_generator: wrkVersion ?? "autocannon@8.0.0 (wrk unavailable)",
    // With the kernel's session scheduling groups on, every PostgreSQL backend (each calls
    // setsid) weighs as much as svc and the load generator together: the figures depend on it
    // (docs/performance.md, "The scheduler's session groups").
    sched_autogroup: autogroup(),
  };
}

/** `kernel.sched_autogroup_enabled` ("1": on), or "n/a" where the kernel has none. */
function autogroup(): string {
  try {
    return Deno.readTextFileSync("/proc/sys/kernel/sched_autogroup_enabled").trim();
  } catch {
    return "n/a";
  }
}

/** Runs the HTTP load generator against a URL with a body file. */
function http(o: HttpRun, useWrk: boolean): Promise<HttpResult> {
  return useWrk ? wrk(o) : autocannon(o);
}

/** Runs `fn` while measuring CPU use of the server, PostgreSQL and the rest. */
async function withCpu<T>(
  serverPid: number | null,
  postmaster: number,
  fn: () => Promise<T>,
): Promise<{ value: T; cpu: CpuUse }> {
  const mon = new CpuMonitor(serverPid, postmaster);
  mon.start();
  try {
    const value = await fn();
    return { value, cpu: mon.stop() };
  } catch (e) {
    mon.stop();
    throw e;
  }
}

/** POSTs a body; returns status, text and parsed JSON (or null). */
async function post(
  url: string,
  body: string,
): Promise<{ status: number; text: string; json: unknown }> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const text = await r.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch { /* not JSON */ }
  return { status: r.status, text, json };
}

/** The hand-written SQL's answer, run exactly as pgbench runs it (role, claims, savepoint). */
async function sqlAnswer(sql: Client, c: Case): Promise<unknown[]> {
  const rows = await sql.begin(async (tx) => {
    await tx.query(
      "select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true)",
      [ROLE, CLAIMS],
    );
    if (c.rollback) await tx.query("savepoint bench");
    const rows = await tx.query(c.sql);
    if (c.rollback) await tx.query("rollback to savepoint bench");
    return rows;
  });
  return rows.map((r) => (typeof r.j === "string" ? JSON.parse(r.j) : r.j));
}

/** One request at a time: first byte, total time, bytes and svc's peak RSS. */
async function probeBig(url: string, body: string, pid: number, n: number): Promise<BigProbe> {
  const baseline = readMem(pid).rss_mb;
  const out: BigProbe = {
    requests: n,
    status: [],
    bytes: 0,
    rows: null,
    ttfb_ms: [],
    total_ms: [],
    baseline_rss_mb: baseline,
    peak_rss_mb: baseline,
    growth_mb: 0,
    peak_method: "VmHWM (reset through /proc/<pid>/clear_refs right before the first request, " +
      "where allowed) and VmRSS sampled every 5 ms; the baseline is svc's VmRSS right before, " +
      "after startup and a few small requests",
  };
  const { peak } = await withPeak(pid, async () => {
    for (let i = 0; i < n; i++) {
      const s = performance.now();
      const r = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
      const reader = r.body!.getReader();
      let first = true;
      let bytes = 0;
      let last: Uint8Array | null = null;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (first && value.length) {
          out.ttfb_ms.push(performance.now() - s);
          first = false;
        }
        bytes += value.length;
        last = value;
      }
      out.total_ms.push(performance.now() - s);
      out.status.push(r.status);
      out.bytes = bytes;
      // A 200 whose body does not end in "]" was cut short.
      if (r.status === 200 && last && last[last.length - 1] !== 0x5d) out.status.push(-1);
    }
  }, 5);
  out.peak_rss_mb = peak;
  out.growth_mb = out.peak_rss_mb - baseline;
  return out;
}

/**
 * The main svc process's peak RSS over the whole bench: every case's runs and every probe run on
 * it (the 100,000-row read, the oversized row, the wide batch — the wide batch is often the peak).
 */
function peakOverRuns(cases: CaseResult[], probes: (BigProbe | undefined)[]): number {
  return Math.round(
    Math.max(
      ...cases.flatMap((c) => c.runs.map((r) => r.svc_peak_rss_mb ?? 0)),
      ...probes.map((p) => p?.peak_rss_mb ?? 0),
    ),
  );
}

/**
 * The peak RSS of the one-worker svc over all its runs (null without one): the main svc's when it
 * runs one worker (every case and probe), else the scaling run's (every case but big_read).
 */
function oneWorkerPeak(
  cases: CaseResult[],
  scaling: ScalingRow[],
  probes: (BigProbe | undefined)[],
  workers: number[],
): number | null {
  if (workers[0] === 1) return peakOverRuns(cases, probes);
  if (!workers.includes(1)) return null;
  const peaks = scaling.map((x) => x.by_workers[1]?.peak_rss_mb ?? 0);
  return peaks.length ? Math.round(Math.max(...peaks)) : null;
}

/** Duration of a load run: the 100,000-row read at 50 connections needs longer to finish any. */
/**
 * Before each run of a write case: its rolled-back rows leave dead tuples behind (tens of
 * thousands per run), and autovacuum cleaning them up during the next run would charge that run
 * (svc's or pgbench's, whichever comes next) for the previous one. Every run starts clean instead.
 */
async function vacuumFor(c: Case, sql: Client): Promise<void> {
  if (!c.rollback) return;
  await sql.simple("vacuum (analyze) invoice, invoice_line");
}

/**
 * What the case's statements cost PostgreSQL since the last reset (pg_stat_statements): svc's
 * read (the most called statement with svc's `AS "j"`: a read bounded below the row-size cap has
 * no cap's wrapper) beside the hand-written one (tagged `/*bench-<id>*\/` in pgbench's script);
 * per call, in ms.
 */
async function statementCost(sql: Client, id: string): Promise<StatementCost | null> {
  const rows = await sql.query<
    { query: string; calls: string; exec: number; plan: number }
  >(
    "select query, calls::text as calls, total_exec_time as exec, total_plan_time as plan " +
      "from pg_stat_statements where dbid = (select oid from pg_database " +
      "where datname = current_database()) and calls > 0 and " +
      "(query like '%AS \"j\"%' or query like $1) order by calls desc",
    [`/*bench-${id}*/%`],
  );
  const per = (r: { calls: string; exec: number; plan: number }) => ({
    calls: Number(r.calls),
    exec_ms: Number(r.exec) / Number(r.calls),
    plan_ms: Number(r.plan) / Number(r.calls),
  });
  const svcRow = rows.find((r) => r.query.includes('AS "j"'));
  const handRow = rows.find((r) => r.query.startsWith(`/*bench-${id}*/`));
  if (!svcRow || !handRow) return null;
  const svc = per(svcRow);
  const hand = per(handRow);
  return {
    svc: { ...svc, query: svcRow.query.slice(0, 4000) },
    hand,
    exec_ratio: svc.exec_ms / hand.exec_ms,
    total_ratio: (svc.exec_ms + svc.plan_ms) / (hand.exec_ms + hand.plan_ms),
  };
}

function durationFor(c: Case, conns: number, base: number): number {
  return c.id === "big_read" && conns >= 50 ? base * 2 : base;
}

async function main(): Promise<Report> {
  const busyAtStart = await busyProcesses(new Set());
  if (busyAtStart.length) {
    problems.push(
      `other processes were using CPU when the bench started (numbers may be skewed; % of a core over 1 s): ${
        busyAtStart.join(" | ")
      }`,
    );
  }
  const wrkVersion = await ensureWrk(log);
  const useWrk = wrkVersion !== null;
  if (!useWrk) problems.push("wrk could not be installed; autocannon was used instead");
  const pgBin = findPgBin();
  if (!pgBin) throw new Error("PostgreSQL binaries not found");
  const wantPeer = !flags["no-peer"];
  if (wantPeer) await ensurePeer(log);

  log("starting PostgreSQL");
  cluster = await startCluster();
  // pg_stat_statements: what each read costs PostgreSQL, svc's statement beside the hand-written
  // one (execution and planning time per call).
  let statStatements = false;
  try {
    await cluster.psql("alter system set shared_preload_libraries = 'pg_stat_statements'");
    await cluster.ctl(["restart", "-m", "fast", "-w"]);
    // Known once the library is loaded.
    await cluster.psql(
      "alter system set pg_stat_statements.track_planning = on;\nselect pg_reload_conf();",
    );
    statStatements = true;
  } catch (e) {
    problems.push(`pg_stat_statements unavailable: ${(e as Error).message.slice(0, 200)}`);
  }
  log(`loading Chinook ×${SCALE}`);
  const { uri, counts } = await loadScaledChinook(cluster, "bench", SCALE);
  if (statStatements) {
    try {
      await cluster.psql("create extension if not exists pg_stat_statements", "bench");
    } catch (e) {
      statStatements = false;
      problems.push(`pg_stat_statements unavailable: ${(e as Error).message.slice(0, 200)}`);
    }
  }
  const pgVersion = (await cluster.psql("\\pset tuples_only on\nselect version();", "bench"))
    .trim();
  const postmaster = Number(
    Deno.readTextFileSync(`${cluster.dir}/data/postmaster.pid`).split("\n")[0],
  );

  const wellknownDir = `${RUN_DIR}/wellknown`;
  Deno.mkdirSync(wellknownDir);
  Deno.writeTextFileSync(
    `${wellknownDir}/${WELLKNOWN_FILE.name}.json`,
    JSON.stringify(WELLKNOWN_FILE, null, 2),
  );
  const secretsDir = `${RUN_DIR}/secrets`;
  Deno.mkdirSync(secretsDir);
  log("starting svc");
  svc = await startSvc({
    pgUri: uri,
    denoArgs: SVC_DENO_ARGS,
    poolSize: POOL,
    wellknownDir,
    secretsDir,
    logFile: `${RUN_DIR}/svc.log`,
    flags: [`--http.workers=${WORKERS[0]}`],
  });
  const svcUrl = `${svc.url}/svc`;
  const svcPid = svc.pid;
  const rssAtStart = readMem(svcPid).rss_mb;
  log(`svc pid ${svcPid} at ${svc.url}; RSS ${rssAtStart.toFixed(1)} MiB`);

  const sql = new Client(uri);
  const cases: CaseResult[] = [];
  const pgbenchBase = {
    pgbench: `${pgBin}/pgbench`,
    host: "127.0.0.1",
    port: cluster.port,
    user: "postgres",
    database: "bench",
    logDir: `${RUN_DIR}/pgbench`,
  };
  const selected = CASES.filter((x) => CASE_IDS.includes(x.id));

  try {
    // The 100,000-row probe first, on a fresh svc: its RSS growth is then not hidden by a heap
    // that earlier load already grew. A few small reads warm svc up first; none is the
    // 100,000-row statement itself, so PostgreSQL's plan cache for it starts cold, as for the
    // first export a client asks for.
    let big: BigProbe | undefined;
    const bigCase = selected.find((c) => c.id === "big_read");
    if (bigCase) {
      for (const c of CASES.filter((x) => x.id === "pk_read" || x.id === "nested_read")) {
        for (let i = 0; i < 20; i++) await post(svcUrl, JSON.stringify(c.body)).catch(() => {});
      }
      log(`100,000-row probe: ${PROBE_REQUESTS} sequential requests (first byte, total, RSS)`);
      big = await probeBig(svcUrl, JSON.stringify(bigCase.body), svcPid, PROBE_REQUESTS);
      log(
        `  status ${big.status}, ${big.bytes} bytes, first byte ${
          big.ttfb_ms.map((x) => x.toFixed(0))
        } ms, total ${big.total_ms.map((x) => x.toFixed(0))} ms, RSS ${
          big.baseline_rss_mb.toFixed(0)
        } → ${big.peak_rss_mb.toFixed(0)} MiB`,
      );
    }

    // One row that multiplies: genre 1 → 1,297 tracks → their genre → 1,297 tracks each
    // (1.7 M track objects, ≈ 600 MB of JSON). svc's client refuses the row over
    // pg.query.max_row_size from its header and skips its bytes as they arrive; svc's RSS must
    // stay flat (issue: +580 MiB before).
    let amplification: BigProbe | undefined;
    if (selected.some((c) => c.id === "big_read")) {
      log("amplification probe: one oversized row (expect 400 QUERY_RESULT_TOO_LARGE, flat RSS)");
      amplification = await probeBig(svcUrl, JSON.stringify(AMPLIFICATION), svcPid, 1);
      log(
        `  status ${amplification.status}, ${
          amplification.total_ms.map((x) => x.toFixed(0))
        } ms, RSS ${amplification.baseline_rss_mb.toFixed(0)} → ${
          amplification.peak_rss_mb.toFixed(0)
        } MiB`,
      );
    }

    let wideBatch: BigProbe | undefined;
    if (CASE_IDS.includes("wide_batch")) {
      log("wide batch: 100 items × 3,503 tracks × 200 keys (≈ 2 GB streamed)");
      wideBatch = await probeBig(svcUrl, JSON.stringify(WIDE_BATCH), svcPid, 1);
      log(
        `  status ${wideBatch.status}, ${(wideBatch.bytes / 1e6).toFixed(0)} MB in ${
          wideBatch.total_ms.map((x) => (x / 1000).toFixed(1))
        } s, RSS ${wideBatch.baseline_rss_mb.toFixed(0)} → ${
          wideBatch.peak_rss_mb.toFixed(0)
        } MiB: +${wideBatch.growth_mb.toFixed(0)} MiB (limit ${WIDE_BATCH_LIMIT_MIB} MiB)`,
      );
      if (wideBatch.growth_mb >= WIDE_BATCH_LIMIT_MIB || wideBatch.status.some((x) => x !== 200)) {
        problems.push(
          `wide batch: status ${wideBatch.status}, RSS +${wideBatch.growth_mb.toFixed(0)} MiB`,
        );
      }
    }

    for (const c of selected) {
      log(`case ${c.id}: ${c.title}`);
      const bodyText = JSON.stringify(c.body);
      const bodyFile = `${RUN_DIR}/${c.id}.json`;
      Deno.writeTextFileSync(bodyFile, bodyText);
      const result: CaseResult = {
        id: c.id,
        title: c.title,
        body: c.body,
        sql: c.sql,
        verified: { ok: false, detail: "", svc_bytes: null, sql_rows: null },
        runs: [],
      };
      if (c.id === "big_read" && big) {
        result.big = big;
      }
      cases.push(result);

      // Same answer?
      let svcWorks = false;
      try {
        const expected = await sqlAnswer(sql, c);
        result.verified.sql_rows = expected.length;
        if (result.big) result.big.rows = expected.length;
        const got = await post(svcUrl, bodyText);
        result.verified.svc_bytes = new TextEncoder().encode(got.text).length;
        if (got.status !== 200) {
          result.verified.detail = `svc answered ${got.status}: ${got.text.slice(0, 300)}`;
        } else {
          svcWorks = true;
          const norm = c.normalize ?? ((x: unknown) => x);
          const diff = jsonDiff(norm(got.json), norm(expected));
          result.verified.ok = diff === null;
          result.verified.detail = diff ?? "identical";
        }
      } catch (e) {
        result.verified.detail = `error: ${(e as Error).message}`;
      }
      log(`  answer check: ${result.verified.ok ? "same answer" : result.verified.detail}`);
      if (!result.verified.ok) {
        problems.push(`${c.id}: svc's answer differs from the SQL's: ${result.verified.detail}`);
      }

      // The tag names the hand-written statement in pg_stat_statements (a comment costs nothing;
      // no colon: pgbench would take `:name` for a variable).
      const tagged = `/*bench-${c.id}*/ ${c.sql}`;
      const stmts = c.rollback
        ? ["savepoint bench", tagged, "rollback to savepoint bench"]
        : [tagged];
      if (statStatements && !c.rollback) await sql.simple("select pg_stat_statements_reset()");
      const scripts = { plain: `${RUN_DIR}/${c.id}.sql`, pipeline: `${RUN_DIR}/${c.id}.pipe.sql` };
      for (const [kind, file] of Object.entries(scripts)) {
        Deno.writeTextFileSync(
          file,
          pgbenchScript(stmts, { role: ROLE, claims: CLAIMS, pipeline: kind === "pipeline" }),
        );
      }

      if (svcWorks && WARMUP > 0) {
        const connections = Math.min(10, Math.max(...CONNS));
        await http({ url: svcUrl, bodyFile, connections, duration: WARMUP }, useWrk)
          .catch(() => {});
      }
      for (const conns of CONNS) {
        const duration = durationFor(c, conns, DURATION);
        const row: RunRow = {
          connections: conns,
          duration_s: duration,
          svc: null,
          svc_peak_rss_mb: null,
          svc_cpu: null,
          pgbench: null,
          pgbench_cpu: null,
          pgbench_pipeline: null,
          ratio: null,
          ratio_pipeline: null,
        };
        result.runs.push(row);
        // The write case at 10 connections: PostgreSQL's time per statement, svc's and pgbench's.
        const perStatement = c.rollback && conns === 10;
        if (perStatement) row.statements = { svc: null, pgbench: null };
        if (svcWorks) {
          await vacuumFor(c, sql);
          if (perStatement) await resetStatements(sql);
          try {
            const { value: { value, peak }, cpu } = await withCpu(
              svcPid,
              postmaster,
              () =>
                withPeak(
                  svcPid,
                  () => http({ url: svcUrl, bodyFile, connections: conns, duration }, useWrk),
                ),
            );
            row.svc = value;
            row.svc_peak_rss_mb = peak;
            row.svc_cpu = cpu;
            if (perStatement) {
              row.statements!.svc = await readStatements(sql, "bench", value.requests);
              for (const l of formatStatements("  svc statements", row.statements!.svc)) log(l);
            }
          } catch (e) {
            row.svc_error = (e as Error).message;
          }
          if (svc.exited()) {
            throw new Error(`svc exited during ${c.id}:\n${svc.output().slice(-3000)}`);
          }
        } else {
          row.svc_error = "not run: svc does not answer this case";
        }
        const pgb = (o: Partial<PgbenchRun> & { scriptFile: string; pipeline: boolean }) =>
          pgbench({ ...pgbenchBase, clients: conns, duration, ...o });
        try {
          await vacuumFor(c, sql);
          if (perStatement) await resetStatements(sql);
          const plain = await withCpu(
            null,
            postmaster,
            () => pgb({ scriptFile: scripts.plain, pipeline: false }),
          );
          row.pgbench = plain.value;
          row.pgbench_cpu = plain.cpu;
          if (perStatement) {
            const st: StatementsPerRequest = await readStatements(
              sql,
              "bench",
              plain.value.transactions,
            );
            row.statements!.pgbench = st;
            for (const l of formatStatements("  pgbench statements", st)) log(l);
          }
          if (PIPE_DURATION > 0) {
            await vacuumFor(c, sql);
            row.pgbench_pipeline = await pgb({
              scriptFile: scripts.pipeline,
              pipeline: true,
              duration: durationFor(c, conns, PIPE_DURATION),
            });
          }
        } catch (e) {
          row.pgbench_error = (e as Error).message.slice(0, 500);
          problems.push(`${c.id} c=${conns}: pgbench failed: ${row.pgbench_error}`);
        }
        const rate = (p: PgbenchResult | null) =>
          row.svc && p && p.tps > 0 && row.svc.requests > 0 ? row.svc.rps / p.tps : null;
        row.ratio = rate(row.pgbench);
        row.ratio_pipeline = rate(row.pgbench_pipeline);
        log(
          `  c=${String(conns).padStart(2)}: svc ${row.svc?.rps.toFixed(0) ?? "–"} req/s (p50 ${
            row.svc?.p50_ms?.toFixed(2) ?? "–"
          } p99 ${row.svc?.p99_ms?.toFixed(2) ?? "–"} ms, RSS ${
            row.svc_peak_rss_mb?.toFixed(0) ?? "–"
          } MiB, CPU svc ${row.svc_cpu?.server ?? "–"}% pg ${row.svc_cpu?.postgres ?? "–"}% other ${
            row.svc_cpu?.other ?? "–"
          }%) | pgbench ${row.pgbench?.tps.toFixed(0) ?? "–"} tps, pipelined ${
            row.pgbench_pipeline?.tps.toFixed(0) ?? "–"
          } | ratio ${row.ratio?.toFixed(2) ?? "–"} / ${row.ratio_pipeline?.toFixed(2) ?? "–"}`,
        );
        if (row.svc && row.svc.requests === 0) {
          problems.push(`${c.id} c=${conns}: no svc request completed within ${duration} s`);
        }
        if (row.svc && row.svc.non2xx > 0) {
          const sample = await post(svcUrl, bodyText).catch(() => null);
          problems.push(
            `${c.id} c=${conns}: ${row.svc.non2xx} of ${row.svc.requests} svc responses were not 2xx` +
              (sample && sample.status !== 200
                ? ` (e.g. ${sample.status} ${sample.text.slice(0, 200)})`
                : ""),
          );
        }
        if (row.svc && row.svc.socket_errors > 0) {
          problems.push(
            `${c.id} c=${conns}: ${row.svc.socket_errors} socket errors/timeouts against svc`,
          );
        }
      }
      if (statStatements && !c.rollback) {
        try {
          result.statement_cost = await statementCost(sql, c.id);
          const sc = result.statement_cost;
          if (sc) {
            log(
              `  PostgreSQL per call (pg_stat_statements): svc ${sc.svc.exec_ms.toFixed(3)} ms ` +
                `exec + ${sc.svc.plan_ms.toFixed(3)} plan, hand-written ${
                  sc.hand.exec_ms.toFixed(3)
                } + ${sc.hand.plan_ms.toFixed(3)}: ratio ${sc.exec_ratio.toFixed(2)} (exec), ${
                  sc.total_ratio.toFixed(2)
                } (exec + plan)`,
            );
          }
        } catch (e) {
          problems.push(`${c.id}: pg_stat_statements: ${(e as Error).message.slice(0, 200)}`);
        }
      }
    }

    // Scaling: every case again against svc with each other worker count (same data, same
    // pgbench figures), so 1 and 2 workers are compared within one run.
    // What the reads' SQL costs PostgreSQL in CPU per execution, svc's beside the hand-written
    // (bench/lib/read_cost.ts): the nested read's target; pg_stat_statements' wall time per call
    // under load (each case's statement_cost) counts a backend waiting for a core.
    let readCost: ReadCost[] | undefined;
    const costIds = ["pk_read", "nested_read", "wellknown"].filter((id) => CASE_IDS.includes(id));
    if (costIds.length) {
      log(`read cost: PostgreSQL CPU per execution, ${READ_COST_ROUNDS} interleaved rounds`);
      try {
        readCost = await measureReadCost(uri, costIds, {
          rounds: READ_COST_ROUNDS,
          connections: 3,
          statements: statStatements,
        });
        for (const c of readCost) {
          log(`  ${c.case} ${c.statement}: ${c.cpu_us.toFixed(1)} µs, ×${c.ratio.toFixed(2)}`);
        }
      } catch (e) {
        problems.push(`read cost: ${(e as Error).message.slice(0, 200)}`);
      }
    }

    const scaling: ScalingRow[] = [];
    for (const c of cases) {
      for (const r of c.runs) {
        scaling.push({
          case: c.id,
          connections: r.connections,
          by_workers: {
            [WORKERS[0]]: {
              rps: r.svc?.rps ?? null,
              p99_ms: r.svc?.p99_ms ?? null,
              peak_rss_mb: r.svc_peak_rss_mb,
              cpu_svc: r.svc_cpu?.server ?? null,
              ratio: r.ratio,
            },
          },
        });
      }
    }
    for (const w of WORKERS.slice(1)) {
      log(`scaling: svc with http.workers=${w}`);
      const other = await startSvc({
        pgUri: uri,
        denoArgs: SVC_DENO_ARGS,
        poolSize: POOL,
        wellknownDir,
        secretsDir,
        logFile: `${RUN_DIR}/svc-workers-${w}.log`,
        flags: [`--http.workers=${w}`],
      });
      try {
        for (const c of cases) {
          if (c.id === "big_read" || !c.verified.ok) continue;
          const bodyFile = `${RUN_DIR}/${c.id}.json`;
          const url = `${other.url}/svc`;
          if (WARMUP > 0) {
            await http({ url, bodyFile, connections: 10, duration: WARMUP }, useWrk)
              .catch(() => {});
          }
          for (const r of c.runs) {
            const conns = r.connections;
            const duration = durationFor(CASES.find((x) => x.id === c.id)!, conns, DURATION);
            const row = scaling.find((x) => x.case === c.id && x.connections === conns)!;
            await vacuumFor(CASES.find((x) => x.id === c.id)!, sql);
            try {
              const { value: { value, peak }, cpu } = await withCpu(
                other.pid,
                postmaster,
                () =>
                  withPeak(
                    other.pid,
                    () => http({ url, bodyFile, connections: conns, duration }, useWrk),
                  ),
              );
              const tps = r.pgbench?.tps ?? 0;
              row.by_workers[w] = {
                rps: value.rps,
                p99_ms: value.p99_ms ?? null,
                peak_rss_mb: peak,
                cpu_svc: cpu.server,
                ratio: tps > 0 ? value.rps / tps : null,
              };
              log(
                `  ${c.id} c=${String(conns).padStart(2)}: ${value.rps.toFixed(0)} req/s ` +
                  `(p99 ${value.p99_ms?.toFixed(2) ?? "–"} ms, RSS ${peak.toFixed(0)} MiB, ` +
                  `CPU svc ${cpu.server}%) ratio ${row.by_workers[w].ratio?.toFixed(2) ?? "–"}`,
              );
            } catch (e) {
              problems.push(`scaling ${c.id} c=${conns} workers=${w}: ${(e as Error).message}`);
            }
          }
        }
      } finally {
        await other.stop();
      }
    }

    // Metrics cost (issue: metrics must cost < 3%): svc CPU time per primary-key read at 10
    // connections, a svc with http.metrics.enable=true against a second svc with
    // http.metrics.enable=false (the default), in alternating rounds (the order swaps every
    // round) so that drift and other load on the machine hit both alike; the cost is the median
    // of the per-round ratios. CPU per request, not throughput: throughput on a shared machine swings
    // far more than 3% between rounds.
    let metricsCost: Report["metrics_cost"];
    const pk = selected.find((c) => c.id === "pk_read");
    if (pk) {
      const ROUNDS = 11;
      const d = Math.max(3, Math.round(DURATION / 3));
      log(`metrics cost: pk_read at 10 connections, metrics on vs off, ${ROUNDS} rounds × ${d} s`);
      // Two fresh processes alike but for the switch (the main svc's heap and JIT carry every
      // earlier case), one worker each so that one thread's cost is compared.
      const variant = (enable: boolean) =>
        startSvc({
          pgUri: uri,
          denoArgs: SVC_DENO_ARGS,
          poolSize: POOL,
          wellknownDir,
          secretsDir,
          logFile: `${RUN_DIR}/svc-metrics-${enable ? "on" : "off"}.log`,
          flags: [`--http.metrics.enable=${enable}`, "--http.workers=1"],
        });
      const on = await variant(true);
      const off = await variant(false);
      try {
        const bodyFile = `${RUN_DIR}/pk_read.json`;
        const runs = {
          on: { url: `${on.url}/svc`, pid: on.pid, cpu: [] as number[], rps: [] as number[] },
          off: { url: `${off.url}/svc`, pid: off.pid, cpu: [] as number[], rps: [] as number[] },
        };
        if (WARMUP > 0) {
          for (const x of [runs.on, runs.off]) {
            await http({ url: x.url, bodyFile, connections: 10, duration: WARMUP }, useWrk);
          }
        }
        for (let round = 0; round < ROUNDS; round++) {
          for (const k of round % 2 ? ["off", "on"] as const : ["on", "off"] as const) {
            const x = runs[k];
            const c0 = cpuMs(x.pid) ?? NaN;
            const r = await http({ url: x.url, bodyFile, connections: 10, duration: d }, useWrk);
            const c1 = cpuMs(x.pid) ?? NaN;
            x.cpu.push(r.requests > 0 ? (c1 - c0) / r.requests : NaN);
            x.rps.push(r.rps);
          }
        }
        const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
        const q = (xs: number[], p: number) => sorted(xs)[Math.round((xs.length - 1) * p)];
        const costs = runs.on.cpu.map((on, i) => (on / runs.off.cpu[i] - 1) * 100);
        metricsCost = {
          rounds: ROUNDS,
          duration_s: d,
          cpu_ms_per_request_on: runs.on.cpu,
          cpu_ms_per_request_off: runs.off.cpu,
          rps_on: runs.on.rps,
          rps_off: runs.off.rps,
          median_on: q(runs.on.cpu, 0.5),
          median_off: q(runs.off.cpu, 0.5),
          cost_pct_rounds: costs,
          cost_pct: q(costs, 0.5),
          cost_pct_q1: q(costs, 0.25),
          cost_pct_q3: q(costs, 0.75),
        };
        log(
          `  svc CPU per request: metrics on ${metricsCost.median_on.toFixed(4)} ms, off ${
            metricsCost.median_off.toFixed(4)
          } ms: cost ${metricsCost.cost_pct.toFixed(1)}% (quartiles ${
            metricsCost.cost_pct_q1.toFixed(1)
          }…${metricsCost.cost_pct_q3.toFixed(1)}%)`,
        );
      } finally {
        await off.stop();
        await on.stop();
      }
    }

    // The floor (bench/floor.ts): each read with a `floorSql` (the primary-key read, the nested
    // read) answered by Deno.serve and raw PostgreSQL sockets, no driver (statements prepared at
    // connect, one write per request, the rows' JSON bytes copied into the response). Compared
    // with a fresh one-worker svc in alternating rounds at each concurrency: req/s and process CPU
    // per request, svc ÷ floor.
    /** One read against the floor: alternating rounds at each concurrency. */
    const floorCase = async (fc: Case, ROUNDS: number, d: number): Promise<FloorCase> => {
      const floor = await startFloor({
        pgPort: cluster!.port,
        database: "bench",
        poolSize: POOL,
        sql: fc.floorSql!,
        role: ROLE,
        claims: CLAIMS,
        logFile: `${RUN_DIR}/floor-${fc.id}.log`,
      });
      const one = await startSvc({
        pgUri: uri,
        denoArgs: SVC_DENO_ARGS,
        poolSize: POOL,
        wellknownDir,
        secretsDir,
        logFile: `${RUN_DIR}/svc-floor-${fc.id}.log`,
        flags: ["--http.workers=1"],
      });
      try {
        const bodyFile = `${RUN_DIR}/${fc.id}.json`;
        const bodyText = JSON.stringify(fc.body);
        const fa = await post(`${floor.url}/svc`, bodyText);
        const sa = await post(`${one.url}/svc`, bodyText);
        const diff = jsonDiff(fa.json, sa.json);
        if (diff !== null) problems.push(`floor ${fc.id}: its answer differs from svc's: ${diff}`);
        const x = {
          floor: { url: `${floor.url}/svc`, pid: floor.pid },
          svc: { url: `${one.url}/svc`, pid: one.pid },
        };
        if (WARMUP > 0) {
          for (const t of Object.values(x)) {
            await http({ url: t.url, bodyFile, connections: 10, duration: WARMUP }, useWrk);
          }
        }
        const med = (xs: number[]) => {
          const v = [...xs].filter(Number.isFinite).sort((a, b) => a - b);
          return v.length ? v[(v.length - 1) >> 1] : null;
        };
        const rows: FloorRow[] = [];
        for (const conns of CONNS) {
          const got = {
            floor: { us: [] as number[], rps: [] as number[] },
            svc: { us: [] as number[], rps: [] as number[] },
          };
          for (let round = 0; round < ROUNDS; round++) {
            for (const k of round % 2 ? ["svc", "floor"] as const : ["floor", "svc"] as const) {
              const c0 = cpuMs(x[k].pid) ?? NaN;
              const r = await http(
                { url: x[k].url, bodyFile, connections: conns, duration: d },
                useWrk,
              );
              const c1 = cpuMs(x[k].pid) ?? NaN;
              got[k].us.push(r.requests > 0 && !r.non2xx ? ((c1 - c0) * 1000) / r.requests : NaN);
              got[k].rps.push(r.non2xx ? NaN : r.rps);
            }
          }
          const per = (f: (i: number) => number) => med(got.svc.rps.map((_, i) => f(i)));
          const row: FloorRow = {
            connections: conns,
            svc_rps: med(got.svc.rps),
            floor_rps: med(got.floor.rps),
            svc_cpu_us: med(got.svc.us),
            floor_cpu_us: med(got.floor.us),
            rps_ratio: per((i) => got.svc.rps[i] / got.floor.rps[i]),
            cpu_ratio: per((i) => got.floor.us[i] / got.svc.us[i]),
            rounds: {
              svc_rps: got.svc.rps,
              floor_rps: got.floor.rps,
              svc_cpu_us: got.svc.us,
              floor_cpu_us: got.floor.us,
            },
          };
          rows.push(row);
          log(
            `  c=${String(conns).padStart(2)}: svc ${row.svc_rps?.toFixed(0)} req/s ` +
              `${row.svc_cpu_us?.toFixed(1)} µs CPU/req | floor ${
                row.floor_rps?.toFixed(0)
              } req/s ` +
              `${row.floor_cpu_us?.toFixed(1)} µs CPU/req | svc ÷ floor: req/s ${
                row.rps_ratio?.toFixed(2)
              }, CPU efficiency ${row.cpu_ratio?.toFixed(2)}`,
          );
        }
        return { id: fc.id, verified: diff === null, rows };
      } finally {
        await one.stop();
        await floor.stop();
      }
    };
    let floorReport: Report["floor"];
    const floorCases = selected.filter((c) => c.floorSql !== undefined);
    if (floorCases.length > 0) {
      const ROUNDS = 5;
      const d = Math.max(3, Math.round(DURATION / 2));
      const done: FloorCase[] = [];
      for (const fc of floorCases) {
        log(`floor: ${fc.id}, bench/floor.ts vs a one-worker svc, ${ROUNDS} rounds × ${d} s`);
        done.push(await floorCase(fc, ROUNDS, d));
      }
      floorReport = { rounds: ROUNDS, duration_s: d, cases: done };
    }

    let peerReport: Report["peer"] = null;
    const nested = cases.find((c) => c.id === "nested_read");
    if (wantPeer && nested) {
      log("starting PostGraphile");
      try {
        const started = await startPeer({
          pgUri: uri,
          poolSize: POOL,
          logFile: `${RUN_DIR}/postgraphile.log`,
        });
        peer = started.child;
        const peerPid = peer.pid;
        const gqlUrl = `${peer.url}/graphql`;
        const gqlBody = JSON.stringify({ query: NESTED_READ_GRAPHQL });
        const gqlFile = `${RUN_DIR}/nested_read.graphql.json`;
        Deno.writeTextFileSync(gqlFile, gqlBody);
        const verified = { ok: false, detail: "" };
        const got = await post(gqlUrl, gqlBody);
        const expected = await sqlAnswer(sql, CASES.find((c) => c.id === "nested_read")!);
        if (got.status !== 200 || (got.json as { errors?: unknown })?.errors) {
          verified.detail = `PostGraphile answered ${got.status}: ${got.text.slice(0, 300)}`;
        } else {
          const diff = jsonDiff(graphqlToSvcShape(got.json), expected);
          verified.ok = diff === null;
          verified.detail = diff ?? "identical";
        }
        log(
          `  PostGraphile (${started.runtime}) answer check: ${
            verified.ok ? "same answer" : verified.detail
          }`,
        );
        if (!verified.ok) problems.push(`PostGraphile's answer differs: ${verified.detail}`);
        peerReport = {
          name: "PostGraphile 5.1.5 (amber preset)",
          runtime: started.runtime,
          graphql: NESTED_READ_GRAPHQL,
          verified,
          runs: [],
        };
        if (WARMUP > 0) {
          const connections = Math.min(10, Math.max(...CONNS));
          await http({ url: gqlUrl, bodyFile: gqlFile, connections, duration: WARMUP }, useWrk)
            .catch(() => {});
        }
        for (const conns of CONNS) {
          const svcRps = nested.runs.find((x) => x.connections === conns)?.svc?.rps ?? null;
          const row: PeerRow = {
            connections: conns,
            peer: null,
            peer_peak_rss_mb: null,
            peer_cpu: null,
            svc_rps: svcRps,
            ratio: null,
          };
          try {
            const { value: { value, peak }, cpu } = await withCpu(
              peerPid,
              postmaster,
              () =>
                withPeak(
                  peerPid,
                  () =>
                    http({
                      url: gqlUrl,
                      bodyFile: gqlFile,
                      connections: conns,
                      duration: DURATION,
                    }, useWrk),
                ),
            );
            row.peer = value;
            row.peer_peak_rss_mb = peak;
            row.peer_cpu = cpu;
            row.ratio = svcRps !== null && value.rps > 0 ? svcRps / value.rps : null;
          } catch (e) {
            row.peer_error = (e as Error).message.slice(0, 300);
          }
          peerReport.runs.push(row);
          log(
            `  c=${String(conns).padStart(2)}: PostGraphile ${
              row.peer?.rps.toFixed(0) ?? "–"
            } req/s (p50 ${row.peer?.p50_ms?.toFixed(2) ?? "–"} p99 ${
              row.peer?.p99_ms?.toFixed(2) ?? "–"
            } ms, CPU server ${row.peer_cpu?.server ?? "–"}% pg ${
              row.peer_cpu?.postgres ?? "–"
            }%), svc ÷ PostGraphile ${row.ratio?.toFixed(2) ?? "–"}`,
          );
          if (row.peer?.non2xx) {
            problems.push(`PostGraphile c=${conns}: ${row.peer.non2xx} non-2xx responses`);
          }
        }
      } catch (e) {
        problems.push(`PostGraphile could not be run: ${(e as Error).message.slice(0, 500)}`);
        log(`PostGraphile failed: ${(e as Error).message}`);
      } finally {
        await peer?.stop();
        peer = null;
      }
    }

    // What svc logged at level error during the run.
    const errorLines = svc.output().split("\n").filter((l) => l.trim());
    if (errorLines.length) {
      problems.push(
        `svc logged ${errorLines.length} line(s) at level error (bench/.data/run/svc.log), ` +
          `first: ${errorLines[0].slice(0, 300)}`,
      );
    }
    const busyAtEnd = await busyProcesses(
      new Set([svcPid, postmaster, ...childrenOf(postmaster)]),
    );
    if (busyAtEnd.length) {
      problems.push(
        `other processes were using CPU when the bench ended: ${busyAtEnd.join(" | ")}`,
      );
    }

    const rssEnd = readMem(svcPid);
    const probes = [big, amplification, wideBatch];
    const partial: Omit<Report, "targets"> = {
      generated_at: new Date().toISOString(),
      duration_s: (performance.now() - t0) / 1000,
      machine: { ...machineInfo(wrkVersion), postgres: pgVersion.replace(/ on .*$/, "") },
      config: {
        svc_version: svcVersion(),
        scale: SCALE,
        connections: CONNS,
        http_duration_s: DURATION,
        pgbench_duration_s: DURATION,
        pgbench_pipelined_duration_s: PIPE_DURATION,
        big_read_duration_at_50: "2× the above",
        warmup_s: WARMUP,
        wrk: "-t min(2, conns) -c conns --latency --timeout 30s -s bench/wrk/post.lua",
        pgbench: "-n -M prepared -c conns -j min(2, conns) -T duration",
        svc_pool_size: POOL,
        svc_workers: WORKERS[0],
        // Read from the running process, not from --svc-v8-flags: without that option svc runs
        // with its default flags (src/process/v8_flags.ts), as `deno task start` runs it.
        svc_v8_flags: v8FlagsOf(svcPid)?.join(",") ?? null,
        peer_pool_size: POOL,
        svc_flags: "--pg.query.allow_rollback=true --pg.query.allow_sql=true " +
          "--logging.level=error",
        role: `${ROLE}, claims ${CLAIMS}`,
        // Right after start-up (health answered), before any request.
        svc_rss_at_start_mb: Math.round(rssAtStart),
        svc_rss_at_end_mb: Math.round(rssEnd.rss_mb),
        svc_peak_rss_one_worker_mb: oneWorkerPeak(cases, scaling, probes, WORKERS),
        svc_peak_rss_over_all_runs_mb: peakOverRuns(cases, probes),
      },
      data: counts,
      cases,
      amplification,
      wide_batch: wideBatch,
      metrics_cost: metricsCost,
      floor: floorReport,
      read_cost: readCost,
      scaling: { workers: WORKERS, rows: scaling },
      peer: peerReport,
      problems,
    };
    return { ...partial, targets: evaluateTargets(partial) };
  } finally {
    await sql.close(5000);
  }
}

let exitCode = 0;
try {
  const report = await main();
  const outDir = flags.out;
  Deno.mkdirSync(outDir, { recursive: true });
  Deno.writeTextFileSync(`${outDir}/latest.json`, JSON.stringify(report, null, 2) + "\n");
  Deno.writeTextFileSync(`${outDir}/latest.md`, renderMarkdown(report));
  log(`wrote ${outDir}/latest.md and latest.json`);
  for (const t of report.targets) {
    log(`target ${t.text}: ${t.met === null ? "n/a" : t.met ? "met" : "missed"}`);
  }
  for (const p of report.problems) log(`problem: ${p}`);
} catch (e) {
  console.error(e);
  exitCode = 1;
} finally {
  await cleanup();
}
Deno.exit(exitCode);
