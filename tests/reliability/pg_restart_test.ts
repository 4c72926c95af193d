/**
 * Fault: PostgreSQL restarted under concurrent load. The server process must stay alive through
 * every restart and serve again within 1 s of the database being back (issue: svc exited with
 * `Cannot read properties of null (reading 'write')` from postgres.js).
 */
import assert from "node:assert/strict";
import { chinookDb, testCluster } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";

const RESTARTS = 10;
const CLIENTS = 4;

Deno.test({
  name: "PostgreSQL restarted 10 times under load: svc stays up and serves within 1 s",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await testCluster();
    const uri = await chinookDb();
    const svc = await spawnSvc([
      `--pg.uri=${uri}`,
      "--pg.pool_size=4",
      ...(Deno.env.get("DEBUG_RESTART")
        ? ["--dev", "--logging.level=info"]
        : ["--logging.level=error"]),
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
        await new Promise((r) => setTimeout(r, 300)); // load against a running database
        console.error("restart", i);
        await cluster.ctl(["restart", "-m", "fast", "-w"]);
        console.error("restarted", i);
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
      console.error("waiting clients");
      await Promise.all(clients);
      console.error("clients done");
      if (Deno.env.get("DEBUG_RESTART")) {
        setTimeout(
          () =>
            console.error(
              svc.output().split("\n").filter((l) => !l.includes('"GET /svc')).join("\n"),
            ),
          15000,
        );
      }
      assert.equal(exited, null, svc.output());
      const worst = Math.max(...recoveries);
      assert(worst < 1000, `recovery took ${worst} ms (all: ${recoveries.join(", ")})`);
      assert((statuses.get(200) ?? 0) > 0, "no request succeeded under load");
      // Every failure during an outage is a clean 503, never a 500 or a dropped connection.
      for (const s of statuses.keys()) {
        assert(s === 200 || s === 503, `unexpected status ${s}: ${JSON.stringify([...statuses])}`);
      }
    } finally {
      if (Deno.env.get("DEBUG_RESTART")) {
        console.error(
          svc.output().split("\n").filter((l) =>
            l.includes("DEBUG") || l.includes("uncaught") || l.includes("ERROR")
          ).join("\n"),
        );
      }
      await svc.stop();
    }
  },
});
