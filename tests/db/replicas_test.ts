/**
 * Read replicas (src/db/replicas.ts) below HTTP: the usability verdict, forced primary, pool
 * slices; the monitor against a real streaming replica as an unprivileged login role (up, caught
 * up while the primary is idle, down when stopped, up again after two good checks); a replica
 * pool whose replica refuses connections leases the primary's connection instead and marks the
 * replica down; round robin over usable replicas.
 */
import assert from "node:assert/strict";
import {
  CHECK_SQL,
  primaryForced,
  readPoolSlice,
  ReadTargets,
  ReplicaMonitor,
  ReplicaPool,
  replicaVerdict,
} from "../../src/db/replicas.ts";
import { Database } from "../../src/db/pool.ts";
import { transaction } from "../../src/db/run_as.ts";
import { Client } from "../../src/pg/client.ts";
import { freePort } from "../../src/db/cluster.ts";
import { emptyDb, psql, stopDb, testCluster } from "../helpers/db.ts";
import { replayAge, startReplica } from "../helpers/replica.ts";
import { waitFor } from "../helpers/wait.ts";

const T = { sanitizeResources: false, sanitizeOps: false };
const DB = "replicas";
const anon = { role: "postgres", claims: null };

Deno.test("replicas: the verdict", () => {
  const f = { recovery: true, age: 100, caught_up: true, streaming: true };
  assert.deepEqual(replicaVerdict(f, 5), { up: true, lag: 0 }, "idle primary, caught up");
  assert.deepEqual(replicaVerdict({ ...f, recovery: false }, 5), { up: true, lag: 0 });
  assert.deepEqual(replicaVerdict({ ...f, caught_up: false, age: 2 }, 5), { up: true, lag: 2 });
  const behind = replicaVerdict({ ...f, caught_up: false }, 5);
  assert.equal(behind.up, false);
  assert.match(behind.reason!, /lags 100\.0 s \(pg\.read_max_lag 5 s\)/);
  // Cut off from its primary: serves while its data is at most pg.read_max_lag old.
  assert.equal(replicaVerdict({ ...f, streaming: false, age: 4 }, 5).up, true);
  assert.equal(replicaVerdict({ ...f, streaming: false, age: 6 }, 5).up, false);
  assert.equal(replicaVerdict({ ...f, caught_up: false, age: null }, 5).up, false);
});

Deno.test("replicas: forced primary by header or claim; pool slices", () => {
  const h = (v?: string) => new Headers(v === undefined ? {} : { "x-svc-read": v });
  assert.equal(primaryForced(h("primary"), null, undefined), true);
  assert.equal(primaryForced(h(" PRIMARY "), null, undefined), true);
  assert.equal(primaryForced(h("replica"), null, undefined), false);
  assert.equal(primaryForced(h(), { rp: true }, undefined), false, "no claim configured");
  assert.equal(primaryForced(h(), { rp: true }, "rp"), true);
  assert.equal(primaryForced(h(), { rp: "true" }, "rp"), false, "only true or a time");
  assert.equal(primaryForced(h(), { rp: 1000 }, "rp", 999_000), true);
  assert.equal(primaryForced(h(), { rp: 1000 }, "rp", 1_000_000), false);
  assert.equal(primaryForced(h(), null, "rp"), false);
  assert.deepEqual([0, 1, 2, 3].map((i) => readPoolSlice(10, i, 4)), [3, 3, 2, 2]);
  assert.deepEqual([0, 1, 2].map((i) => readPoolSlice(2, i, 3)), [1, 1, 1], "at least 1");
});

Deno.test({
  ...T,
  name: "replicas: the monitor of a real streaming replica, as an unprivileged role",
  async fn() {
    const uri = await emptyDb(DB, "create role probe login; create table t (a int)");
    const replica = await startReplica(await testCluster());
    const probeUri = `postgres://probe@127.0.0.1:${replica.port}/${DB}`;
    const m = new ReplicaMonitor(probeUri, 1, "replica0");
    try {
      const c = new Client(probeUri);
      const [facts] = await c.query<Record<string, unknown>>(CHECK_SQL);
      await c.close();
      assert.deepEqual([facts.recovery, facts.streaming, facts.caught_up], [true, true, true]);
      m.start();
      await waitFor(() => m.state.up, { what: "the replica up" });
      assert.equal(m.state.lag, 0);
      // An idle primary: no commit for longer than pg.read_max_lag, still caught up.
      await psql("insert into t values (1)", DB);
      await waitFor(async () => await replayAge(replica, DB) > 1.5, {
        what: "the last replayed commit older than 1.5 s",
      });
      await m.check();
      assert.deepEqual({ ...m.state }, { up: true, lag: 0 });
      await replica.ctl(["-m", "fast", "-w", "stop"]);
      await m.check();
      assert.equal(m.state.up, false);
      assert.ok(m.state.reason, "a reason");
      await replica.ctl(["-w", "start"]);
      await waitFor(async () => {
        await m.check();
        return m.state.reason === "usable: checking once more before use";
      }, { what: "a first good check" });
      assert.equal(m.state.up, false, "not used after one good check");
      await m.check();
      assert.equal(m.state.up, true, "used after the second");
    } finally {
      await m.close();
      await replica.remove();
    }
    void uri;
  },
});

Deno.test({
  ...T,
  name: "replicas: a replica refusing connections: its reads lease the primary, marked down",
  async fn() {
    const uri = await emptyDb(DB);
    const primary = new Database(uri, 2);
    const gone = `postgres://postgres@127.0.0.1:${freePort()}/${DB}`;
    const monitors = [0, 1].map((i) => new ReplicaMonitor(gone, 5, `replica${i}`));
    const pools = monitors.map((m, i) => new ReplicaPool(gone, { size: 1 }, i, primary, m));
    const targets = new ReadTargets(primary, pools, "rp");
    try {
      // Usable as far as the monitors know (they never checked): round robin over both.
      for (const m of monitors) m.state = { up: true, lag: 0 };
      const picked = [0, 1, 2, 3].map(() => targets.forRead(new Headers(), null));
      assert.deepEqual(picked.map((d) => (d as ReplicaPool).target), [
        "replica0",
        "replica1",
        "replica0",
        "replica1",
      ]);
      assert.equal(targets.forRead(new Headers({ "x-svc-read": "primary" }), null), primary);
      assert.equal(targets.forRead(new Headers(), { rp: true }), primary);
      // The replica refuses the connection: the read runs on the primary.
      const rows = await transaction(
        pools[0],
        anon,
        (tx) => tx.query("select pg_is_in_recovery() as r, current_database() as d", []),
      );
      assert.deepEqual([...rows], [{ r: false, d: DB }]);
      assert.equal(monitors[0].state.up, false);
      assert.match(monitors[0].state.reason!, /refused|connect/i);
      assert.equal(targets.forRead(new Headers(), null), pools[1], "replica0 skipped");
      monitors[1].markDown(new Error("gone"));
      assert.equal(targets.forRead(new Headers(), null), primary, "none usable");
      assert.deepEqual(targets.health().map((h) => [h.index, h.up]), [[0, false], [1, false]]);
    } finally {
      await targets.close();
      await primary.close();
    }
  },
});

Deno.test({ ...T, name: "replicas: stop the cluster", fn: stopDb });
