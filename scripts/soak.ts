/**
 * Long reliability runs. `deno task soak --fuzz 100000` starts a private PostgreSQL with Chinook
 * and the reliability fixtures, runs svc as its own process (connected as the NOINHERIT
 * `authenticator`) and runs the fuzz
 * properties of tests/reliability/fuzz.ts for that many cases in total, then prints counts per
 * status and code, the canary's state, the server's health and its RSS over time. `--seed <n>` (or FUZZ_SEED)
 * reproduces a run. Already-reported open issues (tests/reliability/invariants.ts
 * `knownOpenIssue`) are counted as `KNOWN` unless `--strict`. Exits 1 when an invariant broke.
 */
import { parseArgs } from "node:util";
import { soakLoadMain } from "./soak_load.ts";
import { stopDb } from "../tests/helpers/db.ts";
import { fuzzSettings, properties, SHARES } from "../tests/reliability/fuzz.ts";
import { Tally } from "../tests/reliability/invariants.ts";
import { CANARY_OK, canaryState, startTargetProcess } from "../tests/reliability/target.ts";

// `--minutes M`: the mixed-load soak (scripts/soak_load.ts) instead of the fuzz run.
if (Deno.args.some((a) => a === "--minutes" || a.startsWith("--minutes="))) {
  await soakLoadMain(Deno.args);
}

const { values } = parseArgs({
  args: Deno.args,
  options: { fuzz: { type: "string" }, seed: { type: "string" }, strict: { type: "boolean" } },
  strict: false,
});

if (values.fuzz === undefined) {
  console.error(
    "usage: deno task soak --fuzz <cases> [--seed <n>] [--strict] | --minutes <m> [--connections <n>]",
  );
  Deno.exit(2);
}

const settings = fuzzSettings(Number(values.fuzz));
const seed = values.seed !== undefined ? Number(values.seed) : settings.seed;
const runs = Number(values.fuzz);
/** Resident set size of a process in MiB (Linux), or NaN. */
function rssMiB(pid: number | undefined): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(Deno.readTextFileSync(`/proc/${pid}/status`));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

const target = await startTargetProcess("soak_fuzz");
// Ctrl-C / SIGTERM: stop svc and the private cluster instead of leaving them behind.
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(sig, async () => {
    console.log(`\n${sig}: stopping svc and the database`);
    await target.stop().catch(() => {});
    await stopDb().catch(() => {});
    Deno.exit(130);
  });
}
let exited: string | null = null;
target.exited.then((why) => (exited = why));
const rss: number[] = [rssMiB(target.pid)];
const sampler = setInterval(() => rss.push(rssMiB(target.pid)), 10_000);
const tally = new Tally();
const failures: string[] = [];
const t0 = performance.now();
console.log(`fuzz: ${runs} cases, seed ${seed}`);
for (const p of await properties(target, tally, !values.strict)) {
  if (exited) break;
  const n = Math.max(1, Math.round(runs * SHARES[p.name]));
  const t = performance.now();
  try {
    await p.run(n, seed);
    console.log(`  ${p.name}: ${n} cases ok (${((performance.now() - t) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failures.push(`${p.name}: ${(e as Error).message}`);
    console.log(`  ${p.name}: FAILED\n${(e as Error).message}`);
  }
}
const seconds = (performance.now() - t0) / 1000;
clearInterval(sampler);
rss.push(rssMiB(target.pid));
const canary = await canaryState(target.db);
const ready = await fetch(`${target.url}/svc/health/ready`).catch(() =>
  new Response(null, { status: 599 })
);
await ready.body?.cancel();
console.log(
  `\n${tally.total} answers in ${seconds.toFixed(1)} s (${(tally.total / seconds).toFixed(0)}/s)`,
);
console.log(`counts per status and code (status 0: loadConfig outcomes):\n${tally.report()}`);
console.log(`undocumented 5xx: ${tally.serverErrors}`);
console.log(`canary: ${canary === CANARY_OK ? "intact, never served" : `CHANGED: ${canary}`}`);
console.log(`server: ${exited ?? `alive, ready ${ready.status}`}`);
console.log(`svc RSS every 10 s (MiB): ${rss.map((r) => r.toFixed(0)).join(" ")}`);
await target.stop();
await stopDb();
const ok = !exited && failures.length === 0 && canary === CANARY_OK && ready.status === 200 &&
  tally.serverErrors === 0;
console.log(ok ? "PASS" : `FAIL (${failures.length} properties failed)`);
Deno.exit(ok ? 0 : 1);
