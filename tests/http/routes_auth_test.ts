/**
 * `http.functions.allowed_auth` and the one-round-trip route chain, through real HTTP against a
 * real PostgreSQL behind a protocol-counting proxy (tests/fixtures/routes.sql).
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";
import { proxy } from "../helpers/pgproxy.ts";
import { waitFor } from "../helpers/wait.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));
const uri = new URL(await chinookDb("routes_auth", fixture));
const p = proxy(Number(uri.port));
uri.port = String(p.port);
const srv = await startServer(uri.toString(), [
  "--pg.pool_size=1",
  "--http.functions.allowed_auth=^rt\\.(login|guard)$",
]);

async function hits(who: string): Promise<unknown[]> {
  const res = await srv.post("/svc", {
    relation: "hits",
    schema: "rt",
    select: ["who"],
    where: ["=", "who", [who]],
  });
  assert.equal(res.status, 200);
  return await res.json();
}

Deno.test("allowed_auth refuses a rogue function: 403, nothing minted, nothing committed", async () => {
  const res = await srv.post("/rogue", {});
  assert.equal(res.status, 403);
  assert.equal(res.headers.get("x-svc-errorcode"), "AUTH_JWT_NOT_ALLOWED");
  assert.ok(!res.headers.getSetCookie().some((h) => h.startsWith("accesstoken=")));
  await res.body?.cancel();
  assert.deepEqual(await hits("rogue"), [], "the rogue's insert was rolled back");
});

Deno.test("allowed_auth lets a matching function mint", async () => {
  const res = await srv.post("/rt/login", { uid: "ok" });
  assert.equal(res.status, 200);
  assert.ok(res.headers.getSetCookie().some((h) => /^accesstoken=[^;]+\./.test(h)));
  await res.body?.cancel();
});

Deno.test("a terminating middleware is gated by its own name", async () => {
  const t = now();
  const bob = cookie(
    await token({ role: "app_user", uid: "bob", iat: t, exp: t + 1800, auth_time: t }),
  );
  const res = await fetch(srv.url + "/private/hit", { method: "POST", headers: bob });
  assert.equal(res.status, 401, "rt.guard is allowed: it rejects and clears");
  assert.ok(res.headers.getSetCookie().some((h) => h.startsWith("accesstoken=;")));
  await res.body?.cancel();
});

Deno.test("one round trip: begin, role, middleware, route, commit in one burst", async () => {
  // Read once the proxy has seen `executes` statements per request (never after a fixed pause).
  const measure = async (send: () => Promise<Response>, executes: number, n = 10) => {
    for (let i = 0; i < 3; i++) await (await send()).arrayBuffer(); // prepare statements
    Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
    for (let i = 0; i < n; i++) {
      const r = await send();
      assert.equal(r.status, 200);
      await r.arrayBuffer();
    }
    await waitFor(() => p.counters.executes >= executes * n, { what: "every statement sent" });
    return { ...p.counters, n };
  };
  // /rt/login runs under the "/" middleware (rt.blocker): 5 statements, one burst.
  const login = await measure(() => srv.post("/rt/login", { uid: "rt" }), 5);
  assert.equal(login.bursts, login.n, "one round trip per request");
  assert.equal(login.executes, 5 * login.n, "begin, role switch, middleware, route, commit");
  assert.equal(login.parses, 0, "prepared statements reused");
  // /private/hit: two middleware (rt.guard, rt.blocker) and a simple route.
  const t = now();
  const alice = cookie(
    await token({ role: "app_user", uid: "alice", iat: t, exp: t + 1800, auth_time: t }),
  );
  const hit = await measure(
    () => fetch(srv.url + "/private/hit", { method: "POST", headers: alice }),
    6,
  );
  // The whole chain leaves in one write (src/pg/connection.ts): one burst per request.
  assert.ok(hit.bursts <= hit.n, `${hit.bursts} bursts`);
  assert.equal(hit.executes, 6 * hit.n, "begin, role switch, 2 middleware, route, commit");
  assert.equal(hit.parses, 0, "prepared statements reused");
});

Deno.test("teardown", async () => {
  await srv.stop();
  p.close();
  await stopDb();
});
