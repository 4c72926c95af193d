import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sessions.sql", import.meta.url));
const uri = await chinookDb("sessions", fixture);
const srv = await startServer(uri, [
  "--jwt.max_age=1800",
  "--jwt.renew_after=0.5",
  "--jwt.max_session_age=604800",
]);

async function whoami(headers?: HeadersInit) {
  const res = await srv.post("/svc", { function: "whoami" }, headers);
  assert.equal(res.status, 200, await res.clone().text());
  const rows = await res.json();
  return { row: rows[0] as { usr: string; claims: Record<string, unknown> | null }, res };
}

Deno.test("anonymous: role ~anonymous and JSON null claims", async () => {
  const { row, res } = await whoami();
  assert.deepEqual(row, { usr: "~anonymous", claims: null });
  assert.equal(res.headers.get("set-cookie"), null);
});

Deno.test("the role claim is current_user; claims visible to functions and RLS", async () => {
  const t = now();
  const tok = await token({
    role: "member",
    sub: "alice",
    team: "red",
    iat: t,
    exp: t + 1800,
    auth_time: t,
  });
  const { row } = await whoami(cookie(tok));
  assert.equal(row.usr, "member");
  assert.equal(row.claims!.sub, "alice");
  assert.equal(row.claims!.team, "red");
  const res = await srv.post(
    "/svc",
    { relation: "note", select: ["body"], order_by: ["id"] },
    cookie(tok),
  );
  assert.deepEqual(await res.json(), [{ body: "hello all" }, { body: "for alice" }]);
  const anon = await srv.post("/svc", { relation: "note", select: ["body"], order_by: ["id"] });
  assert.deepEqual(await anon.json(), [{ body: "hello all" }]);
});

Deno.test("a trigger and a policy read custom claims on write", async () => {
  const t = now();
  const tok = await token({
    role: "member",
    sub: "carol",
    team: "blue",
    iat: t,
    exp: t + 1800,
    auth_time: t,
  });
  const res = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "owner", "body", "stamp"] },
    data: [{ body: "mine" }],
  }, cookie(tok));
  assert.equal(res.status, 200, await res.clone().text());
  const [row] = await res.json();
  assert.equal(row.owner, "carol");
  assert.equal(row.stamp, "member:blue");
  // The policy rejects writing as someone else.
  const bad = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "owner", "body"] },
    data: [{ owner: "dave", body: "forged" }],
  }, cookie(tok));
  assert.equal(bad.status, 403);
  assert.equal(bad.headers.get("x-svc-errorcode"), "PG_42501");
});

Deno.test("renewal after renew_after keeps role, custom claims and auth_time", async () => {
  const t = now();
  const auth = t - 5000;
  const tok = await token({
    role: "member",
    sub: "alice",
    iat: t - 1000,
    exp: t + 800,
    auth_time: auth,
  });
  const { row, res } = await whoami(cookie(tok));
  assert.equal(row.usr, "member");
  const set = res.headers.get("set-cookie")!;
  assert.ok(set, "a renewed cookie is set");
  assert.match(set, /^accesstoken=[^;]+; /);
  for (const attr of ["HttpOnly", "Secure", "Path=/", "SameSite=Lax", "Max-Age=1800"]) {
    assert.ok(set.includes(attr), `${attr} in ${set}`);
  }
  const renewed = decodeJwt(set.slice("accesstoken=".length, set.indexOf(";")));
  assert.equal(renewed.auth_time, auth);
  assert.equal(renewed.role, "member");
  assert.equal(renewed.sub, "alice");
  assert.ok(renewed.iat! >= t);
  assert.equal(renewed.exp, renewed.iat! + 1800);
});

Deno.test("jwt.secure=false: the session cookie has no Secure attribute (plain-http staging)", async () => {
  const plain = await startServer(uri, ["--jwt.secure=false", "--jwt.renew_after=0"]);
  try {
    const t = now();
    const tok = await token({ role: "member", iat: t - 10, exp: t + 800, auth_time: t - 10 });
    const res = await plain.post("/svc", { relation: "genre", limit: 1 }, cookie(tok));
    await res.body?.cancel();
    const set = res.headers.get("set-cookie")!;
    assert.ok(set, "a renewed cookie is set");
    assert.match(set, /HttpOnly; SameSite=Lax$/);
    assert.doesNotMatch(set, /Secure/);
  } finally {
    await plain.stop();
  }
});

Deno.test("no renewal before renew_after", async () => {
  const t = now();
  const tok = await token({
    role: "member",
    sub: "alice",
    iat: t - 100,
    exp: t + 1700,
    auth_time: t - 100,
  });
  const { res } = await whoami(cookie(tok));
  assert.equal(res.headers.get("set-cookie"), null);
});

Deno.test("past max_session_age: anonymous and cookie cleared", async () => {
  const t = now();
  const tok = await token({
    role: "member",
    sub: "alice",
    iat: t - 1000,
    exp: t + 800,
    auth_time: t - 700000,
  });
  const { row, res } = await whoami(cookie(tok));
  assert.equal(row.usr, "~anonymous");
  assert.match(res.headers.get("set-cookie")!, /accesstoken=; .*Max-Age=0/);
});

Deno.test("bad tokens count as no session, never a 500", async () => {
  const t = now();
  const good = await token({ role: "member", iat: t, exp: t + 1800, auth_time: t });
  const [h, p, s] = good.split(".");
  const forged = btoa(JSON.stringify({ role: "postgres", iat: t, exp: t + 1800, auth_time: t }))
    .replaceAll("=", "").replaceAll("+", "-").replaceAll("/", "_");
  const none = `${btoa('{"alg":"none","typ":"JWT"}').replaceAll("=", "")}.${p}.`;
  const cases: Record<string, string> = {
    tampered: `${h}.${forged}.${s}`,
    wrong_alg: await token({ role: "member", iat: t, exp: t + 1800, auth_time: t }, "HS512"),
    alg_none: none,
    expired: await token({ role: "member", iat: t - 4000, exp: t - 10, auth_time: t - 4000 }),
    missing_exp: await token({ role: "member", iat: t, auth_time: t }),
    future_iat: await token({ role: "member", iat: t + 3600, exp: t + 5400, auth_time: t }),
    oversized: await token({
      role: "member",
      iat: t,
      exp: t + 1800,
      auth_time: t,
      pad: "x".repeat(5000),
    }),
    garbage: "not-a-jwt",
  };
  for (const [name, tok] of Object.entries(cases)) {
    const { row, res } = await whoami(cookie(tok));
    assert.equal(row.usr, "~anonymous", name);
    assert.match(res.headers.get("set-cookie") ?? "", /Max-Age=0/, name);
  }
  const dup = await whoami({ cookie: `accesstoken=${good}; accesstoken=${good}` });
  assert.equal(dup.row.usr, "~anonymous", "duplicate cookies");
});

Deno.test("a token whose role does not exist gets 401 AUTH_ROLE_INVALID", async () => {
  const t = now();
  const tok = await token({ role: "ghost", iat: t, exp: t + 1800, auth_time: t });
  const res = await srv.post("/svc", { function: "whoami" }, cookie(tok));
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("x-svc-errorcode"), "AUTH_ROLE_INVALID");
  const body = await res.json();
  assert.equal(body.code, "AUTH_ROLE_INVALID");
  assert.ok(!JSON.stringify(body).includes("ghost"));
});

Deno.test("in dev mode AUTH_ROLE_INVALID says why: no such role, or the grant that is missing", async () => {
  // Connected as a role that is no member of `lonely` (a superuser may become any role).
  await psql(
    `do $$ begin
      if not exists (select from pg_roles where rolname = 'lonely') then create role lonely nologin; end if;
      if not exists (select from pg_roles where rolname = 'plain_auth') then
        create role plain_auth login noinherit; end if;
    end $$;
    grant "~anonymous" to plain_auth;`,
    "sessions",
  );
  const plain = new URL(uri);
  plain.username = "plain_auth";
  plain.password = "";
  const dev = await startServer(plain.toString(), ["--dev"]);
  try {
    const t = now();
    const reasons: Record<string, RegExp> = {
      ghost: /^role "ghost" does not exist$/,
      lonely: /^"plain_auth" is not a member of role "lonely": grant lonely to plain_auth$/,
    };
    for (const [role, reason] of Object.entries(reasons)) {
      const tok = await token({ role, iat: t, exp: t + 1800, auth_time: t });
      const res = await dev.post("/svc", { function: "whoami" }, cookie(tok));
      const body = await res.json();
      assert.equal(res.status, 401, role);
      assert.equal(body.code, "AUTH_ROLE_INVALID", role);
      assert.match(body.dev_reason, reason);
    }
  } finally {
    await dev.stop();
  }
  // Not in production: the role's name and memberships are the operator's, in the log.
  const t = now();
  const res = await srv.post(
    "/svc",
    { function: "whoami" },
    cookie(await token({ role: "lonely", iat: t, exp: t + 1800, auth_time: t })),
  );
  assert.equal(res.status, 401);
  assert.equal((await res.json()).dev_reason, undefined);
});

Deno.test("RS403 raised in SQL becomes 403 RS403 with message, detail and hint", async () => {
  const res = await srv.post("/svc", { function: "forbidden" });
  assert.equal(res.status, 403);
  assert.equal(res.headers.get("x-svc-errorcode"), "RS403");
  const body = await res.json();
  assert.equal(body.code, "RS403");
  assert.equal(body.message, "members only");
  assert.equal(body.details, "need membership");
  assert.equal(body.hint, "log in");
});

Deno.test("anonymous role missing: 401 AUTH_ANONYMOUS_DISABLED, sessions still work", async () => {
  const other = await startServer(uri, ["--pg.query.anonymous_role=nobody_here"]);
  try {
    const res = await other.post("/svc", { function: "whoami" });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("x-svc-errorcode"), "AUTH_ANONYMOUS_DISABLED");
    await res.body?.cancel();
    const t = now();
    const tok = await token({ role: "member", iat: t, exp: t + 1800, auth_time: t });
    const ok = await other.post("/svc", { function: "whoami" }, cookie(tok));
    assert.equal(ok.status, 200);
    assert.equal((await ok.json())[0].usr, "member");
  } finally {
    await other.stop();
  }
});

Deno.test("the database decides: a refused privilege is 403, anonymous or not", async () => {
  await psql(
    `create table hidden (id int primary key); grant select on note to member;`,
    "sessions",
  );
  await srv.server.runtime.reload("signal");
  // No privilege at all on it: answered as a relation that does not exist (docs/endpoint.md).
  const a = await srv.post("/svc", { relation: "hidden" });
  assert.equal(a.status, 404);
  assert.equal(a.headers.get("x-svc-errorcode"), "QUERY_UNKNOWN_RELATION");
  await a.body?.cancel();
  // ~anonymous may read note but not insert: the database says 42501.
  const w = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "body"] },
    data: [{ body: "x" }],
  });
  assert.equal(w.status, 403);
  assert.equal(w.headers.get("x-svc-errorcode"), "PG_42501");
  await w.body?.cancel();
  await psql(`grant select on hidden to member;`, "sessions");
  await srv.server.runtime.reload("signal");
  const t = now();
  const tok = await token({ role: "member", iat: t, exp: t + 1800, auth_time: t });
  const m = await srv.post("/svc", {
    query: { relation: "hidden", select: ["id"] },
    data: [{ id: 1 }],
  }, cookie(tok));
  assert.equal(m.status, 403);
  assert.equal(m.headers.get("x-svc-errorcode"), "PG_42501");
  await m.body?.cancel();
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
