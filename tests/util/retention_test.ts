/**
 * The long-lived structures that every request enters and leaves keep nothing of a request that
 * left: in a process of its own (tests/fixtures/retention_probe.ts), after a full collection moved
 * each structure to the old generation, 20,000 requests of about a kilobyte pass 50 at a time with
 * a scavenge every 500, and the old generation may grow by at most 16 bytes per request.
 *
 * The defect this guards against: a Set or Map that entries enter and leave all the time replaces
 * its hash table every few changes, and V8 links each replaced table to the next one. An old table
 * (a mark-compact promotes the young one) then keeps every later table, and what they held,
 * alive through scavenges: the client watch's Set promoted ≈ 890 bytes per request here (≈ 300 KB
 * per scavenge under load, a mark-compact a second), the session cache's delete-and-set on every
 * hit ≈ 46 (docs/performance.md, "Garbage collection").
 */
import assert from "node:assert/strict";
import { runProbe } from "../helpers/probe.ts";

const PROBE = new URL("../fixtures/retention_probe.ts", import.meta.url).pathname;

for (const name of ["client-watch", "session-cache", "deadlines", "in-flight", "read-cache"]) {
  Deno.test(`${name}: a request that left is not kept through scavenges`, async () => {
    const { text, result } = await runProbe<{ requests: number; perRequest: number }>(
      PROBE,
      [name],
      { denoArgs: ["--v8-flags=--expose-gc,--max-semi-space-size=4"] },
    );
    assert.equal(result.requests, 20_000, text);
    assert.ok(result.perRequest < 16, text);
  });
}
