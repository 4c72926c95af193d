/**
 * Summaries of V8 CPU profiles (`.cpuprofile`, as `deno run --cpu-prof` writes them): self time
 * per function and per source file, for bench/pk_cpu.ts.
 */

/** A `.cpuprofile` as V8 writes it (the fields used here). */
interface CpuProfile {
  nodes: {
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }[];
  samples: number[];
  timeDeltas: number[];
}

/** One row of a profile summary. */
export interface ProfileEntry {
  name: string;
  /** Share of all samples, in percent. */
  pct: number;
}

/**
 * Self time of a profile by function and by file, and inclusive time (the function or anything
 * it called) by function (top `n` each), in percent of the busy (not idle) samples.
 */
export function summarizeProfile(
  path: string,
  n = 25,
): {
  samples: number;
  functions: ProfileEntry[];
  files: ProfileEntry[];
  inclusive: ProfileEntry[];
} {
  const p = JSON.parse(Deno.readTextFileSync(path)) as CpuProfile;
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const self = new Map<number, number>();
  for (const s of p.samples) self.set(s, (self.get(s) ?? 0) + 1);
  const fns = new Map<string, number>();
  const files = new Map<string, number>();
  const short = (url: string) =>
    url.replace(/^file:\/\//, "").replace(/^.*\/node_modules\/\.deno\//, "npm:")
      .replace(/^.*\/(src|bench)\//, "$1/");
  for (const [id, count] of self) {
    const f = byId.get(id)!.callFrame;
    if (f.functionName === "(idle)") continue;
    const file = f.url ? short(f.url) : "(native)";
    const fn = `${f.functionName || "(anonymous)"} ${file}${f.url ? `:${f.lineNumber + 1}` : ""}`;
    fns.set(fn, (fns.get(fn) ?? 0) + count);
    files.set(file, (files.get(file) ?? 0) + count);
  }
  const parent = new Map<number, number>();
  for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
  const incl = new Map<string, number>();
  for (const [id, count] of self) {
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const f = byId.get(at)!.callFrame;
      if (!f.url) continue;
      seen.add(`${f.functionName || "(anonymous)"} ${short(f.url)}:${f.lineNumber + 1}`);
    }
    for (const k of seen) incl.set(k, (incl.get(k) ?? 0) + count);
  }
  let idle = 0;
  for (const [id, count] of self) {
    if (byId.get(id)!.callFrame.functionName === "(idle)") idle += count;
  }
  fns.delete("(idle) (native)");
  const total = p.samples.length - idle || 1;
  const top = (m: Map<string, number>) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, c]) => ({
      name,
      pct: (c / total) * 100,
    }));
  return {
    samples: total,
    functions: top(fns),
    files: top(files),
    inclusive: top(incl),
  };
}
