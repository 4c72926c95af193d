/**
 * Reload drain (DECISIONS.md §7): requests in flight finish before the swap; past
 * reload.drain_timeout they are cancelled in the database; requests arriving meanwhile are held
 * and then served by the new state.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "drain",
  `
  create function slow(seconds float) returns table (done int) language plpgsql stable as $$
  begin perform pg_sleep(seconds); return query select 1; end $$;
  grant execute on function slow(float) to "~anonymous";
`,
);
const srv = await startServer(uri, ["--reload.drain_timeout=1"]);
const slow = (s: number) => srv.post("/svc", { function: "slow", arguments: [s] });

Deno.test("an in-flight request finishes before the reload swaps; new requests wait", async () => {
  const t0 = performance.now();
  const inflight = slow(0.4);
  await new Promise((r) => setTimeout(r, 100));
  const reload = srv.server.runtime.reload("signal");
  await new Promise((r) => setTimeout(r, 20));
  const held = srv.post("/svc", { relation: "genre", limit: 1 });
  const res = await inflight;
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), [{ slow: 1 }]); // single-column RETURNS TABLE is scalar-typed
  const tDone = performance.now() - t0;
  assert.equal(await reload, true);
  const h = await held;
  assert.equal(h.status, 200);
  await h.body?.cancel();
  assert.ok(tDone >= 400);
});

Deno.test("past drain_timeout the in-flight statement is cancelled and the reload proceeds", async () => {
  const t0 = performance.now();
  const inflight = slow(10);
  await new Promise((r) => setTimeout(r, 100));
  const ok = await srv.server.runtime.reload("signal");
  assert.equal(ok, true);
  const res = await inflight;
  const elapsed = performance.now() - t0;
  assert.equal(res.status, 504);
  assert.equal(res.headers.get("x-svc-errorcode"), "PG_57014");
  await res.body?.cancel();
  assert.ok(elapsed < 5000, `cancelled after ${elapsed} ms`);
  const after = await srv.post("/svc", { relation: "genre", limit: 1 });
  assert.equal(after.status, 200);
  await after.body?.cancel();
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
