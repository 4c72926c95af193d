/**
 * Where svc's time and allocations go under load: `deno run -A bench/pk_profile.ts`.
 *
 * Starts a private PostgreSQL cluster with Chinook (bench/lib/data.ts) and one svc process (one
 * worker unless the flags say otherwise) with the V8 inspector open, drives a case of
 * bench/lib/cases.ts (default `pk_read`) with wrk, and while the load runs samples through the
 * inspector both the CPU (a sample every 100 µs: finer than `--cpu-prof`'s default) and the heap's
 * allocations (V8's sampling heap profiler, objects collected by scavenges included). It prints
 * the top self-time and inclusive functions (bench/lib/cpuprof.ts) and the top allocation sites in
 * bytes per request, and writes the profiles (`--out`, default a temp directory) for a closer look
 * (`.cpuprofile` and `.heapprofile` open in Chrome's DevTools).
 *
 * Flags: `--survivors` (the heap profile counts only objects that outlived a scavenge: what is
 * promoted or kept, the allocations that make scavenges and mark-compacts dear), `--connections=50`, `--duration=8` (s of sampled load), `--warmup=3` (s, not sampled),
 * `--case=pk_read`, `--scale=1`, `--pool=10`, `--main=<another checkout's main.ts>`,
 * `--flag=<svc flag>` (repeatable; default `--http.workers=1`), `--top=30`, `--out=DIR`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { freePort, startCluster } from "../src/db/cluster.ts";
import { CASES } from "./lib/cases.ts";
import { toolDir } from "./lib/variants.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { ensureWrk, wrk } from "./lib/load.ts";
import { startSvc } from "./lib/procs.ts";
import { summarizeProfile } from "./lib/cpuprof.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    connections: { type: "string", default: "50" },
    duration: { type: "string", default: "8" },
    warmup: { type: "string", default: "3" },
    case: { type: "string", default: "pk_read" },
    scale: { type: "string", default: "1" },
    pool: { type: "string", default: "10" },
    main: { type: "string" },
    flag: { type: "string", multiple: true, default: ["--http.workers=1"] },
    top: { type: "string", default: "30" },
    out: { type: "string" },
    survivors: { type: "boolean", default: false },
  },
});

/** A node of V8's sampling heap profile. */
interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

/** The replies this script reads of the inspector's protocol. */
interface Reply {
  id?: number;
  result?: { profile?: unknown };
  error?: { message: string };
}

const log = (s: string) => console.error(`[pk_profile] ${s}`);
const kase = CASES.find((c) => c.id === flags.case);
if (!kase) throw new Error(`unknown case ${flags.case} (${CASES.map((c) => c.id).join(", ")})`);
if (!await ensureWrk(log)) throw new Error("wrk is required (apt-get install wrk)");
const top = Number(flags.top);
const tmp = await toolDir("svc-pk-profile-");
const out = flags.out ?? tmp;
Deno.mkdirSync(out, { recursive: true });
const bodyFile = `${tmp}/body.json`;
Deno.writeTextFileSync(bodyFile, JSON.stringify(kase.body));

log("starting PostgreSQL");
const cluster = await startCluster();
const inspectPort = freePort();
let svc: Awaited<ReturnType<typeof startSvc>> | undefined;
try {
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  svc = await startSvc({
    pgUri: uri,
    poolSize: Number(flags.pool),
    wellknownDir: `${tmp}/wellknown`,
    secretsDir: `${tmp}/secrets`,
    logFile: `${tmp}/svc.log`,
    flags: flags.flag,
    main: flags.main,
    denoArgs: [`--inspect=127.0.0.1:${inspectPort}`],
  });
  const targets = await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json() as {
    webSocketDebuggerUrl: string;
  }[];
  const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let seq = 0;
  const waiting = new Map<number, (r: Reply) => void>();
  ws.onmessage = (m) => {
    const r = JSON.parse(m.data) as Reply;
    if (r.id !== undefined) waiting.get(r.id)?.(r);
  };
  const call = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<Reply>((resolve, reject) => {
      const id = ++seq;
      waiting.set(id, (r) => {
        waiting.delete(id);
        if (r.error) reject(new Error(`${method}: ${r.error.message}`));
        else resolve(r);
      });
      ws.send(JSON.stringify({ id, method, params }));
    });
  const load = (duration: number) =>
    wrk({ url: `${svc!.url}/svc`, bodyFile, connections: Number(flags.connections), duration });

  // The case must answer 200: a profile of error answers would measure the error path.
  const check = await fetch(`${svc.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(kase.body),
  });
  const text = await check.text();
  if (check.status !== 200) {
    throw new Error(`${kase.id} answered ${check.status}: ${text.slice(0, 300)}`);
  }
  await load(Number(flags.warmup));
  await call("Profiler.enable");
  await call("HeapProfiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 100 });
  await call("Profiler.start");
  await call("HeapProfiler.startSampling", {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: !flags.survivors,
  });
  const w = await load(Number(flags.duration));
  const heap = (await call("HeapProfiler.stopSampling")).result!.profile as { head: HeapNode };
  const cpu = (await call("Profiler.stop")).result!.profile;
  ws.close();
  Deno.writeTextFileSync(`${out}/svc.cpuprofile`, JSON.stringify(cpu));
  Deno.writeTextFileSync(`${out}/svc.heapprofile`, JSON.stringify(heap));

  console.log(
    `${kase.id} at c=${flags.connections}: ${w.requests} requests, ${w.rps.toFixed(0)} req/s ` +
      `(under the inspector); profiles in ${out}`,
  );
  const s = summarizeProfile(`${out}/svc.cpuprofile`, top);
  console.log(`\nCPU (${s.samples} busy samples), self time by function:`);
  for (const e of s.functions) console.log(`  ${e.pct.toFixed(1).padStart(5)}%  ${e.name}`);
  console.log("inclusive time by function:");
  for (const e of s.inclusive) console.log(`  ${e.pct.toFixed(1).padStart(5)}%  ${e.name}`);

  const sites = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapNode) => {
    const f = n.callFrame;
    const file = f.url.replace(/^file:\/\//, "").replace(/^.*\/(src|bench)\//, "$1/");
    const key = `${f.functionName || "(anonymous)"} ${file || "(native)"}:${f.lineNumber + 1}`;
    sites.set(key, (sites.get(key) ?? 0) + n.selfSize);
    total += n.selfSize;
    for (const c of n.children) walk(c);
  };
  walk(heap.head);
  console.log(
    `\n${flags.survivors ? "survivors of a scavenge" : "allocations"} (sampled): ${
      (total / w.requests).toFixed(0)
    } bytes per request, by site:`,
  );
  for (const [k, v] of [...sites].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`  ${(v / w.requests).toFixed(0).padStart(6)} B  ${k}`);
  }
} finally {
  await svc?.stop();
  await cluster.stop();
  if (!flags.out) log(`profiles kept in ${tmp}`);
  else await Deno.remove(tmp, { recursive: true });
}
