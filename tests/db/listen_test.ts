/**
 * The reload listener (src/db/listen.ts) against a real PostgreSQL: notifications arrive on a
 * connection of its own; a listen backend terminated with pg_terminate_backend, or a server
 * restart, is followed by a new connection that LISTENs again (and a reload, since notifications
 * were missed) and notifications keep working; a burst of notifications makes few reloads; other
 * payloads reload nothing; channel names are checked and quoted.
 */
import assert from "node:assert/strict";
import {
  channelProblem,
  Coalescer,
  isReloadPayload,
  listenBackoffMs,
  Listener,
  listenForReload,
  quoteChannel,
} from "../../src/db/listen.ts";
import { readUris, topologyProblem } from "../../src/db/topology.ts";
import { emptyDb, psql, scalar, stopDb, testCluster } from "../helpers/db.ts";
import { waitFor } from "../helpers/wait.ts";
import { loadConfig } from "../../src/config/load.ts";

const T = { sanitizeResources: false, sanitizeOps: false };
const DB = "listen";

/** Listen backends of `channel`'s listener (by application_name), as the server sees them. */
async function listenPids(): Promise<string> {
  return await scalar(
    "select coalesce(string_agg(pid::text, ',' order by pid), '') from pg_stat_activity " +
      "where application_name = 'svc-listen'",
    DB,
  );
}

Deno.test({
  ...T,
  name: "listen: re-LISTEN after pg_terminate_backend and after a restart; notifications go on",
  async fn() {
    const uri = await emptyDb(DB);
    const payloads: string[] = [];
    let reconnects = 0;
    const l = new Listener({
      uri,
      channel: "svc test",
      onNotification: (p) => payloads.push(p),
      onReconnect: () => reconnects++,
    }).start();
    try {
      await l.listened();
      const first = l.backendPid!;
      assert.equal(await listenPids(), String(first));
      await psql(`notify "svc test", 'one'`, DB);
      await waitFor(() => payloads.length === 1, { what: "the first notification" });
      assert.equal(reconnects, 0);

      await psql(`select pg_terminate_backend(${first})`, DB);
      await l.listened(2);
      assert.notEqual(l.backendPid, first);
      assert.equal(reconnects, 1);
      await psql(`notify "svc test", 'two'`, DB);
      await waitFor(() => payloads.length === 2, { what: "a notification after re-LISTEN" });

      // The whole server restarts: attempts back off until it is back, then LISTEN again.
      const c = await testCluster();
      await c.ctl(["restart", "-m", "fast", "-w"]);
      await l.listened(3);
      assert.equal(reconnects, 2);
      await psql(`select pg_notify('svc test', 'three')`, DB);
      await waitFor(() => payloads.length === 3, { what: "a notification after a restart" });
      assert.deepEqual(payloads, ["one", "two", "three"]);
      // One listen connection at a time.
      assert.equal(await listenPids(), String(l.backendPid));
    } finally {
      await l.close();
    }
    assert.equal(l.listening, false);
    await waitFor(async () => (await listenPids()) === "", { what: "the listen backend gone" });
  },
});

Deno.test({
  ...T,
  name: "listen: listenForReload reloads on 'reload', on empty payloads and after a reconnect",
  async fn() {
    const uri = await emptyDb(DB);
    let reloads = 0;
    const r = listenForReload({ channel: "svc", uri }, () => {
      reloads++;
      return Promise.resolve(true);
    }, { delayMs: 20 })!;
    try {
      await r.listener.listened();
      await psql(`notify svc, 'reload'`, DB);
      await waitFor(() => reloads === 1, { what: "a reload" });
      await psql(`notify svc`, DB);
      await waitFor(() => reloads === 2, { what: "a reload on an empty payload" });
      // Another payload reloads nothing (a reload would be scheduled as it arrives).
      await waitFor(() => !r.pending, { what: "no reload pending" });
      await psql(`notify svc, 'something else'`, DB);
      await waitFor(() => r.ignored === 1, { what: "the other payload" });
      assert.equal(r.pending, false);
      assert.equal(reloads, 2);
      await psql(`notify svc, ' RELOAD '`, DB);
      await waitFor(() => reloads === 3, { what: "a reload on ' RELOAD '" });
      await waitFor(() => !r.pending, { what: "no reload pending" });
      await psql(`select pg_terminate_backend(${r.listener.backendPid})`, DB);
      await r.listener.listened(2);
      await waitFor(() => reloads === 4, { what: "the reload after a reconnect" });
      await waitFor(() => !r.pending, { what: "no reload pending" });
      assert.equal(reloads, 4);
    } finally {
      await r.close();
    }
    assert.equal(listenForReload({ channel: "", uri }, () => Promise.resolve(true)), null);
  },
});

Deno.test({
  ...T,
  name: "listen: a burst of notifications makes one reload, one more when it comes mid-reload",
  async fn() {
    let runs = 0;
    let release!: () => void;
    let gate = Promise.resolve();
    const c = new Coalescer(async () => {
      runs++;
      await gate;
    }, 20);
    for (let i = 0; i < 50; i++) c.trigger();
    await waitFor(() => !c.busy, { what: "the burst's reload" });
    assert.equal(runs, 1);
    gate = new Promise((r) => (release = r));
    c.trigger();
    await waitFor(() => runs === 2, { what: "a reload started" });
    // Notifications while it runs: the catalog may have changed after it read it.
    for (let i = 0; i < 10; i++) c.trigger();
    release();
    await waitFor(() => !c.busy, { what: "the follow-up reload" });
    assert.equal(runs, 3);
    await c.close();
    c.trigger();
    assert.equal(c.busy, false);
  },
});

Deno.test("listen: channel names are checked and quoted; payloads; backoff", () => {
  assert.equal(quoteChannel("svc"), `"svc"`);
  assert.equal(quoteChannel(`a"b c`), `"a""b c"`);
  assert.equal(channelProblem("x".repeat(63)), null);
  assert.match(channelProblem("x".repeat(64))!, /64 bytes/);
  assert.match(channelProblem("é".repeat(32))!, /64 bytes/);
  assert.match(channelProblem("")!, /empty/);
  assert.match(channelProblem("a\0b")!, /NUL/);
  assert.match(channelProblem(" svc")!, /blanks/);
  assert.throws(() => quoteChannel("a\0"), /NUL/);
  assert.ok(isReloadPayload("reload") && isReloadPayload(" Reload\n") && isReloadPayload(""));
  assert.ok(!isReloadPayload("reload schema") && !isReloadPayload("x"));
  assert.deepEqual([0, 1, 2, 3, 8, 20].map(listenBackoffMs), [0, 100, 200, 400, 5000, 5000]);
});

Deno.test("listen: configuration keys of a replicated deployment", () => {
  const load = (...args: string[]) => loadConfig({ args, env: {} });
  const d = load();
  assert.equal(d.pg.notify_channel, "svc");
  assert.deepEqual(d.pg.read_uri, []);
  assert.equal(d.pg.read_max_lag, 5);
  assert.throws(() => load("--pg.notify_channel=" + "x".repeat(64)), /pg\.notify_channel/);
  assert.equal(load("--pg.notify_channel=").pg.notify_channel, "");
  assert.throws(() => load("--pg.read_uri=postgres://r/db", "--pg.read_pool_size=0"), /read_pool/);
  assert.throws(() => load("--pg.read_primary_claim="), /read_primary_claim/);
  const multi = load(
    "--pg.read_uri=postgres://u@r1,r2:5433/db?sslmode=require, postgresql://u@r3/db,host=a,b dbname=x",
  );
  assert.deepEqual(multi.pg.read_uri, [
    "postgres://u@r1,r2:5433/db?sslmode=require",
    "postgresql://u@r3/db",
    "host=a,b dbname=x",
  ]);
  assert.deepEqual(readUris(["postgres://a/x", "postgres://b/x"]), [
    "postgres://a/x",
    "postgres://b/x",
  ]);
  assert.equal(
    topologyProblem({ ...d.pg, read_uri: ["postgres://a/x"], read_pool_size: 1 }),
    null,
  );
});

Deno.test({ ...T, name: "listen: stop the cluster", fn: stopDb });
