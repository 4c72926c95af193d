/**
 * The supervisor replaces a worker that dies and hands the replacement the current state
 * (src/process/supervisor.ts), with a stand-in worker (tests/fixtures/crashing_worker.ts) that
 * dies of an uncaught error after its first state, and a real database for the state.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { supervise } from "../../src/process/supervisor.ts";
import { testConfig } from "../helpers/server.ts";

Deno.test({
  name: "a worker that dies is replaced and receives the current state",
  async fn() {
    const uri = await chinookDb();
    Deno.env.delete("SVC_TEST_CRASHED");
    const cfg = testConfig(uri, [
      "--pg.query.wellknown_path=/nonexistent",
      "--http.metrics.enable=false",
    ]);
    const events: Record<string, number>[] = [];
    const channel = new BroadcastChannel("svc-test-crashing-worker");
    channel.onmessage = (e) => events.push(e.data);
    const url = new URL("../fixtures/crashing_worker.ts", import.meta.url).href;
    const sup = await supervise(cfg, 2, url);
    try {
      await sup.ready;
      const end = Date.now() + 15000;
      const count = (f: (x: Record<string, number>) => boolean) => events.filter(f).length;
      while (count((x) => x.state === 0) < 2 && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(Deno.env.get("SVC_TEST_CRASHED"), "1", "worker 0 died");
      assert.equal(count((x) => x.started === 0), 2, "worker 0 was started again");
      assert.equal(count((x) => x.started === 1), 1, "worker 1 was left alone");
      const states = events.filter((x) => x.state === 0);
      assert.equal(states.length, 2, "the replacement received the state");
      assert.ok(states[1].relations > 10, "the current state, introspected once");
    } finally {
      await sup.shutdown();
      channel.close();
      Deno.env.delete("SVC_TEST_CRASHED");
      await stopDb();
    }
  },
});
