/**
 * Fault: PostgreSQL restarted under concurrent load. The server process must stay alive through
 * every restart and serve again within 1 s of the database being back (issue: svc exited with
 * `Cannot read properties of null (reading 'write')` from the driver it used before src/pg/).
 */
import assert from "node:assert/strict";
import { chinookDb, testCluster } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";
import { waitFor } from "../helpers/wait.ts";

const RESTARTS = 10;
const CLIENTS = 4;

Deno.test({
  name: "PostgreSQL restarted 10 times under load: svc stays up and serves within 1 s",
  async fn() {
    const cluster = await testCluster();
    const uri = await chinookDb();
    // Two workers with two connections each: small per-worker pools made a request hang for ever
    // when a reserved connection's socket errored and more of its queries were sent before the
    // close event (src/pg/ fails everything pending on a connection the moment it dies).
    const svc = await spawnSvc([
      `--pg.uri=${uri}`,
      "--pg.pool_size=4",
      "--http.workers=2",
      "--logging.level=error",
    ]);
    let exited: Deno.CommandStatus | null = null;
    svc.child.status.then((s) => (exited = s));
    try {
      await svc.waitHealthy();
      const target = `${svc.url}/svc?relation=genre&limit=3`;
      let stop = false;
      const statuses = new Map<number, number>();
      const clients = Array.from({ length: CLIENTS }, async () => {
        while (!stop && !exited) {
          try {
            const r = await fetch(target, { signal: AbortSignal.timeout(10_000) });
            await r.body?.cancel();
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
          } catch {
            statuses.set(0, (statuses.get(0) ?? 0) + 1);
            await new Promise((r) => setTimeout(r, 20));
          }
        }
      });
      const recoveries: number[] = [];
      for (let i = 0; i < RESTARTS; i++) {
        // Load against a running database: requests served since the last restart, for at least
        // 300 ms (the restarts are spaced: a scenario parameter, not a wait for a condition).
        // Restarting again while svc is still reconnecting is another case, not covered here.
        const ok = statuses.get(200) ?? 0;
        const since = performance.now();
        await waitFor(
          () =>
            exited ||
            (statuses.get(200) ?? 0) >= ok + 2 * CLIENTS && performance.now() - since >= 300,
          { what: "requests served by the running database" },
        );
        await cluster.ctl(["restart", "-m", "fast", "-w"]);
        const t0 = performance.now();
        let served = false;
        let last = "";
        while (!served && performance.now() - t0 < 5000 && !exited) {
          const r = await fetch(target, { signal: AbortSignal.timeout(5000) }).catch((e) => {
            last = String(e);
            return null;
          });
          if (r) {
            served = r.status === 200;
            last = `${r.status} ${await r.text()}`;
          }
        }
        recoveries.push(Math.round(performance.now() - t0));
        assert(!exited, `svc exited after restart ${i + 1}:\n${svc.output()}`);
        assert(served, `not served within 5 s after restart ${i + 1}: ${last}`);
      }
      stop = true;
      await Promise.all(clients);
      assert.equal(exited, null, svc.output());
      const worst = Math.max(...recoveries);
      assert(worst < 1000, `recovery took ${worst} ms (all: ${recoveries.join(", ")})`);
      assert((statuses.get(200) ?? 0) > 0, "no request succeeded under load");
      // Every failure during an outage is a clean 503, never a 500 or a dropped connection.
      for (const s of statuses.keys()) {
        assert(s === 200 || s === 503, `unexpected status ${s}: ${JSON.stringify([...statuses])}`);
      }
      // The fix is in the driver: the process guard never had to absorb an error.
      assert(!/uncaught error|unhandled promise/.test(svc.output()), svc.output());
    } finally {
      await svc.stop();
    }
  },
});

Deno.test({
  name: "PostgreSQL stopped: 503 PG_UNAVAILABLE with Retry-After within pg.connect_timeout",
  async fn() {
    const cluster = await testCluster();
    const uri = await chinookDb();
    const svc = await spawnSvc([
      `--pg.uri=${uri}`,
      "--pg.pool_size=4",
      "--pg.connect_timeout=2",
      "--logging.level=error",
    ]);
    try {
      await svc.waitHealthy();
      const target = `${svc.url}/svc?relation=genre&limit=3`;
      const warm = await fetch(target);
      assert.equal(warm.status, 200);
      await warm.body?.cancel();
      await cluster.ctl(["stop", "-m", "fast", "-w"]);
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const r = await fetch(target, { signal: AbortSignal.timeout(10_000) });
        const ms = performance.now() - t0;
        assert.equal(r.status, 503);
        assert.equal(r.headers.get("x-svc-errorcode"), "PG_UNAVAILABLE");
        assert.equal(r.headers.get("retry-after"), "1");
        await r.body?.cancel();
        assert.ok(ms < 4000, `outage answer took ${ms} ms`); // connect_timeout 2 s + margin
      }
      const live = await fetch(`${svc.url}/svc/health/live`);
      assert.equal(live.status, 200);
      await live.body?.cancel();
      const t1 = performance.now();
      const ready = await fetch(`${svc.url}/svc/health/ready`);
      assert.equal(ready.status, 503);
      await ready.body?.cancel();
      assert.ok(performance.now() - t1 < 2500, "ready must answer within about 1 s (+ margin)");
      await cluster.ctl(["start", "-w"]);
      const t2 = performance.now();
      let served = false;
      while (!served && performance.now() - t2 < 5000) {
        const r = await fetch(target, { signal: AbortSignal.timeout(5000) });
        served = r.status === 200;
        await r.body?.cancel();
      }
      const recovery = performance.now() - t2;
      assert.ok(served && recovery < 1000, `served again after ${recovery} ms`);
    } finally {
      await svc.stop();
    }
  },
});
