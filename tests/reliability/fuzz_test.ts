/**
 * Bounded fuzzing (≈ 2,000 cases) against the real server on Chinook, connected as a NOINHERIT
 * `authenticator`: random, mutated and garbage query trees, GET query strings, write payloads,
 * well-known calls, cookie headers, declared-route calls and config files. Invariants: no 5xx
 * but the documented 503/504, no 42601/undefined-object error reaching a client, the canary
 * (owned by `canary_owner`, no grants) unchanged and never served, the server still alive.
 * `FUZZ_SEED=<n>` reproduces a run, `FUZZ_RUNS=<n>` changes its size.
 */
import assert from "node:assert/strict";
import { stopDb } from "../helpers/db.ts";
import { fuzzSettings, properties, SHARES } from "./fuzz.ts";
import { Tally } from "./invariants.ts";
import { CANARY_OK, canaryState, startTarget } from "./target.ts";

const target = await startTarget("fuzz");
const tally = new Tally();
// A fixed default seed keeps CI deterministic; `deno task soak --fuzz N` explores random seeds.
const { seed, runs } = fuzzSettings(2000, 20261123);
const props = await properties(target, tally);

for (const p of props) {
  Deno.test(`fuzz: ${p.name}`, async () => {
    await p.run(Math.max(1, Math.round(runs * SHARES[p.name])), seed);
    assert.equal(await canaryState(target.db), CANARY_OK);
  });
}

Deno.test("fuzz: the server is alive and the canary intact afterwards", async () => {
  const live = await fetch(`${target.url}/svc/health/ready`);
  assert.equal(live.status, 200, await live.text());
  assert.equal(await canaryState(target.db), CANARY_OK);
  assert.equal(tally.serverErrors, 0);
  console.log(`fuzz seed ${seed}, ${tally.total} cases:\n${tally.report()}`);
  await target.stop();
  await stopDb();
});
