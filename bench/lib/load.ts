/**
 * Load generators: wrk (Debian; installed with apt-get when missing), autocannon (npm, the
 * fallback when wrk cannot be installed) for HTTP, and pgbench for the database baseline.
 * Each run is bounded in time; results are parsed from the tools' own output.
 */

/** Result of one HTTP load run. */
export interface HttpResult {
  tool: "wrk" | "autocannon" | "ab";
  connections: number;
  threads: number;
  duration_s: number;
  requests: number;
  rps: number;
  /**
   * Latency percentiles as the tool reports them. wrk's are after its coordinated-omission
   * correction: at the end of a run it adds, for every request slower than twice the mean
   * interval between one connection's requests (duration × connections ÷ requests), copies at
   * that latency minus 1, 2, 3… intervals. One stall of S ms on c connections thus adds about
   * c × S ÷ interval samples between the interval and S: at 10 connections and 7,500 req/s a
   * single 100 ms pause of the server adds ~750 samples (1% of a 10 s run). Requests really that
   * slow are far fewer (docs/performance.md, "Tail latency").
   */
  p50_ms: number | null;
  p99_ms: number | null;
  /** The slowest request (wrk: its thread stats' max, which its correction leaves as is; ab). */
  max_ms?: number | null;
  /** Requests slower than 50 ms (ab only: its per-request log). */
  over_50ms?: number | null;
  /** Non-2xx/3xx responses. */
  non2xx: number;
  /** Socket errors (connect, read, write, timeout). */
  socket_errors: number;
}

/** Result of one pgbench run. */
export interface PgbenchResult {
  clients: number;
  threads: number;
  duration_s: number;
  pipeline: boolean;
  transactions: number;
  tps: number;
  /** pgbench's own "latency average" (derived from its throughput). */
  latency_avg_ms: number | null;
  /** Percentiles of the per-transaction log, without the entries logged as 0 µs (see below). */
  p50_ms: number | null;
  p99_ms: number | null;
  /**
   * Per-transaction log entries with a latency of exactly 0 µs, left out of p50/p99: pgbench 15
   * logs some transactions with its cached clock, so they read 0 (the mean of the other entries
   * matches pgbench's latency average, the mean with them does not).
   */
  zero_latency_entries: number;
  failed: number;
}

const dec = new TextDecoder();

async function run(
  cmd: string,
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd, {
    args,
    env: opts.env,
    cwd: opts.cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Whether a command is on PATH. */
export async function which(cmd: string): Promise<string | null> {
  const r = await run("sh", ["-c", `command -v ${cmd}`]);
  return r.code === 0 ? r.stdout.trim() : null;
}

/**
 * Makes sure wrk is installed: `apt-get install -y wrk`, and when that fails `apt-get update`
 * and the install again. Returns wrk's version line, or null when it cannot be had.
 */
export async function ensureWrk(log: (s: string) => void): Promise<string | null> {
  if (!(await which("wrk"))) {
    const env = { DEBIAN_FRONTEND: "noninteractive" };
    log("wrk not found: apt-get install -y wrk");
    let r = await run("apt-get", ["install", "-y", "-q", "wrk"], { env });
    if (r.code !== 0) {
      log("install failed: apt-get update, then install again");
      await run("apt-get", ["update", "-q"], { env });
      r = await run("apt-get", ["install", "-y", "-q", "wrk"], { env });
    }
    if (r.code !== 0 || !(await which("wrk"))) {
      log(`could not install wrk: ${r.stderr.trim().split("\n").slice(-2).join(" ")}`);
      return null;
    }
  }
  const v = await run("wrk", ["-v"]);
  return (v.stdout + v.stderr).split("\n")[0].trim();
}

/** Parses a wrk duration ("812.00us", "1.23ms", "2.01s", "1.00m") into milliseconds. */
export function parseWrkTime(s: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s.trim());
  if (!m) throw new Error(`unparsable wrk time "${s}"`);
  const n = Number(m[1]);
  return m[2] === "us" ? n / 1000 : m[2] === "ms" ? n : m[2] === "s" ? n * 1000 : n * 60000;
}

/** Parses wrk's output (with `--latency`). */
export function parseWrk(
  text: string,
): Omit<HttpResult, "tool" | "connections" | "threads" | "duration_s"> {
  const num = (re: RegExp) => {
    const m = re.exec(text);
    return m ? Number(m[1]) : 0;
  };
  const pct = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+(\\S+)`, "m").exec(text);
    return m ? parseWrkTime(m[1]) : null;
  };
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(text);
  if (!rps) throw new Error(`wrk output without Requests/sec:\n${text}`);
  const max = /^\s+Latency\s+\S+\s+\S+\s+(\S+)/m.exec(text);
  return {
    requests: num(/(\d+) requests in /),
    rps: Number(rps[1]),
    p50_ms: pct("50"),
    p99_ms: pct("99"),
    max_ms: max ? parseWrkTime(max[1]) : null,
    non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
    socket_errors: sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
  };
}

const POST_LUA = new URL("../wrk/post.lua", import.meta.url).pathname;

/** Options of one HTTP load run. */
export interface HttpRun {
  url: string;
  bodyFile: string;
  connections: number;
  duration: number;
  /** wrk's per-request timeout in seconds. */
  timeout?: number;
}

/** Runs wrk (`-t min(2,c) -c c -d … --latency -s bench/wrk/post.lua`). */
export async function wrk(o: HttpRun): Promise<HttpResult> {
  const threads = Math.min(2, o.connections);
  const r = await run("wrk", [
    `-t${threads}`,
    `-c${o.connections}`,
    `-d${o.duration}s`,
    `--timeout`,
    `${o.timeout ?? 30}s`,
    "--latency",
    "-s",
    POST_LUA,
    o.url,
  ], { env: { BENCH_BODY_FILE: o.bodyFile } });
  if (r.code !== 0) throw new Error(`wrk failed (${r.code}): ${r.stderr || r.stdout}`);
  return {
    tool: "wrk",
    connections: o.connections,
    threads,
    duration_s: o.duration,
    ...parseWrk(r.stdout),
  };
}

/**
 * Runs ApacheBench (`ab -k -c c -t d`, Debian's apache2-utils) and reads its per-request log
 * (`-g`): latency percentiles of the requests as they were, with no correction — what a client
 * saw (wrk's percentiles are corrected for coordinated omission, see {@link HttpResult.p50_ms}).
 * One thread: enough for svc at 10 connections on this machine, not a throughput tool.
 */
export async function ab(o: HttpRun & { logFile: string }): Promise<HttpResult> {
  const r = await run("ab", [
    "-k",
    "-q",
    "-c",
    String(o.connections),
    "-t",
    String(o.duration),
    "-n",
    "100000000",
    "-s",
    String(o.timeout ?? 30),
    "-p",
    o.bodyFile,
    "-T",
    "application/json",
    "-H",
    "Accept: application/json",
    "-g",
    o.logFile,
    o.url,
  ]);
  if (r.code !== 0) throw new Error(`ab failed (${r.code}): ${r.stderr || r.stdout}`);
  const num = (re: RegExp) => Number(re.exec(r.stdout)?.[1] ?? 0);
  // Tab-separated, a header line, then one line per request: its total time (ms) is the 5th column.
  const ms = Deno.readTextFileSync(o.logFile).trim().split("\n").slice(1)
    .map((l) => Number(l.split("\t")[4])).sort((a, b) => a - b);
  const at = (p: number) =>
    ms.length ? ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] : null;
  return {
    tool: "ab",
    connections: o.connections,
    threads: 1,
    duration_s: o.duration,
    requests: num(/Complete requests:\s+(\d+)/),
    rps: num(/Requests per second:\s+([\d.]+)/),
    p50_ms: at(0.5),
    p99_ms: at(0.99),
    max_ms: ms.length ? ms[ms.length - 1] : null,
    over_50ms: ms.filter((x) => x > 50).length,
    non2xx: num(/Non-2xx responses:\s+(\d+)/),
    // ab also counts an answer whose length differs from the first one's as failed (a write's
    // generated keys): not an error here.
    socket_errors: num(/Failed requests:\s+(\d+)/) - num(/Length: (\d+)/),
  };
}

/** Runs autocannon through npx (the fallback when wrk is unavailable). */
export async function autocannon(o: HttpRun): Promise<HttpResult> {
  const r = await run("npx", [
    "-y",
    "autocannon@8.0.0",
    "--json",
    "-c",
    String(o.connections),
    "-d",
    String(o.duration),
    "-t",
    String(o.timeout ?? 30),
    "-m",
    "POST",
    "-H",
    "content-type=application/json",
    "-i",
    o.bodyFile,
    o.url,
  ]);
  if (r.code !== 0) throw new Error(`autocannon failed (${r.code}): ${r.stderr}`);
  const j = JSON.parse(r.stdout.slice(r.stdout.indexOf("{")));
  return {
    tool: "autocannon",
    connections: o.connections,
    threads: 1,
    duration_s: o.duration,
    requests: j.requests.total,
    rps: j.requests.average,
    p50_ms: j.latency.p50,
    p99_ms: j.latency.p99,
    non2xx: j.non2xx ?? 0,
    socket_errors: (j.errors ?? 0) + (j.timeouts ?? 0),
  };
}

/**
 * The pgbench script for one case: exactly what svc sends per request — `begin`, the role and
 * claims switch, the statement(s), `commit` — optionally inside `\startpipeline`, which sends
 * them in one round trip as svc does.
 */
export function pgbenchScript(
  statements: string[],
  opts: { role: string; claims: string; pipeline: boolean },
): string {
  const lit = (s: string) => `'${s.replaceAll("'", "''")}'`;
  const lines = [
    "begin;",
    `select set_config('role', ${lit(opts.role)}, true), ` +
    `set_config('svc.jwt.claims', ${lit(opts.claims)}, true);`,
    ...statements.map((s) => `${s.trim().replace(/;\s*$/, "")};`),
    "commit;",
  ];
  return (opts.pipeline ? ["\\startpipeline", ...lines, "\\endpipeline"] : lines).join("\n") + "\n";
}

/** Percentile (nearest rank) of sorted numbers. */
export function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

/** Options of one pgbench run. */
export interface PgbenchRun {
  pgbench: string;
  host: string;
  port: number;
  user: string;
  database: string;
  scriptFile: string;
  clients: number;
  duration: number;
  pipeline: boolean;
  /** Directory for pgbench's per-transaction logs (latency percentiles). */
  logDir: string;
}

/** Runs pgbench (`-n -M prepared -c -j -T -f`, per-transaction log for p50/p99). */
export async function pgbench(o: PgbenchRun): Promise<PgbenchResult> {
  const threads = Math.min(2, o.clients);
  const prefix = `${o.logDir}/pgbench_${crypto.randomUUID().slice(0, 8)}`;
  const r = await run(o.pgbench, [
    "-n",
    "-M",
    "prepared",
    "-h",
    o.host,
    "-p",
    String(o.port),
    "-U",
    o.user,
    "-c",
    String(o.clients),
    "-j",
    String(threads),
    "-T",
    String(o.duration),
    "-f",
    o.scriptFile,
    "-l",
    `--log-prefix=${prefix}`,
    o.database,
  ]);
  if (r.code !== 0) throw new Error(`pgbench failed (${r.code}): ${r.stderr || r.stdout}`);
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(r.stdout);
  const failed = /number of failed transactions: (\d+)/.exec(r.stdout);
  const processed = /number of transactions actually processed: (\d+)/.exec(r.stdout);
  const avg = /latency average = ([\d.]+) ms/.exec(r.stdout);
  if (!tps) throw new Error(`pgbench output without tps:\n${r.stdout}\n${r.stderr}`);
  // Per-transaction log lines: client_id transaction_no time_us script_no epoch epoch_us.
  const lat: number[] = [];
  let zeros = 0;
  const base = prefix.slice(prefix.lastIndexOf("/") + 1);
  for (const e of Deno.readDirSync(o.logDir)) {
    if (!e.name.startsWith(base)) continue;
    const path = `${o.logDir}/${e.name}`;
    for (const line of Deno.readTextFileSync(path).split("\n")) {
      const f = line.split(" ");
      if (f.length < 3 || f[2] === "skipped" || f[2] === "failed") continue;
      if (f[2] === "0") zeros++;
      else lat.push(Number(f[2]) / 1000);
    }
    Deno.removeSync(path);
  }
  lat.sort((a, b) => a - b);
  return {
    clients: o.clients,
    threads,
    duration_s: o.duration,
    pipeline: o.pipeline,
    transactions: processed ? Number(processed[1]) : lat.length + zeros,
    tps: Number(tps[1]),
    latency_avg_ms: avg ? Number(avg[1]) : null,
    p50_ms: percentile(lat, 50),
    p99_ms: percentile(lat, 99),
    zero_latency_entries: zeros,
    failed: failed ? Number(failed[1]) : 0,
  };
}
