/**
 * svc with memory sampling, for soaks and benches: `deno run -A scripts/mem_probe.ts <svc flags>`
 * starts svc exactly as `main.ts` does and appends `Deno.memoryUsage()` (rss, heapTotal,
 * heapUsed, external, in bytes, with `t` in ms since start) as one JSON line to the file named by
 * `SVC_MEM_LOG` every `SVC_MEM_INTERVAL_MS` (default 1000). SIGTERM/SIGINT shut svc down
 * gracefully, as for main.ts.
 */
import { start } from "../main.ts";
import { loadConfigAsync } from "../src/config/load.ts";
import { tuneMalloc } from "../src/process/malloc.ts";

/** One sample of the process's memory, in bytes (`t`: ms since the probe started). */
export interface MemSample {
  t: number;
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
}

/** Reads the JSON lines a probe wrote. */
export function readSamples(path: string): MemSample[] {
  let text = "";
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return [];
  }
  return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as MemSample);
}

if (import.meta.main) {
  const out = Deno.env.get("SVC_MEM_LOG");
  const every = Number(Deno.env.get("SVC_MEM_INTERVAL_MS") ?? 1000);
  const t0 = performance.now();
  const sample = () => {
    if (!out) return;
    const m = Deno.memoryUsage();
    const line: MemSample = {
      t: Math.round(performance.now() - t0),
      rss: m.rss,
      heapTotal: m.heapTotal,
      heapUsed: m.heapUsed,
      external: m.external,
    };
    Deno.writeTextFileSync(out, JSON.stringify(line) + "\n", { append: true });
  };
  const timer = setInterval(sample, every);
  // As main.ts does before it serves.
  tuneMalloc();
  const server = await start(await loadConfigAsync());
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(sig, async () => {
      clearInterval(timer);
      sample();
      await server.shutdown();
      Deno.exit(0);
    });
  }
}
