/**
 * Soak load (`deno task soak --minutes 10`): starts a private PostgreSQL with Chinook and svc as a
 * separate process, then drives a mixed load (primary-key reads, nested reads, well-known queries,
 * nested writes) from `--connections` concurrent clients (default 200) for `--minutes`. Every
 * 30 s it prints requests, errors, p50/p99 and svc's RSS; at the end a summary, written to
 * `bench/results/soak.json`. Exit code 1 when any request failed or RSS grew more than 10% after
 * the first minute.
 *
 * `--heap` runs svc through scripts/mem_probe.ts, so every window also shows V8's heap (used,
 * total) and external memory; `--v8-flags=<flags>` passes V8 flags to svc's `deno run` (to compare
 * heap settings); `--pool <n>` sets `pg.pool_size` (default 10). The peak RSS is svc's VmHWM.
 */
import { parseArgs } from "node:util";
import { freePort, loadChinook, startCluster } from "../src/db/cluster.ts";
import { SignJWT } from "jose";
import { readSamples } from "./mem_probe.ts";

/** One 30-second window of the soak. */
export interface SoakWindow {
  at_s: number;
  requests: number;
  errors: number;
  p50_ms: number;
  p99_ms: number;
  rss_mb: number;
  /** V8 heap used / total and external memory at the window's end (`--heap` only). */
  heap_used_mb?: number;
  heap_total_mb?: number;
  external_mb?: number;
}

/** How svc is started for the soak. */
export interface SoakOptions {
  /** Sample V8 heap figures through scripts/mem_probe.ts. */
  heap?: boolean;
  /** `--v8-flags=` value for svc's `deno run`, or empty. */
  v8Flags?: string;
  /** `pg.pool_size` (default 10). */
  pool?: number;
  /** `http.workers` (default: svc's own default, one per core). */
  workers?: number;
}

const SECRET = "soak-secret-soak-secret-soak-secret-0123456789";
const WELLKNOWN = new URL("../wellknown", import.meta.url).pathname;

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

function rssMb(pid: number, field = "VmRSS"): number {
  const s = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(s)![1]) / 1024;
}

/** CPU seconds (user + system) a process has used (Linux). */
function cpuSeconds(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

const mb = (bytes: number) => Math.round(bytes / 1024 / 1024 * 10) / 10;

/** Runs the soak; returns the windows and whether it passed. */
export async function soak(minutes: number, connections: number, opts: SoakOptions = {}): Promise<{
  windows: SoakWindow[];
  errors: Record<string, number>;
  total: number;
  ok: boolean;
  rss_growth_after_first_minute_pct: number;
  rss_after_first_minute_mb: number;
  rss_at_end_mb: number;
  peak_rss_mb: number;
  v8_flags: string;
  svc_cpu_us_per_request: number;
}> {
  const cluster = await startCluster();
  const uri = await loadChinook(cluster, "chinook");
  const port = freePort();
  const secrets = await Deno.makeTempDir({ prefix: "svc-soak-" });
  const memLog = `${secrets}/mem.jsonl`;
  const entry = opts.heap ? "./mem_probe.ts" : "../main.ts";
  const child = new Deno.Command(Deno.execPath(), {
    env: { SVC_MEM_LOG: memLog },
    args: [
      "run",
      "-A",
      ...(opts.v8Flags ? [`--v8-flags=${opts.v8Flags}`] : []),
      new URL(entry, import.meta.url).pathname,
      `--pg.uri=${uri}`,
      "--http.host=127.0.0.1",
      `--http.port=${port}`,
      `--jwt.secret=${SECRET}`,
      `--secrets.dir=${secrets}`,
      `--pg.query.wellknown_path=${WELLKNOWN}`,
      `--pg.pool_size=${opts.pool ?? 10}`,
      ...(opts.workers ? [`--http.workers=${opts.workers}`] : []),
      "--logging.level=error",
    ],
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  const url = `http://127.0.0.1:${port}`;
  try {
    for (let i = 0; i < 200; i++) {
      const ok = await fetch(`${url}/svc/health`).then((r) => r.status === 200).catch(() => false);
      if (ok) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const t = Math.floor(Date.now() / 1000);
    const tok = await new SignJWT({ role: "app_user", iat: t, exp: t + 86400, auth_time: t })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .sign(new TextEncoder().encode(SECRET));
    const json = { "content-type": "application/json", cookie: `accesstoken=${tok}` };
    const bodies = {
      pk: JSON.stringify({ relation: "track", where: ["=", "track_id", 0] }),
      nested: JSON.stringify({
        relation: "artist",
        where: ["<", "artist_id", 10],
        join: {
          albums: {
            relation: "album",
            on: { artist_id: "artist_id" },
            join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
          },
        },
      }),
      wellknown: JSON.stringify({ wellknown: "top_customers", params: { country: "Germany" } }),
    };
    const write = (n: number) =>
      JSON.stringify({
        query: {
          relation: "invoice",
          join: { lines: { relation: "invoice_line", on: { invoice_id: "invoice_id" } } },
        },
        data: [{
          customer_id: 1 + (n % 59),
          invoice_date: "2026-11-23T00:00:00",
          total: 4.95,
          billing_city: "SOAK",
          lines: Array.from({ length: 5 }, (_, j) => ({
            track_id: 1 + ((n * 5 + j) % 3500),
            unit_price: 0.99,
            quantity: 1,
          })),
        }],
      });
    const errors: Record<string, number> = {};
    let latencies: number[] = [];
    let windowErrors = 0;
    let total = 0;
    let n = 0;
    const end = Date.now() + minutes * 60_000;
    const windows: SoakWindow[] = [];
    const start = Date.now();
    const pid = child.pid;
    const cpu0 = cpuSeconds(pid);
    const ticker = setInterval(() => {
      latencies.sort((a, b) => a - b);
      const w: SoakWindow = {
        at_s: Math.round((Date.now() - start) / 1000),
        requests: latencies.length,
        errors: windowErrors,
        p50_ms: Math.round(percentile(latencies, 0.5) * 10) / 10,
        p99_ms: Math.round(percentile(latencies, 0.99) * 10) / 10,
        rss_mb: Math.round(rssMb(pid) * 10) / 10,
      };
      const heap = opts.heap ? readSamples(memLog).at(-1) : undefined;
      if (heap) {
        w.heap_used_mb = mb(heap.heapUsed);
        w.heap_total_mb = mb(heap.heapTotal);
        w.external_mb = mb(heap.external);
      }
      windows.push(w);
      console.log(
        `soak ${w.at_s}s: ${w.requests} requests, ${w.errors} errors, p50 ${w.p50_ms} ms, ` +
          `p99 ${w.p99_ms} ms, RSS ${w.rss_mb} MiB` +
          (heap
            ? ` (heap used ${w.heap_used_mb} / total ${w.heap_total_mb}, external ${w.external_mb})`
            : ""),
      );
      latencies = [];
      windowErrors = 0;
    }, 30_000);
    const client = async () => {
      while (Date.now() < end) {
        const i = n++;
        const kind = i % 10;
        const body = kind < 4
          ? bodies.pk.replace('"track_id",0', `"track_id",${1 + (i % 3500)}`)
          : kind < 7
          ? bodies.nested
          : kind < 9
          ? bodies.wellknown
          : write(i);
        const t0 = performance.now();
        try {
          const r = await fetch(`${url}/svc`, { method: "POST", headers: json, body });
          await r.arrayBuffer();
          if (r.status !== 200) {
            const code = r.headers.get("x-svc-errorcode") ?? String(r.status);
            errors[code] = (errors[code] ?? 0) + 1;
            windowErrors++;
          }
        } catch (e) {
          const code = (e as Error).name;
          errors[code] = (errors[code] ?? 0) + 1;
          windowErrors++;
        }
        latencies.push(performance.now() - t0);
        total++;
      }
    };
    await Promise.all(Array.from({ length: connections }, client));
    clearInterval(ticker);
    const peak = Math.round(rssMb(pid, "VmHWM") * 10) / 10;
    const cpuUs = Math.round((cpuSeconds(pid) - cpu0) * 1e6 / Math.max(1, total));
    const afterFirstMinute = windows.find((w) => w.at_s >= 60) ?? windows[0];
    const last = windows[windows.length - 1];
    const growth = afterFirstMinute && last
      ? Math.round((last.rss_mb / afterFirstMinute.rss_mb - 1) * 1000) / 10
      : 0;
    const errorCount = Object.values(errors).reduce((a, b) => a + b, 0);
    return {
      windows,
      errors,
      total,
      ok: errorCount === 0 && growth < 10,
      rss_growth_after_first_minute_pct: growth,
      rss_after_first_minute_mb: afterFirstMinute?.rss_mb ?? 0,
      rss_at_end_mb: last?.rss_mb ?? 0,
      peak_rss_mb: peak,
      v8_flags: opts.v8Flags ?? "",
      svc_cpu_us_per_request: cpuUs,
    };
  } finally {
    try {
      child.kill("SIGTERM");
    } catch { /* gone */ }
    await child.status;
    await cluster.stop();
    await Deno.remove(secrets, { recursive: true }).catch(() => {});
  }
}

/** `deno task soak --minutes M [--connections N]`: runs the load soak and exits 0 when it passed. */
export async function soakLoadMain(args: string[]): Promise<never> {
  const { values } = parseArgs({
    args,
    options: {
      minutes: { type: "string", default: "10" },
      connections: { type: "string", default: "200" },
      heap: { type: "boolean", default: false },
      "v8-flags": { type: "string", default: "" },
      pool: { type: "string", default: "10" },
      workers: { type: "string" },
    },
  });
  const result = await soak(Number(values.minutes), Number(values.connections), {
    heap: values.heap,
    v8Flags: values["v8-flags"],
    pool: Number(values.pool),
    workers: values.workers === undefined ? undefined : Number(values.workers),
  });
  const out = new URL("../bench/results/soak.json", import.meta.url).pathname;
  await Deno.writeTextFile(
    out,
    JSON.stringify({ ...result, minutes: Number(values.minutes) }, null, 2),
  );
  console.log(
    `soak: ${result.total} requests, errors ${JSON.stringify(result.errors)}, RSS growth after ` +
      `the first minute ${result.rss_growth_after_first_minute_pct}% (${result.rss_after_first_minute_mb} → ` +
      `${result.rss_at_end_mb} MiB, peak ${result.peak_rss_mb} MiB), svc CPU ` +
      `${result.svc_cpu_us_per_request} µs/request → ${result.ok ? "ok" : "FAILED"}`,
  );
  Deno.exit(result.ok ? 0 : 1);
}

if (import.meta.main) await soakLoadMain(Deno.args);
