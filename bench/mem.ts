/**
 * svc's resident memory through the bench's cases: `deno run -A bench/mem.ts`.
 *
 * Starts a private cluster with Chinook ×`--scale`, one one-worker svc per variant (same variant
 * syntax as bench/pk_cpu.ts: `NAME[@MAIN]:FLAG,…`, upper-case `NAME=value` entries are
 * environment variables, `DENO_V8_FLAGS=…` passes V8 flags), and drives each variant through
 * every case of bench/lib/cases.ts with wrk at 1, 10 and 50 connections, printing svc's RSS at
 * start, its peak (VmHWM) after each case, and its CPU per request — a quick way to compare what
 * start-up loading and V8 heap settings do to the peak without a full `deno task bench`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { startCluster } from "../src/db/cluster.ts";
import { CASES } from "./lib/cases.ts";
import { loadScaledChinook } from "./lib/data.ts";
import { ensureWrk, wrk } from "./lib/load.ts";
import { type Child, cpuMs, readMem } from "./lib/procs.ts";
import { parseVariant, startVariant, toolDir } from "./lib/variants.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    variant: { type: "string", multiple: true, default: ["svc:"] },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "1,10,50" },
    scale: { type: "string", default: "1" },
    pool: { type: "string", default: "10" },
    cases: { type: "string", default: CASES.map((c) => c.id).join(",") },
  },
});

const log = (s: string) => console.error(`[mem] ${s}`);
if (!await ensureWrk(log)) throw new Error("wrk is required (apt-get install wrk)");
const variants = flags.variant.map(parseVariant);
const tmp = await toolDir("svc-mem-");
const cluster = await startCluster();
const procs: Child[] = [];
try {
  const { uri } = await loadScaledChinook(cluster, "bench", Number(flags.scale));
  for (const v of variants) {
    const svc = await startVariant(v, {
      pgUri: uri,
      poolSize: Number(flags.pool),
      tmp,
      flags: ["--http.workers=1"],
    });
    procs.push(svc);
    const line = [`${v.name}: start ${readMem(svc.pid).rss_mb.toFixed(0)} MiB`];
    for (const c of CASES.filter((x) => flags.cases.split(",").includes(x.id))) {
      const bodyFile = `${tmp}/${c.id}.json`;
      Deno.writeTextFileSync(bodyFile, JSON.stringify(c.body));
      let req = 0;
      const c0 = cpuMs(svc.pid)!;
      for (const conns of flags.connections.split(",").map(Number)) {
        const r = await wrk({
          url: `${svc.url}/svc`,
          bodyFile,
          connections: conns,
          duration: Number(flags.duration),
        });
        req += r.requests;
      }
      const m = readMem(svc.pid);
      line.push(
        `${c.id} peak ${m.hwm_mb.toFixed(0)} (now ${m.rss_mb.toFixed(0)}) ${
          ((cpuMs(svc.pid)! - c0) / req * 1000).toFixed(1)
        } µs/req`,
      );
    }
    console.log(line.join(" | "));
    await svc.stop();
  }
} finally {
  for (const p of procs) await p.stop().catch(() => {});
  await cluster.stop();
  await Deno.remove(tmp, { recursive: true }).catch(() => {});
}
