/**
 * Declared routes and middleware through real HTTP against a real PostgreSQL
 * (tests/fixtures/routes.sql): simple-route binding and casts, method inference, 405 with Allow,
 * full-control envelopes (req shape, headers, cookies, redirect, text), malformed responses,
 * revocation middleware, middleware ahead of /svc, the anonymous precheck before the body.
 */
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));
const uri = await chinookDb("routes_http", fixture);
const srv = await startServer(uri, [
  "--route.rt.multi.path=/multi",
  "--route.rt.multi.method=GET,PUT",
]);

async function json(res: Response, status = 200): Promise<unknown> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  return text ? JSON.parse(text) : null;
}

async function session(claims: Record<string, unknown>): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t, ...claims }));
}

Deno.test("simple route: path param, query string, default, cast", async () => {
  assert.equal(await json(await srv.get("/add/5?b=3")), 8);
  assert.equal(await json(await srv.get("/add/5")), 15, "default honoured");
  // Unknown query-string keys are ignored (documented).
  assert.equal(await json(await srv.get("/add/5?b=1&_=123")), 6);
  // The path param wins over the query string.
  assert.equal(await json(await srv.get("/add/5?a=100&b=0")), 5);
  const bad = await srv.get("/add/x");
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get("x-svc-errorcode"), "PG_22P02");
  await bad.body?.cancel();
  const badQ = await srv.get("/add/1?b=1.5");
  assert.equal(badQ.status, 400);
  await badQ.body?.cancel();
});

Deno.test("simple route: path + JSON body binding with casts (array, jsonb, date)", async () => {
  const res = await srv.post("/items/7", {
    name: "widget",
    tags: ["a", "b"],
    data: { x: [1, 2] },
    at: "2024-02-29",
  });
  assert.deepEqual(await json(res), {
    id: 7,
    name: "widget",
    tags: ["a", "b"],
    data: { x: [1, 2] },
    at: "2024-02-29",
  });
  // Query string before body.
  const q = await srv.post("/items/8?name=fromquery", { name: "frombody" });
  assert.equal((await json(q) as { name: string }).name, "fromquery");
  // Missing required argument: 400 naming it.
  const miss = await srv.post("/items/9", {});
  const body = await json(miss, 400) as { code: string; message: string };
  assert.equal(body.code, "QUERY_INVALID");
  assert.match(body.message, /"name"/);
  // Unknown body key: 400.
  const unk = await srv.post("/items/9", { name: "x", nope: 1 });
  assert.equal((await json(unk, 400) as { code: string }).code, "QUERY_INVALID");
  // A value PostgreSQL cannot cast: 400, not 500.
  const date = await srv.post("/items/9", { name: "x", at: "not a date" });
  assert.equal(date.status, 400);
  await date.body?.cancel();
  // A body that is not JSON: 400 QUERY_INVALID.
  const notJson = await srv.post("/items/9", "name=x");
  assert.equal((await json(notJson, 400) as { code: string }).code, "QUERY_INVALID");
});

Deno.test("simple route results: set → array, table → objects, void → 204", async () => {
  assert.deepEqual(await json(await srv.get("/series?n=3")), [1, 2, 3]);
  assert.deepEqual(await json(await srv.get("/series?n=0")), []);
  assert.deepEqual(await json(await srv.get("/pairs/2")), [{ i: 1, sq: 1 }, { i: 2, sq: 4 }]);
  // A result column named like the call's alias in svc's SQL: still whole rows.
  assert.deepEqual(await json(await srv.get("/named_r/2")), [{ r: 1, b: "b1" }, { r: 2, b: "b2" }]);
  assert.deepEqual(await json(await srv.get("/one_r/7")), { r: 7, b: "one" });
  const v = await srv.post("/nothing", {});
  assert.equal(v.status, 204);
  assert.equal(await v.text(), "");
});

Deno.test("method inference, HEAD follows GET, 405 with Allow", async () => {
  // rt.add is IMMUTABLE → GET; rt.nothing is VOLATILE → POST.
  const post = await srv.post("/add/1", {});
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD");
  assert.equal(post.headers.get("x-svc-errorcode"), "HTTP_METHOD_NOT_ALLOWED");
  await post.body?.cancel();
  const get = await srv.get("/nothing");
  assert.equal(get.status, 405);
  assert.equal(get.headers.get("allow"), "POST");
  await get.body?.cancel();
  const head = await fetch(srv.url + "/add/1", { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), "");
  // HEAD announces the GET's length (RFC 9110 §9.3.2), not 0.
  const whole = await fetch(srv.url + "/add/1");
  const got = new Uint8Array(await whole.arrayBuffer());
  assert.equal(head.headers.get("content-length"), String(got.length));
  // Configured methods.
  assert.equal(await json(await srv.get("/multi")), "multi");
  assert.equal(await json(await fetch(srv.url + "/multi", { method: "PUT" })), "multi");
  const del = await fetch(srv.url + "/multi", { method: "DELETE" });
  assert.equal(del.status, 405);
  assert.equal(del.headers.get("allow"), "GET, HEAD, PUT");
  await del.body?.cancel();
});

Deno.test("two routes on one method + pattern: the later is deactivated", async () => {
  assert.equal(await json(await srv.get("/dup/1")), "first");
});

Deno.test("full-control req: method, path, params, query, headers, cookies, body, jwt", async () => {
  const res = await fetch(srv.url + "/echo/h%C3%A9llo?x=1&x=2&y=z", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "X-Custom": "Yes",
      ...Object.fromEntries(new Headers(await session({ uid: "alice" }))),
      cookie: `theme=dark; accesstoken=${
        new Headers(await session({ uid: "alice" })).get("cookie")!.slice(12)
      }`,
    },
    body: JSON.stringify({ a: [1, { b: null }] }),
  });
  const req = await json(res) as Record<string, Record<string, unknown>>;
  assert.equal(req.method, "POST");
  assert.equal(req.path, "/echo/héllo");
  assert.deepEqual(req.params, { p: "héllo" });
  assert.deepEqual(req.query, { x: ["1", "2"], y: "z" });
  assert.equal(req.headers["x-custom"], "Yes");
  assert.equal(req.headers["content-type"], "application/json");
  assert.deepEqual(req.cookies, { theme: "dark" }, "the session cookie is not in cookies");
  assert.ok(!String(req.headers.cookie).includes("accesstoken"));
  assert.deepEqual(req.body, { a: [1, { b: null }] });
  assert.equal(req.jwt.uid, "alice");
  assert.equal(req.jwt.role, "app_user");
  // Form and text bodies; anonymous jwt is null.
  const form = await fetch(srv.url + "/echo/f", {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "a=1&a=2&b=%C3%A9",
  });
  const f = await json(form) as { body: unknown; jwt: unknown };
  assert.deepEqual(f.body, { a: ["1", "2"], b: "é" });
  assert.equal(f.jwt, null);
  const text = await fetch(srv.url + "/echo/t", {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: "just text",
  });
  assert.equal((await json(text) as { body: unknown }).body, "just text");
  const none = await srv.get("/echo/g");
  assert.equal((await json(none) as { body: unknown }).body, null);
  // Multipart: fields arrive as strings, files as {filename, content_type, size, content_base64}.
  const fd = new FormData();
  fd.set("a", "1");
  fd.set("f", new File(["hello"], "hi.txt", { type: "text/plain" }));
  const mp = await fetch(srv.url + "/echo/m", { method: "POST", body: fd });
  assert.equal(mp.status, 200);
  const mbody = (await json(mp) as { body: Record<string, unknown> }).body;
  assert.equal(mbody.a, "1");
  assert.deepEqual(mbody.f, {
    filename: "hi.txt",
    content_type: "text/plain",
    size: 5,
    content_base64: btoa("hello"),
  });
});

Deno.test("full-control resp: status, text content type, cookies, redirect", async () => {
  const text = await srv.get("/shape?kind=text");
  assert.equal(text.status, 201);
  assert.equal(text.headers.get("content-type"), "text/plain; charset=utf-8");
  assert.equal(text.headers.get("x-extra"), "yes");
  assert.equal(await text.text(), "hello");

  const c = await srv.get("/shape?kind=cookies");
  assert.deepEqual(await json(c), { ok: true });
  const set = c.headers.getSetCookie();
  assert.ok(
    set.includes("plain=v%201; Max-Age=86400; Path=/; HttpOnly; Secure; SameSite=Lax"),
    set.join("\n"),
  );
  assert.ok(set.includes("custom=x; Max-Age=60; Path=/shape; Secure; SameSite=Strict"));
  assert.ok(set.includes("gone=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Lax"));

  const r = await fetch(srv.url + "/shape?kind=redirect", { redirect: "manual" });
  assert.equal(r.status, 303);
  assert.equal(r.headers.get("location"), "/elsewhere");
  await r.body?.cancel();
  const r2 = await fetch(srv.url + "/shape?kind=redirect307", { redirect: "manual" });
  assert.equal(r2.status, 307);
  await r2.body?.cancel();
});

Deno.test("malformed resp → 500 HTTP_ROUTE_RESPONSE_INVALID, never a split header", async () => {
  for (const kind of ["bad_status", "bad_headers", "crlf_header", "crlf_cookie", "template"]) {
    const res = await srv.get(`/shape?kind=${kind}`);
    assert.equal(res.status, 500, kind);
    // A template the renderer cannot render is its own 500 INTERNAL (docs/http.md).
    const code = kind === "template" ? "INTERNAL" : "HTTP_ROUTE_RESPONSE_INVALID";
    assert.equal(res.headers.get("x-svc-errorcode"), code, kind);
    assert.equal(res.headers.get("x-a"), null);
    assert.ok(!res.headers.getSetCookie().some((h) => h.startsWith("evil")));
    await res.body?.cancel();
  }
});

Deno.test("revocation middleware: revoked uid → 401 + cleared cookie; others pass", async () => {
  const bob = await session({ uid: "bob" });
  const res = await fetch(srv.url + "/private/hit", { method: "POST", headers: bob });
  assert.equal(res.status, 401);
  assert.deepEqual(await res.json(), { message: "session revoked" });
  const cleared = res.headers.getSetCookie().find((h) => h.startsWith("accesstoken="));
  assert.ok(cleared && /Max-Age=0/.test(cleared));
  // The route did not run (the revoked request wrote nothing).
  const hits = await srv.post("/svc", {
    relation: "hits",
    schema: "rt",
    select: ["who"],
    where: ["=", "who", ["bob"]],
  });
  assert.deepEqual(await json(hits), []);
  const alice = await fetch(srv.url + "/private/hit", {
    method: "POST",
    headers: await session({ uid: "alice" }),
  });
  assert.equal((await json(alice) as { uid: string }).uid, "alice");
  // Anonymous passes the guard too.
  const anon = await fetch(srv.url + "/private/hit", { method: "POST" });
  assert.equal(anon.status, 200);
  await anon.body?.cancel();
});

Deno.test("middleware runs as the request's role, ahead of routes and /svc", async () => {
  const asUser = await fetch(srv.url + "/add/1", {
    headers: { "x-block": "1", ...Object.fromEntries(new Headers(await session({ uid: "u" }))) },
  });
  const body = await json(asUser, 418) as { user: string; jwt: { uid: string }; path: string };
  assert.equal(body.user, "app_user");
  assert.equal(body.jwt.uid, "u");
  const anon = await fetch(srv.url + "/svc", {
    method: "POST",
    headers: { "x-block": "1", "content-type": "application/json" },
    body: JSON.stringify({ relation: "artist", limit: 1 }),
  });
  const a = await json(anon, 418) as { user: string; path: string };
  assert.equal(a.user, "~anonymous");
  assert.equal(a.path, "/svc");
  // Without the header the blocker passes and /svc answers.
  const pass = await srv.post("/svc", { relation: "artist", limit: 1, select: ["artist_id"] });
  assert.deepEqual(await json(pass), [{ artist_id: 1 }]);
});

Deno.test("anonymous precheck: 401 AUTH_ROUTE_NOT_REACHABLE before a 50 MB body is sent", async () => {
  const port = Number(new URL(srv.url).port);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const t0 = performance.now();
  await conn.write(new TextEncoder().encode(
    "POST /secret HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
      `Content-Length: ${50 * 1024 * 1024}\r\n\r\n{"a":`,
  ));
  const buf = new Uint8Array(4096);
  const timer = setTimeout(() => conn.close(), 5000);
  const n = await conn.read(buf);
  clearTimeout(timer);
  const head = new TextDecoder().decode(buf.subarray(0, n ?? 0));
  try {
    conn.close();
  } catch { /* closed */ }
  assert.match(head, /^HTTP\/1\.1 401/);
  assert.match(head, /x-svc-errorcode: AUTH_ROUTE_NOT_REACHABLE/i);
  assert.ok(performance.now() - t0 < 3000);
  // A session whose role can execute it gets through.
  const ok = await srv.post("/secret", {}, await session({ uid: "x" }));
  assert.deepEqual(await json(ok), { secret: 42 });
  // EXECUTE through PUBLIC alone does not count.
  const pub = await srv.get("/public_only");
  assert.equal(pub.status, 401);
  assert.equal(pub.headers.get("x-svc-errorcode"), "AUTH_ROUTE_NOT_REACHABLE");
  // The message says why, and what opens it (a new user read "cannot execute it" while the
  // same function answered over /svc).
  assert.match((await pub.json()).message, /PUBLIC alone does not count: grant EXECUTE/);
});

Deno.test("a route body over http.max_body_size is 413", async () => {
  const res = await srv.post("/items/1", JSON.stringify({ name: "x".repeat(11 * 1024 * 1024) }));
  assert.equal(res.status, 413);
  assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_BODY_TOO_LARGE");
  await res.body?.cancel();
});

Deno.test("a route body in another charset or content coding is 415, the route not run", async () => {
  for (
    const headers of <Record<string, string>[]> [
      { "content-type": "text/plain; charset=iso-8859-1" },
      { "content-type": "application/x-www-form-urlencoded; charset=windows-1252" },
      { "content-type": "application/json", "content-encoding": "gzip" },
      { "content-type": "multipart/form-data; boundary=x", "content-encoding": "gzip" },
    ]
  ) {
    const res = await fetch(srv.url + "/echo/t", { method: "POST", headers, body: "caf\u00e9" });
    assert.equal(res.status, 415, JSON.stringify(headers));
    assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_UNSUPPORTED_MEDIA_TYPE");
    await res.body?.cancel();
  }
  const ok = await fetch(srv.url + "/echo/t", {
    method: "POST",
    headers: { "content-type": "text/plain; charset=utf-8" },
    body: "caf\u00e9",
  });
  assert.equal((await json(ok) as { body: unknown }).body, "caf\u00e9");
});

Deno.test("resp.jwt mints with service-set iat, exp, auth_time", async () => {
  const res = await srv.post("/rt/login", { uid: "zed" });
  assert.deepEqual(await json(res), { ok: true });
  const set = res.headers.getSetCookie().find((h) => h.startsWith("accesstoken="))!;
  const claims = decodeJwt(set.slice(12, set.indexOf(";")));
  assert.equal(claims.uid, "zed");
  assert.ok(claims.iat! > 1000 && claims.exp === claims.iat! + 1800);
  assert.equal(claims.auth_time, claims.iat);
});

Deno.test("reload adds a route declared by comment on function, without restart", async () => {
  const before = await srv.get("/later");
  assert.equal(before.status, 404);
  await before.body?.cancel();
  await psql("comment on function rt.later() is 'route:: path: /later'", "routes_http");
  assert.ok(await srv.server.runtime.reload("signal"));
  assert.equal(await json(await srv.get("/later")), "later");
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
