/**
 * The demo application (demo/app.sql) through real HTTP against a real PostgreSQL: login mints
 * the session cookie that a following simple route sees as `svc.jwt.claims`, bad credentials
 * are RS401, logout clears the cookie, and the invoices query of the README works with it.
 */
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const appSql = await Deno.readTextFile(new URL("../../demo/app.sql", import.meta.url));
const uri = await chinookDb("routes_login", appSql);
const srv = await startServer(uri);

/** The session cookie of a response (name=value), or null. */
function sessionCookie(res: Response): { value: string; header: string } | null {
  for (const h of res.headers.getSetCookie()) {
    if (h.startsWith("accesstoken=")) return { value: h.slice(12, h.indexOf(";")), header: h };
  }
  return null;
}

Deno.test("login mints a cookie that /me then sees as svc.jwt.claims", async () => {
  const res = await srv.post("/login", { email: "luisg@embraer.com.br", password: "demo" });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { email: "luisg@embraer.com.br", customer_id: 1 });
  const c = sessionCookie(res);
  assert.ok(c && c.value.length > 0, "a session cookie is set");
  assert.match(c.header, /HttpOnly/);
  assert.match(c.header, /Secure/);
  assert.match(c.header, /SameSite=Lax/);
  assert.match(c.header, /Max-Age=1800/);
  const claims = decodeJwt(c.value);
  assert.equal(claims.role, "customer");
  assert.equal(claims.customer_id, 1);
  assert.ok(typeof claims.iat === "number" && typeof claims.exp === "number");
  assert.equal(claims.auth_time, claims.iat);

  const me = await srv.get("/me", { cookie: `accesstoken=${c.value}` });
  assert.equal(me.status, 200);
  assert.deepEqual(await me.json(), {
    email: "luisg@embraer.com.br",
    customer_id: 1,
    role: "customer",
  });

  // The page's invoices query runs as customer (row-level security: only their invoices) with the same cookie.
  const inv = await srv.post("/svc", {
    relation: "invoice",
    where: ["=", "customer_id", 1],
    order_by: [["desc", "invoice_date"]],
  }, { cookie: `accesstoken=${c.value}` });
  assert.equal(inv.status, 200);
  const rows = await inv.json() as { customer_id: number }[];
  assert.ok(rows.length > 0 && rows.every((r) => r.customer_id === 1));
});

Deno.test("bad credentials: RS401 with the function's message, nothing minted", async () => {
  const res = await srv.post("/login", { email: "luisg@embraer.com.br", password: "nope" });
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("x-svc-errorcode"), "RS401");
  const body = await res.json();
  assert.equal(body.code, "RS401");
  assert.equal(body.message, "invalid e-mail or password");
  assert.equal(sessionCookie(res), null);
});

Deno.test("a login from another site's page mints no session (login CSRF); from this site it does", async () => {
  // Found by a hostile client: a cross-site HTML form posting form-urlencoded credentials to
  // /login put the visitor's browser in the attacker's account.
  const form = "email=luisg%40embraer.com.br&password=demo";
  const post = (headers: Record<string, string>) =>
    fetch(srv.url + "/login", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: form,
    });
  for (
    const headers of <Record<string, string>[]> [
      { "sec-fetch-site": "cross-site", origin: "https://evil.example" },
      { origin: "https://evil.example" },
      { origin: "null" },
    ]
  ) {
    const res = await post(headers);
    const body = await res.json();
    assert.equal(res.status, 403, JSON.stringify(headers));
    assert.equal(body.code, "AUTH_JWT_NOT_ALLOWED");
    assert.equal(res.headers.get("set-cookie"), null);
  }
  const host = new URL(srv.url).host;
  for (
    const headers of <Record<string, string>[]> [
      {},
      { "sec-fetch-site": "same-origin", origin: srv.url },
      { origin: `http://${host}` },
    ]
  ) {
    const res = await post(headers);
    await res.body?.cancel();
    assert.equal(res.status, 200, JSON.stringify(headers));
    assert.match(res.headers.get("set-cookie") ?? "", /^accesstoken=/);
  }
});

Deno.test("a full-control route's function is not callable through /svc (it trusts req); a simple one is", async () => {
  // Found by a hostile client: POST /svc {"function":"login", …} ran the route's function with a
  // req the client wrote (req.jwt included, which routes read as verified claims).
  for (
    const body of [
      { function: "login", schema: "app", arguments: { req: [{ body: {} }] } },
      { function: "invoices_page", schema: "app", arguments: [[{ jwt: { role: "app_user" } }]] },
    ]
  ) {
    const res = await srv.post("/svc", body);
    const text = await res.text();
    assert.equal(res.status, 404, text);
    assert.equal(JSON.parse(text).code, "QUERY_UNKNOWN_RELATION");
    const g = await srv.get(`/svc?function=${body.function}&schema=app`);
    await g.body?.cancel();
    assert.equal(g.status, 404);
  }
  // A simple route's function (plain arguments, no envelope) stays callable as any function.
  const me = await srv.post("/svc", { function: "me", schema: "app" });
  assert.notEqual(me.status, 404, await me.text());
});

Deno.test("/me anonymously is RS401", async () => {
  const res = await srv.get("/me");
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("x-svc-errorcode"), "RS401");
  await res.body?.cancel();
});

Deno.test("logout clears the session cookie", async () => {
  const login = await srv.post("/login", { email: "ftremblay@gmail.com", password: "demo" });
  const c = sessionCookie(login)!;
  await login.body?.cancel();
  const out = await srv.post("/logout", {}, { cookie: `accesstoken=${c.value}` });
  assert.equal(out.status, 200);
  assert.deepEqual(await out.json(), { ok: true });
  const cleared = sessionCookie(out);
  assert.ok(cleared);
  assert.equal(cleared.value, "");
  assert.match(cleared.header, /Max-Age=0/);
  assert.equal(out.headers.getSetCookie().length, 1, "only the clearing cookie");
});

Deno.test("a body that is not JSON on a JSON route is 400 QUERY_INVALID", async () => {
  const res = await srv.post("/login", "{not json");
  assert.equal(res.status, 400);
  assert.equal(res.headers.get("x-svc-errorcode"), "QUERY_INVALID");
  await res.body?.cancel();
  const bad = await fetch(srv.url + "/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: new Uint8Array([0x7b, 0xff, 0x7d]),
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get("x-svc-errorcode"), "QUERY_INVALID");
  await bad.body?.cancel();
});

Deno.test("database.json carries each function's route", async () => {
  const res = await srv.get("/svc/database.json");
  const doc = await res.json() as {
    schemas: { name: string; functions: { name: string; route: unknown }[] }[];
  };
  const app = doc.schemas.find((s) => s.name === "app")!;
  const byName = Object.fromEntries(app.functions.map((f) => [f.name, f.route]));
  assert.deepEqual(byName.login, {
    path: "/login",
    methods: ["POST"],
    middleware: false,
    template: null,
  });
  assert.deepEqual(byName.me, {
    path: "/me",
    methods: ["GET", "HEAD"],
    middleware: false,
    template: null,
  });
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
