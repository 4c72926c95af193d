/**
 * Long reliability runs. `deno task soak --fuzz 100000` starts a private PostgreSQL with Chinook
 * and the reliability fixtures, runs svc (as the NOINHERIT `authenticator`) and runs the fuzz
 * properties of tests/reliability/fuzz.ts for that many cases in total, then prints counts per
 * status and code, the canary's state and the server's health. `--seed <n>` (or FUZZ_SEED)
 * reproduces a run. Already-reported open issues (tests/reliability/invariants.ts
 * `knownOpenIssue`) are counted as `KNOWN` unless `--strict`. Exits 1 when an invariant broke.
 */
import { parseArgs } from "node:util";
import { stopDb } from "../tests/helpers/db.ts";
import { fuzzSettings, properties, SHARES } from "../tests/reliability/fuzz.ts";
import { Tally } from "../tests/reliability/invariants.ts";
import { CANARY_OK, canaryState, startTarget } from "../tests/reliability/target.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { fuzz: { type: "string" }, seed: { type: "string" }, strict: { type: "boolean" } },
  strict: false,
});

if (values.fuzz === undefined) {
  console.error("usage: deno task soak --fuzz <cases> [--seed <n>] [--strict]");
  Deno.exit(2);
}

const settings = fuzzSettings(Number(values.fuzz));
const seed = values.seed !== undefined ? Number(values.seed) : settings.seed;
const runs = Number(values.fuzz);
const rss0 = Deno.memoryUsage().rss;
const target = await startTarget("soak_fuzz");
const tally = new Tally();
const failures: string[] = [];
const t0 = performance.now();
console.log(`fuzz: ${runs} cases, seed ${seed}`);
for (const p of await properties(target, tally, !values.strict)) {
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
const canary = await canaryState(target.db);
const ready = await fetch(`${target.srv.url}/svc/health/ready`);
await ready.body?.cancel();
const rss1 = Deno.memoryUsage().rss;
console.log(
  `\n${tally.total} answers in ${seconds.toFixed(1)} s (${(tally.total / seconds).toFixed(0)}/s)`,
);
console.log(`counts per status and code (status 0: loadConfig outcomes):\n${tally.report()}`);
console.log(`undocumented 5xx: ${tally.serverErrors}`);
console.log(`canary: ${canary === CANARY_OK ? "intact, never served" : `CHANGED: ${canary}`}`);
console.log(`server: ready ${ready.status}`);
console.log(
  `process RSS (svc in-process with the fuzzer): ${(rss0 / 2 ** 20).toFixed(0)} → ${
    (rss1 / 2 ** 20).toFixed(0)
  } MiB`,
);
await target.stop();
await stopDb();
const ok = failures.length === 0 && canary === CANARY_OK && ready.status === 200 &&
  tally.serverErrors === 0;
console.log(ok ? "PASS" : `FAIL (${failures.length} properties failed)`);
Deno.exit(ok ? 0 : 1);
