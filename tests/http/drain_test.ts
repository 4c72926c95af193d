/**
 * Reload drain (README: reload): requests in flight finish before the swap; past
 * reload.drain_timeout they are cancelled in the database; requests arriving meanwhile are held
 * and then served by the new state.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, psql, scalar, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { staysPending, waitFor } from "../helpers/wait.ts";

const uri = await chinookDb(
  "drain",
  `
  create function slow(seconds float) returns table (done int) language plpgsql stable as $$
  begin perform pg_sleep(seconds); return query select 1; end $$;
  grant execute on function slow(float) to "~anonymous";
  -- Blocks until the test releases its advisory lock 4242: an in-flight request on demand.
  create function drain_gate() returns int language plpgsql volatile as $$
  begin perform pg_advisory_xact_lock(4242); return 7; end $$;
  grant execute on function drain_gate() to "~anonymous";
  create function drain_gone() returns int language sql as 'select 1';
  grant execute on function drain_gone() to "~anonymous";
`,
);
// drain_timeout is well above the 1 s in which the first test shows nothing moves during a drain.
const srv = await startServer(uri, ["--reload.drain_timeout=4"]);
const runtime = srv.server.runtime;
const lockHolder = sqlClient(uri);

/** svc's backends waiting on `event` (pg_stat_activity.wait_event: advisory, PgSleep). */
async function waiting(event: string): Promise<number> {
  return Number(
    await scalar(
      `select count(*) from pg_stat_activity where application_name = 'svc'
         and state = 'active' and wait_event = '${event}'`,
      "drain",
    ),
  );
}

// Shown to fail (a) when Runtime.enter does not wait while a reload holds (the request is never
// held: timeout waiting for runtime.held, and the old state answers it 404), and (b) when
// Runtime.hold does not await the drain (the new state is swapped in and the held request answered
// while the in-flight one still runs: staysPending fails).
Deno.test("an in-flight request finishes before the reload swaps; held requests then get the new state", async () => {
  // The old state knows drain_gate and drain_gone, not drain_new (created below).
  const order: string[] = [];
  await lockHolder`select pg_advisory_lock(4242)`;
  let inflight: Promise<Response>, held: Promise<Response>, reload: Promise<boolean>;
  try {
    inflight = srv.post("/svc", { function: "drain_gate" }).then((r) => {
      order.push("in-flight");
      return r;
    });
    await waitFor(() => waiting("advisory").then((n) => n === 1), {
      what: "the in-flight request blocked in the database",
    });
    assert.equal(runtime.inflight, 1);
    // The schema changes under the old state: a relation appears, a function disappears.
    await psql(
      `create table drain_new (id int); insert into drain_new values (1), (2);
       grant select on drain_new to "~anonymous"; drop function drain_gone();`,
      "drain",
    );
    const before = await srv.post("/svc", { relation: "drain_new" });
    assert.equal(before.status, 404, "the old state does not know drain_new");
    await before.body?.cancel();

    reload = runtime.reload("signal");
    held = srv.post("/svc", { relation: "drain_new" }).then((r) => {
      order.push("held");
      return r;
    });
    await waitFor(() => runtime.held === 1, { what: "the new request held by the reload" });
    // Still blocked: nothing has been answered and the reload has not swapped.
    assert.equal(await waiting("advisory"), 1);
    // Neither the held request nor the reload may get anywhere while the in-flight one runs.
    assert.ok(await staysPending([held, reload], 1000), "answered or swapped during the drain");
    assert.deepEqual(order, []);
  } finally {
    await lockHolder`select pg_advisory_unlock(4242)`;
  }
  const res = await inflight;
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), [{ drain_gate: 7 }]);
  assert.equal(await reload, true);
  const h = await held;
  assert.equal(h.status, 200, "the held request is served by the new state");
  assert.deepEqual(await h.json(), [{ id: 1 }, { id: 2 }]);
  assert.deepEqual(order, ["in-flight", "held"]);
  // And the new state no longer has the function the old one served.
  const gone = await srv.post("/svc", { function: "drain_gone" });
  assert.equal(gone.status, 404);
  await gone.body?.cancel();
});

Deno.test("past drain_timeout the in-flight statement is cancelled and the reload proceeds", async () => {
  const inflight = srv.post("/svc", { function: "slow", arguments: [30] });
  await waitFor(() => waiting("PgSleep").then((n) => n === 1), {
    what: "the slow statement running",
  });
  const t0 = performance.now();
  const ok = await runtime.reload("signal");
  assert.equal(ok, true);
  const res = await inflight;
  const elapsed = performance.now() - t0;
  assert.equal(res.status, 504);
  assert.equal(res.headers.get("x-svc-errorcode"), "PG_57014");
  await res.body?.cancel();
  // drain_timeout is 4 s; the statement would run 30 s.
  assert.ok(elapsed < 20_000, `cancelled after ${elapsed} ms`);
  assert.equal(await waiting("PgSleep"), 0);
  const after = await srv.post("/svc", { relation: "genre", limit: 1 });
  assert.equal(after.status, 200);
  await after.body?.cancel();
});

Deno.test("teardown", async () => {
  await lockHolder.end();
  await srv.stop();
  await stopDb();
});
