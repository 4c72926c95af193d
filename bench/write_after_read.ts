/**
 * The nested write after the nested read, on the same pooled connections:
 * `deno run -A bench/write_after_read.ts`.
 *
 * Starts a private cluster with Chinook (bench/lib/data.ts) and one svc per variant, then per
 * variant and round (variants alternate, the order rotating): svc's PostgreSQL connections are
 * terminated (the pool opens fresh ones), the nested write at `--connections` (req/s, svc and
 * PostgreSQL CPU per request), the nested read at 1, 10 and 50 connections (as `deno task bench`
 * runs it before the write), the nested write again on the same connections. After each step it
 * asks every backend of that svc (found by the local ports of its sockets) for its memory contexts
 * (`pg_log_backend_memory_contexts`, read back from the server log) and prints the medians: the
 * whole backend, CacheMemoryContext, CachedPlan* contexts, the largest top-level contexts.
 *
 * Flags: `--variant=NAME[@MAIN]:FLAG,…` (as bench/pk_cpu.ts), `--rounds=3`, `--duration=8` (s per
 * step), `--read-duration=10`, `--connections=10`, `--scale=20`, `--pool=10`, `--json=FILE`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { Client } from "../src/pg/client.ts";
import { startCluster } from "../src/db/cluster.ts";
import { CASES } from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { ensureWrk, wrk } from "./lib/load.ts";
import { type Child, CpuMonitor, cpuMs } from "./lib/procs.ts";
import { parseVariant, startVariant, type Variant } from "./lib/variants.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    variant: { type: "string", multiple: true, default: ["svc:"] },
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "8" },
    "read-duration": { type: "string", default: "10" },
    connections: { type: "string", default: "10" },
    scale: { type: "string", default: "20" },
    pool: { type: "string", default: "10" },
    json: { type: "string" },
    "no-memory": { type: "boolean", default: false },
  },
});

const variants = flags.variant.map(parseVariant);
const ROUNDS = Number(flags.rounds);
const DURATION = Number(flags.duration);
const READ_DURATION = Number(flags["read-duration"]);
const CONNS = Number(flags.connections);
const log = (s: string) => console.error(`[write_after_read] ${s}`);
const med = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const write = CASES.find((c) => c.id === "nested_write")!;
const read = CASES.find((c) => c.id === "nested_read")!;
if (!await ensureWrk(log)) throw new Error("wrk is required");

const tmp = await Deno.makeTempDir({ prefix: "svc-war-" });
const writeFile = `${tmp}/write.json`;
const readFile = `${tmp}/read.json`;
Deno.writeTextFileSync(writeFile, JSON.stringify(write.body));
Deno.writeTextFileSync(readFile, JSON.stringify(read.body));
Deno.mkdirSync(`${tmp}/wellknown`);
Deno.mkdirSync(`${tmp}/secrets`);

log("starting PostgreSQL");
const cluster = await startCluster();
const procs = new Map<string, Child>();
async function cleanup() {
  for (const c of procs.values()) await c.stop().catch(() => {});
  await cluster.stop().catch(() => {});
  await Deno.remove(tmp, { recursive: true }).catch(() => {});
}

/** Local TCP ports of the sockets process `pid` holds open. */
function localPorts(pid: number): Set<number> {
  const inodes = new Set<string>();
  for (const e of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/${pid}/fd/${e.name}`));
      if (m) inodes.add(m[1]);
    } catch { /* closed meanwhile */ }
  }
  const ports = new Set<number>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of Deno.readTextFileSync(file).split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && inodes.has(f[9])) ports.add(parseInt(f[1].split(":")[1], 16));
    }
  }
  return ports;
}

/** PostgreSQL backends (pids) whose client is process `svcPid`. */
async function backendsOf(sql: Client, svcPid: number): Promise<number[]> {
  const ports = localPorts(svcPid);
  const rows = await sql.query(
    "select pid, client_port from pg_stat_activity where datname = 'bench' and pid <> pg_backend_pid()",
  );
  return rows.filter((r) => ports.has(Number(r.client_port))).map((r) => Number(r.pid));
}

/** Memory figures of one backend, from its logged memory contexts. */
interface BackendMem {
  pid: number;
  total: number;
  cache: number;
  cachedPlans: number;
  cachedPlanBytes: number;
  top: Record<string, number>;
}

/** Asks svc's backends (application_name `svc`) to log their memory contexts; parses the log. */
async function memory(sql: Client, logPath: string, svcPid: number): Promise<BackendMem[]> {
  const before = (await Deno.readTextFile(logPath)).length;
  const pids = await backendsOf(sql, svcPid);
  for (const pid of pids) await sql.query("select pg_log_backend_memory_contexts($1)", [pid]);
  const out: BackendMem[] = [];
  const deadline = Date.now() + 10_000;
  for (;;) {
    const text = (await Deno.readTextFile(logPath)).slice(before);
    out.length = 0;
    for (const pid of pids) {
      const lines = text.split("\n").filter((l) => l.includes(`[${pid}]`));
      const grand = lines.find((l) => l.includes("Grand total:"));
      if (!grand) continue;
      const m: BackendMem = {
        pid,
        total: Number(/Grand total: (\d+) bytes/.exec(grand)![1]),
        cache: 0,
        cachedPlans: 0,
        cachedPlanBytes: 0,
        top: {},
      };
      for (const l of lines) {
        const c = /level: (\d+); ([^:]+): (\d+) total/.exec(l);
        if (!c) continue;
        const [level, name, bytes] = [Number(c[1]), c[2], Number(c[3])];
        if (level === 1) m.top[name] = (m.top[name] ?? 0) + bytes;
        if (name === "CacheMemoryContext") m.cache = bytes;
        if (name.startsWith("CachedPlan")) {
          m.cachedPlans++;
          m.cachedPlanBytes += bytes;
        }
      }
      out.push(m);
    }
    if (out.length === pids.length || Date.now() > deadline) return out;
    await new Promise((r) => setTimeout(r, 100));
  }
}

function showMem(label: string, ms: BackendMem[]) {
  if (ms.length === 0) return log(`  ${label}: no backends`);
  const kb = (x: number) => `${(x / 1024).toFixed(0)} KiB`;
  const tops = new Map<string, number>();
  for (const m of ms) {
    for (const [k, v] of Object.entries(m.top)) tops.set(k, (tops.get(k) ?? 0) + v);
  }
  const big = [...tops].sort((a, b) => b[1] - a[1]).slice(0, 5)
    .map(([k, v]) => `${k} ${kb(v / ms.length)}`).join(", ");
  log(
    `  ${label}: ${ms.length} backends, median total ${kb(med(ms.map((m) => m.total)))}, ` +
      `CacheMemoryContext ${kb(med(ms.map((m) => m.cache)))}, CachedPlan* contexts ${
        med(ms.map((m) => m.cachedPlans))
      } (${kb(med(ms.map((m) => m.cachedPlanBytes)))}); mean top-level: ${big}`,
  );
}

interface Step {
  variant: string;
  round: number;
  step: string;
  rps: number;
  svc_ms: number;
  pg_ms: number;
  non2xx: number;
}

try {
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  const sql = new Client(cluster.uriFor("bench"));
  const logPath = `${cluster.dir}/log`;
  const postmaster = Number(
    Deno.readTextFileSync(`${cluster.dir}/data/postmaster.pid`).split("\n")[0],
  );
  for (const v of variants) {
    const child = await startVariant(v, {
      pgUri: uri,
      poolSize: Number(flags.pool),
      tmp,
      flags: ["--http.workers=1"],
    });
    procs.set(v.name, child);
    log(`${v.name}: svc pid ${child.pid} ${v.main ?? ""} ${v.flags.join(" ")}`);
  }
  const steps: Step[] = [];
  const load = async (v: Variant, r: number, step: string, file: string, c: number, d: number) => {
    const child = procs.get(v.name)!;
    if (file === writeFile) await sql.simple("vacuum (analyze) invoice, invoice_line");
    const mon = new CpuMonitor(child.pid, postmaster);
    const c0 = cpuMs(child.pid)!;
    mon.start();
    const w = await wrk({ url: `${child.url}/svc`, bodyFile: file, connections: c, duration: d });
    const cpu = mon.stop();
    const c1 = cpuMs(child.pid)!;
    const s: Step = {
      non2xx: w.non2xx + w.socket_errors,
      variant: v.name,
      round: r,
      step,
      rps: w.rps,
      svc_ms: (c1 - c0) / w.requests,
      pg_ms: (cpu.postgres / 100) * (cpu.seconds ?? d) * 1000 / w.requests,
    };
    steps.push(s);
    log(
      `round ${r + 1} ${v.name.padEnd(8)} ${step.padEnd(12)} ${
        w.rps.toFixed(0).padStart(6)
      } req/s, ` +
        `svc ${s.svc_ms.toFixed(3)} ms/req, PostgreSQL ${
          s.pg_ms.toFixed(3)
        } ms/req (${cpu.postgres}%)${s.non2xx ? `, ${s.non2xx} failed` : ""}`,
    );
  };
  for (let r = 0; r < ROUNDS; r++) {
    const order = variants.map((_, i) => variants[(i + r) % variants.length]);
    for (const v of order) {
      const pid = procs.get(v.name)!.pid;
      const mem = async (label: string) => {
        if (!flags["no-memory"]) showMem(`${v.name} ${label}`, await memory(sql, logPath, pid));
      };
      // Fresh connections: the pool replaces the terminated ones at the next requests.
      for (const b of await backendsOf(sql, pid)) {
        await sql.query("select pg_terminate_backend($1, 5000)", [b]);
      }
      await load(v, r, "write", writeFile, CONNS, DURATION);
      await mem("after write");
      await load(v, r, "read c=1", readFile, 1, READ_DURATION / 2);
      await load(v, r, "read c=10", readFile, 10, READ_DURATION);
      await load(v, r, "read c=50", readFile, 50, READ_DURATION);
      await mem("after read");
      await load(v, r, "write after", writeFile, CONNS, DURATION);
      await mem("after write");
    }
  }
  console.log(`\nnested write before / after the nested read, c=${CONNS}, ${ROUNDS} rounds:`);
  for (const v of variants) {
    const of = (step: string) => steps.filter((s) => s.variant === v.name && s.step === step);
    const f = (xs: number[], d = 0) =>
      `${med(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
    const b = of("write");
    const a = of("write after");
    console.log(
      `  ${v.name.padEnd(8)} write ${f(b.map((x) => x.rps))} req/s, PG ${
        f(b.map((x) => x.pg_ms), 3)
      } ms/req | after read ${f(a.map((x) => x.rps))} req/s, PG ${
        f(a.map((x) => x.pg_ms), 3)
      } ms/req | after ÷ before ${f(a.map((x, i) => x.rps / b[i].rps), 2)}`,
    );
  }
  if (flags.json) Deno.writeTextFileSync(flags.json, JSON.stringify(steps, null, 2));
  await sql.close();
} finally {
  await cleanup();
}
