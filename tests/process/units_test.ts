import assert from "node:assert/strict";
import { poolSlices } from "../../src/process/supervisor.ts";
import { sumPools } from "../../src/process/worker.ts";
import { type Config, ConfigError, loadConfig, workerCount } from "../../src/config/load.ts";
import { LocalOnce } from "../../src/util/once.ts";
import type { SvcError } from "../../src/svc_error.ts";

Deno.test("pg.pool_size is split over workers, the remainder to the first", () => {
  assert.deepEqual(poolSlices(10, 2), [5, 5]);
  assert.deepEqual(poolSlices(10, 3), [4, 3, 3]);
  assert.deepEqual(poolSlices(3, 3), [1, 1, 1]);
  for (const [total, n] of [[7, 4], [100, 16], [16, 16]]) {
    const s = poolSlices(total, n);
    assert.equal(s.reduce((a, b) => a + b, 0), total);
    assert.ok(Math.max(...s) - Math.min(...s) <= 1);
  }
});

Deno.test("http.workers: default one per core, 1 in dev, capped by the pool, at least 1", () => {
  const cfg = (args: string[]): Config => loadConfig({ args, env: {} });
  assert.equal(workerCount(cfg([])), Math.min(navigator.hardwareConcurrency, 10));
  assert.equal(workerCount(cfg(["--dev"])), 1);
  assert.equal(workerCount(cfg(["--http.workers=3"])), 3);
  assert.equal(workerCount(cfg(["--http.workers=8", "--pg.pool_size=4"])), 4);
  assert.throws(() => workerCount(cfg(["--http.workers=0"])), ConfigError);
});

Deno.test("pool figures sum over workers", () => {
  assert.deepEqual(
    sumPools([
      { size: 2, in_use: 1, waiting: 0, overdue: 1 },
      null,
      { size: 3, in_use: 3, waiting: 4, overdue: 0 },
    ]),
    { size: 5, in_use: 4, waiting: 4, overdue: 1 },
  );
});

Deno.test("a key is claimed once per namespace until it expires", () => {
  const once = new LocalOnce();
  const later = Date.now() + 60_000;
  assert.equal(once.claimNow("a", "k", later), true);
  assert.equal(once.claimNow("a", "k", later), false);
  assert.equal(once.claimNow("b", "k", later), true, "namespaces are apart");
  assert.equal(once.claimNow("a", "old", Date.now() - 1), true);
  assert.equal(once.claimNow("a", "old", later), true, "an expired claim can be made again");
});

Deno.test("the in-memory store never forgets an unexpired key: full is SSO_NOT_READY", async () => {
  const once = new LocalOnce(3);
  const now = Date.now();
  for (const k of ["a", "b", "c"]) assert.equal(once.claimNow("ns", k, now + 60_000, now), true);
  assert.equal(once.claimNow("ns", "d", now + 60_000, now), null, "full: refused, not evicted");
  assert.equal(once.claimNow("ns", "a", now + 60_000, now), false, "a is still remembered");
  await assert.rejects(once.claim("ns", "d", Date.now() + 60_000), (e: SvcError) => {
    assert.equal(e.code, "SSO_NOT_READY");
    assert.equal(e.status, 503);
    return true;
  });
  // Once keys expire, their room is reused.
  assert.equal(once.claimNow("ns", "d", now + 120_000, now + 61_000), true);
  assert.equal(once.claimNow("other", "a", now + 60_000, now), true, "namespaces are apart");
});
