/**
 * The benchmark report: result types, target evaluation, and the Markdown and JSON renderings
 * written to bench/results/latest.md and bench/results/latest.json.
 */
import type { HttpResult, PgbenchResult } from "./load.ts";
import type { CpuUse } from "./procs.ts";
import type { StatementsPerRequest } from "./statements.ts";

/** One concurrency level of one case. */
export interface RunRow {
  connections: number;
  duration_s: number;
  svc: HttpResult | null;
  svc_error?: string;
  /** svc's peak RSS during the run (VmHWM after a reset), MiB. */
  svc_peak_rss_mb: number | null;
  /** CPU during the svc run (% of one core). */
  svc_cpu: CpuUse | null;
  /** CPU during the (plain) pgbench run. */
  pgbench_cpu: CpuUse | null;
  /** The script as specified: begin; set_config(role, claims); sql; commit (4 round trips). */
  pgbench: PgbenchResult | null;
  /** The same script inside \startpipeline (1 round trip, as svc sends it). */
  pgbench_pipeline: PgbenchResult | null;
  pgbench_error?: string;
  /** svc req/s ÷ pgbench tps. */
  ratio: number | null;
  ratio_pipeline: number | null;
  /**
   * PostgreSQL's time per statement during the svc run and the plain pgbench run
   * (pg_stat_statements, write cases at 10 connections).
   */
  statements?: { svc: StatementsPerRequest | null; pgbench: StatementsPerRequest | null };
}

/** The single-request probe of the 100,000-row read. */
export interface BigProbe {
  requests: number;
  status: number[];
  bytes: number;
  rows: number | null;
  ttfb_ms: number[];
  total_ms: number[];
  baseline_rss_mb: number;
  peak_rss_mb: number;
  growth_mb: number;
  /** How the peak was measured. */
  peak_method: string;
}

/** The PostGraphile run of the nested read at one concurrency. */
export interface PeerRow {
  connections: number;
  peer: HttpResult | null;
  peer_error?: string;
  peer_peak_rss_mb: number | null;
  peer_cpu: CpuUse | null;
  svc_rps: number | null;
  /** svc req/s ÷ PostGraphile req/s. */
  ratio: number | null;
}

/** A case's results. */
export interface CaseResult {
  id: string;
  title: string;
  body: unknown;
  sql: string;
  /** svc's answer equals the hand-written SQL's (parsed JSON, key order ignored). */
  verified: { ok: boolean; detail: string; svc_bytes: number | null; sql_rows: number | null };
  runs: RunRow[];
  big?: BigProbe;
  /** What the case's statement cost PostgreSQL per call, svc's vs the hand-written one. */
  statement_cost?: StatementCost | null;
}

/** One target and its outcome. */
export interface Target {
  id: string;
  text: string;
  /** Per concurrency (or a single entry with connections null). */
  results: {
    connections: number | null;
    /** What the value is, when not simply the value at that concurrency. */
    label?: string;
    value: number | null;
    met: boolean | null;
  }[];
  met: boolean | null;
}

/** The whole report. */
/** One case × connections, svc's figures by worker count (`http.workers`). */
export interface ScalingRow {
  case: string;
  connections: number;
  by_workers: Record<number, {
    rps: number | null;
    p99_ms: number | null;
    peak_rss_mb: number | null;
    /** svc process CPU, % of one core. */
    cpu_svc: number | null;
    /** req/s ÷ pgbench tps of the main run. */
    ratio: number | null;
  }>;
}

/**
 * A read against the floor (bench/floor.ts) at one concurrency: medians over the alternating
 * rounds of a one-worker svc and the floor.
 */
export interface FloorRow {
  connections: number;
  svc_rps: number | null;
  floor_rps: number | null;
  /** Process CPU time per request, µs. */
  svc_cpu_us: number | null;
  floor_cpu_us: number | null;
  /** Median of the per-round svc req/s ÷ floor req/s. */
  rps_ratio: number | null;
  /** Median of the per-round floor CPU per request ÷ svc CPU per request (1: as cheap). */
  cpu_ratio: number | null;
  rounds: { svc_rps: number[]; floor_rps: number[]; svc_cpu_us: number[]; floor_cpu_us: number[] };
}

/** One read case against the floor: whether both answered the same, and a row per concurrency. */
export interface FloorCase {
  id: string;
  verified: boolean;
  rows: FloorRow[];
}

/** One read statement's cost (bench/lib/read_cost.ts): PostgreSQL's CPU per execution and pg_stat_statements' figures. */
export interface ReadCost {
  case: string;
  /** `svc`, `svc, SQL cap`, `hand-written, bound as $1` or `hand-written`. */
  statement: string;
  /** Median over the rounds of PostgreSQL's CPU µs per execution. */
  cpu_us: number;
  /** Median over the rounds of this statement's CPU ÷ the hand-written one's (same round). */
  ratio: number;
  /**
   * The same ÷ the hand-written SQL with its bound as `$1` (planned per call, as svc's statement
   * is); null for a case without one.
   */
  ratio_bound: number | null;
  /** Each round's CPU µs per execution. */
  rounds_us: number[];
  /** pg_stat_statements' mean execution and planning ms and plans per call (null: not loaded). */
  exec_ms: number | null;
  plan_ms: number | null;
  plans_per_call: number | null;
}

/** What a read case's statement costs PostgreSQL per call (pg_stat_statements), svc vs SQL. */
export interface StatementCost {
  svc: { calls: number; exec_ms: number; plan_ms: number; query: string };
  hand: { calls: number; exec_ms: number; plan_ms: number };
  /** svc's execution time per call ÷ the hand-written statement's. */
  exec_ratio: number;
  /** The same with planning time included (svc's parameters get a custom plan per call). */
  total_ratio: number;
}

export interface Report {
  generated_at: string;
  duration_s: number;
  machine: Record<string, string | number>;
  config: Record<string, unknown>;
  data: Record<string, number>;
  cases: CaseResult[];
  /** The one-oversized-row probe (pg.query.max_row_size). */
  amplification?: BigProbe;
  /** A batch of 100 wide items (≈ 2 GB streamed). */
  wide_batch?: BigProbe;
  /** Primary-key read with metrics on and off (http.metrics.enable), alternating rounds. */
  /**
   * svc CPU time per primary-key read with metrics on and off, alternating rounds at 10
   * connections; medians in ms per request, cost as the median (and quartiles) of the per-round
   * ratios on/off − 1, in percent.
   */
  metrics_cost?: {
    rounds: number;
    duration_s: number;
    cpu_ms_per_request_on: number[];
    cpu_ms_per_request_off: number[];
    rps_on: number[];
    rps_off: number[];
    median_on: number;
    median_off: number;
    cost_pct_rounds: number[];
    cost_pct: number;
    cost_pct_q1: number;
    cost_pct_q3: number;
  };
  /** The reads against the driverless floor (bench/floor.ts), one svc worker. */
  floor?: { rounds: number; duration_s: number; cases: FloorCase[] };
  /**
   * What the reads' SQL costs PostgreSQL in CPU per execution, svc's beside the hand-written
   * (bench/lib/read_cost.ts), measured after the cases on the idle cluster.
   */
  read_cost?: ReadCost[];
  /** The cases again with each other worker count (the first is the main run's). */
  scaling?: { workers: number[]; rows: ScalingRow[] };
  peer: {
    name: string;
    runtime: string;
    graphql: string;
    verified: { ok: boolean; detail: string };
    runs: PeerRow[];
  } | null;
  targets: Target[];
  problems: string[];
}

/** Evaluates the issue's targets (reported, never asserted). */
export function evaluateTargets(r: Omit<Report, "targets">): Target[] {
  const byId = (id: string) => r.cases.find((c) => c.id === id);
  const perConn = (
    id: string,
    text: string,
    caseId: string,
    value: (row: RunRow) => number | null,
    ok: (v: number) => boolean,
  ): Target => {
    const rows = byId(caseId)?.runs ?? [];
    const results = rows.map((row) => {
      const v = value(row);
      return { connections: row.connections, value: v, met: v === null ? null : ok(v) };
    });
    return { id, text, results, met: overall(results) };
  };
  const targets: Target[] = [
    perConn(
      "nested_read_vs_pgbench",
      "nested read ≥ 0.80 of pgbench",
      "nested_read",
      (x) => x.ratio,
      (v) => v >= 0.8,
    ),
    perConn(
      "pk_read_vs_pgbench",
      "primary-key read ≥ 0.7 of pgbench",
      "pk_read",
      (x) => x.ratio,
      (v) => v >= 0.7,
    ),
    perConn(
      "nested_write_vs_pgbench",
      "nested write ≥ 0.6 of pgbench",
      "nested_write",
      (x) => x.ratio,
      (v) => v >= 0.6,
    ),
  ];
  const peerRows = r.peer?.runs ?? [];
  const peerResults = peerRows.map((p) => ({
    connections: p.connections,
    value: p.ratio,
    met: p.ratio === null ? null : p.ratio >= 4,
  }));
  targets.push({
    id: "nested_read_vs_postgraphile",
    text: "nested read ≥ 4× PostGraphile",
    results: peerResults,
    met: overall(peerResults),
  });
  const pkFloor = r.floor?.cases.find((c) => c.id === "pk_read");
  const floorResults = (pkFloor?.rows ?? []).map((f) => ({
    connections: f.connections,
    value: f.rps_ratio,
    met: f.rps_ratio === null ? null : f.rps_ratio >= 0.95,
  }));
  const floor50 = floorResults.filter((f) => f.connections === 50);
  targets.push({
    id: "pk_read_vs_floor_50",
    text: "primary-key read at 50 connections ≥ 0.95 × the floor (req/s, 1 worker)",
    results: floorResults,
    met: floor50.length ? floor50[0].met : null,
  });
  const nested50 = byId("nested_read")?.runs.find((x) => x.connections === 50);
  const p99 = nested50?.svc?.p99_ms ?? null;
  targets.push({
    id: "nested_read_p99_50",
    text: "nested read p99 at 50 connections < 50 ms",
    results: [{ connections: 50, value: p99, met: p99 === null ? null : p99 < 50 }],
    met: p99 === null ? null : p99 < 50,
  });
  const big = byId("big_read")?.big;
  const growth = big ? big.growth_mb : null;
  targets.push({
    id: "big_read_rss",
    text: "100,000-row read: svc RSS growth < 64 MB",
    results: [{ connections: 1, value: growth, met: growth === null ? null : growth < 64 }],
    met: growth === null ? null : growth < 64,
  });
  // The same ratios with the scaling runs' other worker counts.
  for (const w of r.scaling?.workers.slice(1) ?? []) {
    for (
      const [id, caseId, min] of [
        ["pk_read_vs_pgbench", "pk_read", 0.7],
        ["nested_read_vs_pgbench", "nested_read", 0.8],
        ["nested_write_vs_pgbench", "nested_write", 0.6],
      ] as const
    ) {
      const results = (r.scaling?.rows ?? []).filter((x) => x.case === caseId).map((x) => {
        const v = x.by_workers[w]?.ratio ?? null;
        return { connections: x.connections, value: v, met: v === null ? null : v >= min };
      });
      targets.push({
        id: `${id}_${w}w`,
        text: `${caseId.replace("_", " ")} ≥ ${min} of pgbench with ${w} worker(s)`,
        results,
        met: overall(results),
      });
    }
  }
  const peakRss = Number(r.config.svc_peak_rss_over_all_runs_mb ?? NaN);
  const workers = Number(r.config.svc_workers ?? 1);
  const perWorker = Number.isFinite(peakRss) ? peakRss / workers : null;
  targets.push({
    id: "peak_rss_per_worker",
    text: "peak RSS per worker ≤ 150 MiB over the whole bench (process peak ÷ workers)",
    results: [{
      connections: 0,
      value: perWorker,
      met: perWorker === null ? null : perWorker <= 150,
    }],
    met: perWorker === null ? null : perWorker <= 150,
  });
  const one = r.config.svc_peak_rss_one_worker_mb;
  const onePeak = typeof one === "number" ? one : null;
  targets.push({
    id: "peak_rss_one_worker",
    text: "peak RSS of a one-worker svc ≤ 150 MiB over all its runs",
    results: [{ connections: 0, value: onePeak, met: onePeak === null ? null : onePeak <= 150 }],
    met: onePeak === null ? null : onePeak <= 150,
  });
  // PostgreSQL's CPU per execution (bench/lib/read_cost.ts); pg_stat_statements' wall time per
  // call under load (the case's statement_cost) counts a backend waiting for one of the cores.
  const cost = r.read_cost?.find((c) => c.case === "nested_read" && c.statement === "svc");
  const costRatio = cost ? cost.ratio : null;
  targets.push({
    id: "nested_read_statement_cost",
    text: "nested read: svc's statement costs PostgreSQL ≤ 1.1× the hand-written one " +
      "(PostgreSQL CPU per execution, interleaved; planning included)",
    results: [{
      connections: null,
      value: costRatio,
      met: costRatio === null ? null : costRatio <= 1.1,
    }],
    met: costRatio === null ? null : costRatio <= 1.1,
  });
  const mc = r.metrics_cost;
  targets.push({
    id: "metrics_cost",
    text: "metrics (prom-client) cost < 3% of svc CPU per primary-key read at 10 connections",
    results: [{
      connections: 10,
      value: mc ? mc.cost_pct : null,
      met: mc ? mc.cost_pct < 3 : null,
    }],
    met: mc ? mc.cost_pct < 3 : null,
  });
  const amp = r.amplification;
  const ampGrowth = amp ? amp.growth_mb : null;
  // probeBig also records -1 for a body not ending in "]": an error body never does.
  const ampOk = amp ? amp.status.filter((st) => st !== -1).every((st) => st === 400) : null;
  targets.push({
    id: "amplification_rss",
    text: "one row of 1,297² track objects: 400 QUERY_RESULT_TOO_LARGE, svc RSS growth < 200 MiB",
    results: [{
      connections: 1,
      value: ampGrowth,
      met: ampGrowth === null ? null : ampGrowth < 200 && ampOk === true,
    }],
    met: ampGrowth === null ? null : ampGrowth < 200 && ampOk === true,
  });
  const wide = r.wide_batch;
  const wideOk = wide ? wide.growth_mb < 200 && wide.status.every((st) => st === 200) : null;
  targets.push({
    id: "wide_batch_rss",
    text: "a batch of 100 items × 3,503 tracks × 200 keys (≈ 2 GB): 200, svc RSS growth < 200 MiB",
    results: [{ connections: 1, value: wide ? wide.growth_mb : null, met: wideOk }],
    met: wideOk,
  });
  const ttfb = big && big.ttfb_ms.length ? median(big.ttfb_ms) : null;
  const cold = big && big.ttfb_ms.length ? big.ttfb_ms[0] : null;
  targets.push({
    id: "big_read_ttfb",
    text: "100,000-row read: first byte < 100 ms (median of the probe's sequential requests)",
    results: [
      { connections: 1, label: "median", value: ttfb, met: ttfb === null ? null : ttfb < 100 },
      { connections: 1, label: "first, cold", value: cold, met: cold === null ? null : cold < 100 },
    ],
    met: ttfb === null ? null : ttfb < 100,
  });
  return targets;
}

function overall(results: { met: boolean | null }[]): boolean | null {
  if (results.length === 0 || results.some((x) => x.met === null)) return null;
  return results.every((x) => x.met);
}

/** Median of numbers. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const f0 = (
  v: number | null | undefined,
) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));
/** A rate: integers when large, two significant decimals when small (the 100,000-row read). */
const rate = (v: number | null | undefined) =>
  v === null || v === undefined
    ? "–"
    : v >= 100
    ? Math.round(v).toLocaleString("en-US")
    : v >= 10
    ? v.toFixed(1)
    : v.toFixed(2);
const f1 = (v: number | null | undefined) => (v === null || v === undefined ? "–" : v.toFixed(1));
const f2 = (v: number | null | undefined) => (v === null || v === undefined ? "–" : v.toFixed(2));
const ms = (v: number | null | undefined) =>
  v === null || v === undefined
    ? "–"
    : v < 10
    ? v.toFixed(2)
    : v < 100
    ? v.toFixed(1)
    : v.toFixed(0);
const mark = (m: boolean | null) => (m === null ? "n/a" : m ? "**met**" : "**missed**");

/** Renders the Markdown report. */
export function renderMarkdown(r: Report): string {
  const L: string[] = [];
  L.push("# svc benchmark — latest run", "");
  L.push(
    `Generated ${r.generated_at} by \`deno task bench\` (bench/run.ts) in ${
      Math.round(r.duration_s)
    } s. ` +
      "Everything runs on one machine over loopback: PostgreSQL, svc, the load generator, pgbench and PostGraphile share its cores. " +
      "`sched_autogroup` below is the kernel's `kernel.sched_autogroup_enabled`: when 1, every PostgreSQL backend is a scheduling group of its own, weighing as much as svc and the load generator together (docs/performance.md, \"The scheduler's session groups\").",
    "",
  );
  L.push("## Machine", "", "| | |", "|---|---|");
  for (const [k, v] of Object.entries(r.machine)) L.push(`| ${k} | ${v} |`);
  L.push("", "## Setup", "", "| | |", "|---|---|");
  for (const [k, v] of Object.entries(r.config)) {
    L.push(`| ${k} | ${typeof v === "string" ? v : JSON.stringify(v)} |`);
  }
  L.push(
    "",
    `Data: Chinook ×${r.config.scale} — ` +
      Object.entries(r.data).map(([k, v]) => `${k} ${v.toLocaleString("en-US")}`).join(", ") + ".",
    "",
  );

  L.push("## Results", "");
  L.push(
    "svc req/s from wrk; pgbench tps for the same answer's hand-written SQL inside " +
      "`begin; select set_config('role','~anonymous',true), set_config('svc.jwt.claims','null',true); …; commit` " +
      "(`-M prepared`, same number of clients). **ratio** = svc ÷ pgbench running that script as is (one round trip per " +
      "statement); **ratio (pipelined)** = svc ÷ pgbench sending the same statements in one `\\startpipeline` batch, the way svc " +
      "sends them. Latencies in ms (svc: wrk's `--latency` distribution, after wrk's coordinated-omission " +
      "correction — every request slower than twice the mean interval between one connection's requests " +
      "adds copies at its latency minus 1, 2, 3… intervals, so one pause of svc sets the p99: compare " +
      'svc max, which the correction leaves alone, and see docs/performance.md "Tail latency"; ' +
      "pgbench: its per-transaction log, uncorrected, " +
      "without the entries pgbench logs as 0 µs — its cached clock, see lib/load.ts); RSS = svc's peak " +
      "resident memory during the run.",
    "",
  );
  L.push(
    "| case | conns | svc req/s | pgbench tps | ratio | pgbench pipelined tps | ratio (pipelined) | svc p50 | svc p99 | svc max | pgbench p50 | pgbench p99 | svc RSS MiB | errors |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  );
  for (const c of r.cases) {
    for (const x of c.runs) {
      const errs: string[] = [];
      if (x.svc_error) errs.push(`svc: ${x.svc_error.slice(0, 60)}`);
      if (x.svc && x.svc.non2xx) errs.push(`${x.svc.non2xx} non-2xx`);
      if (x.svc && x.svc.socket_errors) errs.push(`${x.svc.socket_errors} socket errors`);
      if (x.pgbench_error) errs.push(`pgbench: ${x.pgbench_error.slice(0, 60)}`);
      if (x.pgbench?.failed) errs.push(`${x.pgbench.failed} pgbench failed`);
      L.push(
        `| ${c.id} | ${x.connections} | ${rate(x.svc?.rps)} | ${rate(x.pgbench?.tps)} | ${
          f2(x.ratio)
        } | ` +
          `${rate(x.pgbench_pipeline?.tps)} | ${f2(x.ratio_pipeline)} | ${ms(x.svc?.p50_ms)} | ${
            ms(x.svc?.p99_ms)
          } | ${ms(x.svc?.max_ms)} | ` +
          `${ms(x.pgbench?.p50_ms)} | ${ms(x.pgbench?.p99_ms)} | ${f0(x.svc_peak_rss_mb)} | ${
            errs.join("; ") || "none"
          } |`,
      );
    }
  }
  L.push("");
  L.push(
    "CPU during each run, in % of one core (the machine has " + r.machine.nproc + " cores): " +
      "**svc** = the svc process, **pg** = all PostgreSQL processes, **other** = everything else " +
      "(mostly the load generator itself).",
    "",
    "| case | conns | svc run: svc / pg / other | pgbench run: pg / other |",
    "|---|---:|---|---|",
  );
  const cpu = (u: CpuUse | null, server: boolean) =>
    u === null ? "–" : `${server ? `${u.server} / ` : ""}${u.postgres} / ${u.other}`;
  for (const c of r.cases) {
    for (const x of c.runs) {
      L.push(
        `| ${c.id} | ${x.connections} | ${cpu(x.svc_cpu, true)} | ${cpu(x.pgbench_cpu, false)} |`,
      );
    }
  }
  L.push("");
  const withStatements = r.cases.flatMap((c) =>
    c.runs.filter((x) => x.statements).map((x) => ({ c, x }))
  );
  for (const { c, x } of withStatements) {
    L.push(
      `## PostgreSQL time per statement: ${c.id}, ${x.connections} connections`,
      "",
      "From `pg_stat_statements` (reset before each run): execution and planning time of each " +
        "statement divided by the requests (svc) or transactions (pgbench) of the run, in µs. " +
        "Wall time inside PostgreSQL, so waiting for a core on a loaded machine counts too; " +
        "compare the two sides' shares rather than absolute figures.",
      "",
      "| side | µs per request | calls per request | plans | statement |",
      "|---|---:|---:|---:|---|",
    );
    for (
      const [side, st] of [["svc", x.statements!.svc], ["pgbench", x.statements!.pgbench]] as const
    ) {
      if (!st) continue;
      for (const s of st.statements) {
        L.push(
          `| ${side} | ${(s.exec_us_per_request + s.plan_us_per_request).toFixed(1)} | ${
            (s.calls / Math.max(1, st.requests)).toFixed(2)
          } | ${s.plans} | \`${s.query.replaceAll("|", "\\|").replaceAll("`", "'")}\` |`,
        );
      }
      L.push(`| ${side} | **${st.total_us_per_request.toFixed(1)}** | | | all statements |`);
    }
    L.push("");
  }

  if (r.read_cost?.length) {
    L.push("## What each read costs PostgreSQL (CPU per execution)", "");
    L.push(
      "bench/lib/read_cost.ts after the cases, on the idle cluster: each statement prepared on " +
        "3 backends of its own as svc's anonymous role (svc's with its values bound, so a custom " +
        "plan per call; the hand-written one with literals, planned once), executions " +
        "interleaved five at a time, each backend's CPU time from /proc/<pid>/schedstat; " +
        "medians over the rounds. Ratio = this statement ÷ the hand-written one in the same " +
        "round; **÷ bound** = this statement ÷ the hand-written SQL with its bound as `$1` bound " +
        "as svc binds it (planned per call as svc's is: the cost of svc's SQL itself, without " +
        "the planning the literals save); exec and plan ms from pg_stat_statements over the same " +
        "executions.",
      "",
      "| case | statement | PostgreSQL CPU µs per execution | ratio | ÷ bound | exec ms | plan ms | plans per call |",
      "|---|---|---:|---:|---:|---:|---:|---:|",
    );
    const n = (v: number | null, d: number) => (v === null ? "–" : v.toFixed(d));
    for (const c of r.read_cost) {
      L.push(
        `| ${c.case} | ${c.statement} | ${c.cpu_us.toFixed(1)} | ${f2(c.ratio)} | ${
          f2(c.ratio_bound)
        } | ${n(c.exec_ms, 3)} | ${n(c.plan_ms, 3)} | ${n(c.plans_per_call, 2)} |`,
      );
    }
    L.push("");
  }

  const costs = r.cases.filter((c) => c.statement_cost);
  if (costs.length) {
    L.push("## What each read costs PostgreSQL under load (pg_stat_statements)", "");
    L.push(
      "Per call, over the case's svc and pgbench runs: svc's statement (its prepared read, " +
        "parameters bound: a custom plan per call) beside the hand-written SQL (literals, planned " +
        "once by pgbench's prepared statement). Ratio = svc ÷ hand-written. Wall time: a backend " +
        "waiting for a core counts, and svc's runs leave PostgreSQL less of the machine than " +
        "pgbench's; the CPU measure above is the target's.",
      "",
      "| case | svc exec ms | svc plan ms | SQL exec ms | SQL plan ms | ratio (exec) | ratio (exec + plan) |",
      "|---|---:|---:|---:|---:|---:|---:|",
    );
    const f3 = (v: number) => v.toFixed(3);
    for (const c of costs) {
      const x = c.statement_cost!;
      L.push(
        `| ${c.id} | ${f3(x.svc.exec_ms)} | ${f3(x.svc.plan_ms)} | ${f3(x.hand.exec_ms)} | ${
          f3(x.hand.plan_ms)
        } | ${f2(x.exec_ratio)} | ${f2(x.total_ratio)} |`,
      );
    }
    L.push("");
  }

  if (r.floor) {
    L.push("## Floor: the reads without svc", "");
    const same = r.floor.cases.map((c) => `${c.id} ${c.verified ? "yes" : "**no**"}`).join(", ");
    L.push(
      "bench/floor.ts answers the same request with Deno.serve and raw PostgreSQL sockets, no " +
        "driver: JSON.parse of the body, the same begin / role switch / query / commit prepared at " +
        "connect and sent in one write (the request's bound as `$1`, as svc binds it), the rows' " +
        "JSON bytes copied into the response — nothing else (no validation, compilation, " +
        "sessions, metrics or error mapping). Against a fresh one-worker svc, " +
        `${r.floor.rounds} alternating rounds × ${r.floor.duration_s} s per case and ` +
        `concurrency; medians. Same answer: ${same}. CPU = the process's CPU time per request; ` +
        "**CPU efficiency** = floor ÷ svc (1: as cheap as the floor); **floor ÷ pgbench** = the " +
        "floor's req/s ÷ pgbench's tps of the results above (what a Deno service doing nothing " +
        "more reaches on the machine). The machine is shared: figures move between runs.",
      "",
      "| case | conns | svc req/s | floor req/s | svc ÷ floor (req/s) | svc µs CPU/req | floor µs CPU/req | CPU efficiency | floor ÷ pgbench |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    );
    for (const c of r.floor.cases) {
      const main = r.cases.find((x) => x.id === c.id);
      for (const f of c.rows) {
        const tps = main?.runs.find((x) => x.connections === f.connections)?.pgbench?.tps;
        const vsPg = f.floor_rps !== null && tps ? f.floor_rps / tps : null;
        L.push(
          `| ${c.id} | ${f.connections} | ${rate(f.svc_rps)} | ${rate(f.floor_rps)} | ${
            f2(f.rps_ratio)
          } | ${f0(f.svc_cpu_us)} | ${f0(f.floor_cpu_us)} | ${f2(f.cpu_ratio)} | ${f2(vsPg)} |`,
        );
      }
    }
    L.push("");
  }

  if (r.peer) {
    L.push(`## Peer: nested read against ${r.peer.name} (${r.peer.runtime})`, "");
    L.push(
      `Same database, same role and claims per request (pgSettings), equivalent GraphQL query (answer checked: ${
        r.peer.verified.ok
          ? "identical after mapping names"
          : `**differs** — ${r.peer.verified.detail}`
      }).`,
      "",
      "| conns | svc req/s | PostGraphile req/s | svc ÷ PostGraphile | PostGraphile p50 | PostGraphile p99 | PostGraphile RSS MiB | CPU PostGraphile / pg / other | errors |",
      "|---:|---:|---:|---:|---:|---:|---:|---|---|",
    );
    for (const p of r.peer.runs) {
      const errs: string[] = [];
      if (p.peer_error) errs.push(p.peer_error.slice(0, 60));
      if (p.peer?.non2xx) errs.push(`${p.peer.non2xx} non-2xx`);
      if (p.peer?.socket_errors) errs.push(`${p.peer.socket_errors} socket errors`);
      L.push(
        `| ${p.connections} | ${rate(p.svc_rps)} | ${rate(p.peer?.rps)} | ${f2(p.ratio)} | ${
          ms(p.peer?.p50_ms)
        } | ` +
          `${ms(p.peer?.p99_ms)} | ${f0(p.peer_peak_rss_mb)} | ${cpu(p.peer_cpu, true)} | ${
            errs.join("; ") || "none"
          } |`,
      );
    }
    L.push("");
  }

  const big = r.cases.find((c) => c.big)?.big;
  if (big) {
    L.push("## 100,000-row read, one request at a time", "");
    L.push(
      "| requests | status | bytes | rows | first byte ms | total ms | RSS before MiB | peak RSS MiB | growth MiB |",
      "|---:|---|---:|---:|---|---|---:|---:|---:|",
      `| ${big.requests} | ${[...new Set(big.status)].join(", ")} | ${f0(big.bytes)} | ${
        f0(big.rows)
      } | ` +
        `${big.ttfb_ms.map(ms).join(" / ")} | ${big.total_ms.map(ms).join(" / ")} | ${
          f1(big.baseline_rss_mb)
        } | ` +
        `${f1(big.peak_rss_mb)} | ${f1(big.growth_mb)} |`,
      "",
      `Peak measured by ${big.peak_method}.`,
      "",
    );
  }

  if (r.scaling && r.scaling.workers.length > 1) {
    const ws = r.scaling.workers;
    const cell = (x: number | null | undefined, d = 0) =>
      x === null || x === undefined ? "–" : x.toFixed(d);
    L.push("## Scaling: svc with " + ws.map((w) => `${w}`).join(" and ") + " workers", "");
    L.push(
      "The same cases, same data and same pgbench figures, against svc started with each " +
        "`http.workers` (one process; RSS and CPU are the whole process's, CPU in % of one core). " +
        "**×pg** = req/s ÷ pgbench tps (plain script) at that concurrency.",
      "",
    );
    L.push(
      "| case | conns | " + ws.map((w) =>
        `req/s (${w}w) | ×pg (${w}w) | p99 ms (${w}w) | CPU % (${w}w) | RSS MiB (${w}w)`
      ).join(" | ") + " |",
      "|---|---:|" + ws.map(() =>
        "---:|---:|---:|---:|---:"
      ).join("|") + "|",
    );
    for (const row of r.scaling.rows) {
      const cells = ws.map((w) => {
        const x = row.by_workers[w];
        return [
          cell(x?.rps),
          cell(x?.ratio, 2),
          cell(x?.p99_ms, 1),
          cell(x?.cpu_svc),
          cell(x?.peak_rss_mb),
        ].join(" | ");
      });
      L.push(`| ${row.case} | ${row.connections} | ${cells.join(" | ")} |`);
    }
    L.push("");
  }
  if (r.metrics_cost) {
    const m = r.metrics_cost;
    L.push("## Metrics cost (primary-key read, 10 connections, alternating rounds)", "");
    const f4 = (x: number) => x.toFixed(4);
    L.push(
      "| metrics | svc CPU ms per request, per round | median | req/s median |",
      "|---|---|---:|---:|",
      `| on (default) | ${m.cpu_ms_per_request_on.map(f4).join(" / ")} | ${f4(m.median_on)} | ${
        f0([...m.rps_on].sort((a, b) => a - b)[m.rps_on.length >> 1])
      } |`,
      `| off | ${m.cpu_ms_per_request_off.map(f4).join(" / ")} | ${f4(m.median_off)} | ${
        f0([...m.rps_off].sort((a, b) => a - b)[m.rps_off.length >> 1])
      } |`,
      "",
      `Cost: ${
        m.cost_pct.toFixed(1)
      }% of svc CPU per request (median of ${m.rounds} rounds of ${m.duration_s} s; ` +
        `quartiles ${m.cost_pct_q1.toFixed(1)}% … ${m.cost_pct_q3.toFixed(1)}%).`,
      "",
    );
  }
  const amp = r.amplification;
  if (amp) {
    L.push("## One oversized row (amplifying joins), pg.query.max_row_size", "");
    L.push(
      "| status | total ms | RSS before MiB | peak RSS MiB | growth MiB |",
      "|---|---:|---:|---:|---:|",
      `| ${[...new Set(amp.status.filter((st) => st !== -1))].join(", ")} | ${
        amp.total_ms.map(ms).join(" / ")
      } | ${f1(amp.baseline_rss_mb)} | ${f1(amp.peak_rss_mb)} | ${f1(amp.growth_mb)} |`,
      "",
    );
  }

  L.push(
    "## Targets (reported, not asserted)",
    "",
    "| target | measured | verdict |",
    "|---|---|---|",
  );
  for (const t of r.targets) {
    const measured = t.results.map((x) =>
      `${x.label ? `${x.label}: ` : x.connections === null ? "" : `c=${x.connections}: `}${
        x.value === null
          ? "–"
          : t.id.includes("p99") || t.id.includes("ttfb")
          ? `${ms(x.value)} ms`
          : t.id.includes("rss")
          ? `${f1(x.value)} MiB`
          : f2(x.value)
      } ${x.met === null ? "" : x.met ? "✓" : "✗"}`
    ).join(", ");
    L.push(`| ${t.text} | ${measured || "–"} | ${mark(t.met)} |`);
  }
  L.push("", "A per-concurrency target is met only when it is met at every concurrency.", "");

  L.push(
    "## Answers checked",
    "",
    "| case | svc answer = hand-written SQL answer | svc bytes | rows |",
    "|---|---|---:|---:|",
  );
  for (const c of r.cases) {
    L.push(
      `| ${c.id} | ${c.verified.ok ? "yes" : `**no** — ${c.verified.detail}`} | ${
        f0(c.verified.svc_bytes)
      } | ${f0(c.verified.sql_rows)} |`,
    );
  }
  L.push("");
  if (r.problems.length) {
    L.push("## Problems seen", "");
    for (const p of r.problems) L.push(`- ${p}`);
    L.push("");
  }
  L.push("## Queries", "");
  for (const c of r.cases) {
    L.push(
      `### ${c.id}: ${c.title}`,
      "",
      "```json",
      JSON.stringify(c.body),
      "```",
      "",
      "```sql",
      c.sql,
      "```",
      "",
    );
  }
  if (r.peer) L.push("### PostGraphile nested read", "", "```graphql", r.peer.graphql, "```", "");
  return L.join("\n");
}
