/**
 * The session cookie is svc's alone, clearing it is never gated, and a permission denial is 403
 * whoever asks: through real HTTP against a real PostgreSQL (tests/fixtures/session_cookie.sql),
 * with `http.functions.allowed_auth` restricted to the login function.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/session_cookie.sql", import.meta.url));
const DB = "session_cookie";
const uri = await chinookDb(DB, fixture);
// The refused responses are logged as errors: expected here.
const srv = await startServer(uri, ["--http.functions.allowed_auth=^sc\\.login$"]);

async function session(uid: string): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", uid, iat: t, exp: t + 1800, auth_time: t }));
}

/** Reads a response and checks its status and error code. */
async function expect(res: Response, status: number, code?: string): Promise<string> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  if (code) assert.equal(res.headers.get("x-svc-errorcode"), code, text);
  return text;
}

/** The `Set-Cookie` lines of a response setting or clearing the session cookie. */
function sessionCookies(res: Response): string[] {
  return res.headers.getSetCookie().filter((h) => h.startsWith("accesstoken="));
}

/** Asserts a response cleared the session cookie with svc's own clearing line, and only that. */
function assertCleared(res: Response) {
  const lines = sessionCookies(res);
  assert.equal(lines.length, 1, res.headers.getSetCookie().join(" | "));
  assert.match(lines[0], /^accesstoken=; Max-Age=0; Path=\/; HttpOnly; Secure; SameSite=Lax$/);
}

async function hits(who: string): Promise<number> {
  const out = await psql(`select count(*) from sc.hits where who = '${who}'`, DB);
  return Number(out.trim().split(/\s+/).find((w) => /^\d+$/.test(w)));
}

// Set-Cookie values that would set, clear or shadow the session cookie, as a browser reads them.
const SHADOWING: Record<string, Record<string, unknown>> = {
  "lower-case name": { "set-cookie": "accesstoken=evil; Path=/" },
  "canonical case": { "Set-Cookie": "accesstoken=evil; Path=/private" },
  "upper case": { "SET-COOKIE": "accesstoken=evil; Path=/; Domain=127.0.0.1" },
  "in an array": { "set-cookie": ["theme=dark", "accesstoken=evil; Path=/other"] },
  "second header": { "set-cookie": "theme=dark", "Set-Cookie": "accesstoken=; Max-Age=0" },
  "clearing it": { "set-cookie": "accesstoken=; Max-Age=0; Path=/; HttpOnly; Secure" },
  "leading whitespace": { "set-cookie": "  accesstoken=evil" },
  "space before =": { "set-cookie": "accesstoken =evil; Path=/x" },
  "tab around": { "set-cookie": "\taccesstoken\t=evil" },
  "quoted name": { "set-cookie": '"accesstoken"=evil' },
  "quoted with spaces": { "set-cookie": ' " accesstoken" =evil' },
  "nameless, value is the pair": { "set-cookie": "=accesstoken=evil; Path=/x" },
  "nameless, spaced": { "set-cookie": " = accesstoken = evil" },
  "bare name": { "set-cookie": "accesstoken" },
  "folded after a comma": { "set-cookie": "theme=dark, accesstoken=evil; Path=/x" },
  "no attributes, number value": { "set-cookie": ["accesstoken=1"] },
  "clear-site-data cookies": { "Clear-Site-Data": '"cookies"' },
  "clear-site-data all": { "clear-site-data": '"cache", "*"' },
};

Deno.test("a route cannot set, clear or shadow the session cookie through resp.headers", async () => {
  // Every spelling is tried (as anonymous and with a session); the failures are reported together.
  const failures: string[] = [];
  for (const [what, headers] of Object.entries(SHADOWING)) {
    for (const [as, who] of [["anonymous", {}], ["alice", await session("alice")]] as const) {
      const res = await srv.post("/answer", { headers }, who);
      const text = await res.text();
      const sent = res.headers.getSetCookie();
      if (
        res.status !== 500 ||
        res.headers.get("x-svc-errorcode") !== "HTTP_ROUTE_RESPONSE_INVALID" ||
        text.includes("evil") || sent.some((h) => /accesstoken|evil|theme/.test(h)) ||
        res.headers.get("clear-site-data") !== null
      ) failures.push(`${what} (${as}): ${res.status} ${JSON.stringify(sent)}`);
    }
  }
  assert.deepEqual(failures, []);
  // The rule that refused a `cookies` entry for it, unchanged.
  const res = await srv.post("/answer", { cookies: { accesstoken: "evil" } });
  await expect(res, 500, "HTTP_ROUTE_RESPONSE_INVALID");
  assert.deepEqual(sessionCookies(res), []);
});

Deno.test("other Set-Cookie headers and cookies still go out", async () => {
  const res = await srv.post("/answer", {
    headers: {
      "set-cookie": ["theme=dark; Path=/", "accesstokens=1", "x_accesstoken=2; Path=/private"],
      "Set-Cookie": "lang=fr; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/",
      "SET-COOKIE": "AccessToken=other-name",
      "clear-site-data": '"cache", "storage"',
    },
    cookies: { plain: "v" },
  });
  assert.deepEqual(JSON.parse(await expect(res, 200)), { ok: true });
  assert.deepEqual(
    res.headers.getSetCookie().sort(),
    [
      "AccessToken=other-name",
      "accesstokens=1",
      "lang=fr; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/",
      "plain=v; Max-Age=86400; Path=/; HttpOnly; Secure; SameSite=Lax",
      "theme=dark; Path=/",
      "x_accesstoken=2; Path=/private",
    ].sort(),
  );
  assert.equal(res.headers.get("clear-site-data"), '"cache", "storage"');
});

Deno.test("a middleware cannot set the session cookie through its headers either", async () => {
  const bad = await srv.get("/mw/x", { "x-set-cookie": "accesstoken=evil; Path=/mw" });
  await expect(bad, 500, "HTTP_ROUTE_RESPONSE_INVALID");
  assert.deepEqual(sessionCookies(bad), []);
  const ok = await srv.get("/mw/x", { "x-set-cookie": "theme=dark" });
  assert.deepEqual(JSON.parse(await expect(ok, 200)), { by: "mw" });
  assert.deepEqual(ok.headers.getSetCookie(), ["theme=dark"]);
});

Deno.test("logout outside allowed_auth clears the cookie", async () => {
  const res = await srv.post("/logout", {}, await session("alice"));
  assert.deepEqual(JSON.parse(await expect(res, 200)), { ok: true });
  assertCleared(res);
  // Anonymous too (a stale browser): still cleared, nothing else.
  const anon = await srv.post("/logout", {});
  await expect(anon, 200);
  assertCleared(anon);
});

Deno.test("revocation middleware outside allowed_auth, ahead of a route: 401, cleared", async () => {
  const hit = await fetch(srv.url + "/private/hit", {
    method: "POST",
    headers: await session("bob"),
  });
  assert.deepEqual(JSON.parse(await expect(hit, 401)), { message: "session revoked" });
  assertCleared(hit);
  assert.equal(await hits("bob"), 0, "the route did not run");
  // Someone not revoked passes.
  const alice = await fetch(srv.url + "/private/hit", {
    method: "POST",
    headers: await session("alice"),
  });
  assert.equal((JSON.parse(await expect(alice, 200)) as { uid: string }).uid, "alice");
  assert.deepEqual(sessionCookies(alice), []);
});

Deno.test("revocation middleware outside allowed_auth, ahead of /svc: 401, cleared", async () => {
  const bob = await session("bob");
  for (
    const res of [
      await srv.post("/svc", { relation: "hits", schema: "sc" }, bob),
      await srv.get("/svc?relation=hits&schema=sc", bob),
    ]
  ) {
    assert.deepEqual(JSON.parse(await expect(res, 401)), { message: "session revoked" });
    assertCleared(res);
  }
});

Deno.test("a jwt object outside allowed_auth stays 403 AUTH_JWT_NOT_ALLOWED", async () => {
  const before = await hits("rogue");
  const res = await srv.post("/rogue", {});
  await expect(res, 403, "AUTH_JWT_NOT_ALLOWED");
  assert.deepEqual(sessionCookies(res), []);
  assert.equal(await hits("rogue"), before, "the rogue's insert was rolled back");
  const mw = await srv.get("/mw/x", { "x-mint": "1" });
  await expect(mw, 403, "AUTH_JWT_NOT_ALLOWED");
  assert.deepEqual(sessionCookies(mw), []);
  // The allowed login still mints.
  const login = await srv.post("/login", { uid: "carol" });
  await expect(login, 200);
  const [line] = sessionCookies(login);
  assert.match(line, /^accesstoken=[^;]+\.[^;]+\.[^;]+; Max-Age=1800; Path=\//);
});

Deno.test("a permission denial is 403 for the anonymous role too", async () => {
  const alice = await session("alice");
  const cases: [string, () => Promise<Response>, number, string][] = [
    [
      "a table, POST /svc",
      () => srv.post("/svc", { relation: "closed", schema: "sc" }),
      403,
      "PG_42501",
    ],
    ["a table, GET /svc", () => srv.get("/svc?relation=closed&schema=sc"), 403, "PG_42501"],
    // A function's only privilege is EXECUTE: without it, it is unknown to the role.
    [
      "a function, /svc",
      () => srv.post("/svc", { function: "closed_fn", schema: "sc" }),
      404,
      "QUERY_UNKNOWN_RELATION",
    ],
    [
      "a write, /svc",
      () => srv.post("/svc", { query: { relation: "closed", schema: "sc" }, data: [{ id: 2 }] }),
      403,
      "PG_42501",
    ],
    // A route it may run reading a table it may not read.
    ["a table read by a route", () => srv.get("/closed/count"), 403, "PG_42501"],
    // A middleware it may not execute ahead of a route it may: no precheck, the database's 403.
    ["a middleware", () => srv.get("/members/page"), 403, "PG_42501"],
    // With a session: the same.
    [
      "a table, with a session",
      () => srv.post("/svc", { relation: "closed", schema: "sc" }, alice),
      403,
      "PG_42501",
    ],
    // 401 stays for what svc decides itself: a route the anonymous role cannot reach.
    ["an unreachable route", () => srv.get("/members_only"), 401, "AUTH_ROUTE_NOT_REACHABLE"],
  ];
  const failures: string[] = [];
  for (const [what, send, status, code] of cases) {
    const res = await send();
    const text = await res.text();
    if (res.status !== status || res.headers.get("x-svc-errorcode") !== code) {
      failures.push(`${what}: ${res.status} ${text}`);
    }
  }
  assert.deepEqual(failures, []);
  assert.equal(await expect(await srv.get("/members/page", alice), 200), '"members"');
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
