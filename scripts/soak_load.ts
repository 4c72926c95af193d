/**
 * Soak load (`deno task soak --minutes 10`): starts a private PostgreSQL with Chinook and svc as a
 * separate process, then drives a mixed load (primary-key reads, nested reads, well-known queries,
 * nested writes) from `--connections` concurrent clients (default 200) for `--minutes`. Every
 * 30 s it prints requests, errors, p50/p99 and svc's RSS; at the end a summary, written to
 * `bench/results/soak.json`. Exit code 1 when any request failed or RSS grew more than 10% after
 * the first minute.
 */
import { parseArgs } from "node:util";
import { freePort, loadChinook, startCluster } from "../src/db/cluster.ts";
import { SignJWT } from "jose";

/** One 30-second window of the soak. */
export interface SoakWindow {
  at_s: number;
  requests: number;
  errors: number;
  p50_ms: number;
  p99_ms: number;
  rss_mb: number;
}

const SECRET = "soak-secret-soak-secret-soak-secret-0123456789";
const WELLKNOWN = new URL("../wellknown", import.meta.url).pathname;

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

function rssMb(pid: number): number {
  const s = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024;
}

/** Runs the soak; returns the windows and whether it passed. */
export async function soak(minutes: number, connections: number): Promise<{
  windows: SoakWindow[];
  errors: Record<string, number>;
  total: number;
  ok: boolean;
  rss_growth_after_first_minute_pct: number;
}> {
  const cluster = await startCluster();
  const uri = await loadChinook(cluster, "chinook");
  const port = freePort();
  const secrets = await Deno.makeTempDir({ prefix: "svc-soak-" });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../main.ts", import.meta.url).pathname,
      `--pg.uri=${uri}`,
      "--http.host=127.0.0.1",
      `--http.port=${port}`,
      `--jwt.secret=${SECRET}`,
      `--secrets.dir=${secrets}`,
      `--pg.query.wellknown_path=${WELLKNOWN}`,
      "--pg.pool_size=10",
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
      windows.push(w);
      console.log(
        `soak ${w.at_s}s: ${w.requests} requests, ${w.errors} errors, p50 ${w.p50_ms} ms, ` +
          `p99 ${w.p99_ms} ms, RSS ${w.rss_mb} MiB`,
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
    },
  });
  const result = await soak(Number(values.minutes), Number(values.connections));
  const out = new URL("../bench/results/soak.json", import.meta.url).pathname;
  await Deno.writeTextFile(
    out,
    JSON.stringify({ ...result, minutes: Number(values.minutes) }, null, 2),
  );
  console.log(
    `soak: ${result.total} requests, errors ${JSON.stringify(result.errors)}, RSS growth after ` +
      `the first minute ${result.rss_growth_after_first_minute_pct}% → ${
        result.ok ? "ok" : "FAILED"
      }`,
  );
  Deno.exit(result.ok ? 0 : 1);
}

if (import.meta.main) await soakLoadMain(Deno.args);
