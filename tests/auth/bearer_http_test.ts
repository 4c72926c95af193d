/**
 * `Authorization: Bearer <jwt>` with svc's own HS tokens, through real HTTP against a real
 * PostgreSQL: the token's role runs every endpoint, the header wins over the cookie, a refused
 * token is 401 (never anonymous), a Bearer request never gets a session cookie (no renewal, no
 * clearing, a route's session dropped), and a cross-site-looking Bearer request is served.
 */
import assert from "node:assert/strict";
import { SignJWT, UnsecuredJWT } from "jose";
import { emptyDb } from "../helpers/db.ts";
import { cookie, now, startServer, TEST_SECRET, token } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/bearer.sql", import.meta.url));
const uri = await emptyDb("bearer", fixture);
const srv = await startServer(uri, [
  "--jwt.max_age=1800",
  "--jwt.renew_after=0.5",
  "--http.typescript.enable=true",
]);

function bearer(tok: string): Record<string, string> {
  return { authorization: `Bearer ${tok}` };
}

/** A valid token for `role` (issued `age` seconds ago, for 1800 s). */
function session(role: string, extra: Record<string, unknown> = {}, age = 0): Promise<string> {
  const t = now() - age;
  return token({ role, iat: t, exp: t + 1800, auth_time: t, ...extra });
}

async function whoami(headers: HeadersInit) {
  const res = await srv.post("/svc", { function: "whoami" }, headers);
  const text = await res.text();
  return { status: res.status, res, row: res.ok ? JSON.parse(text)[0] : JSON.parse(text) };
}

Deno.test("a Bearer HS token runs as its role on reads, the GET form, writes and batches", async () => {
  const tok = await session("member", { sub: "alice" });
  const { status, row, res } = await whoami(bearer(tok));
  assert.equal(status, 200, JSON.stringify(row));
  assert.equal(row.usr, "member");
  assert.equal(row.claims.sub, "alice");
  assert.equal(res.headers.get("set-cookie"), null);

  const get = await srv.get("/svc?function=whoami", bearer(tok));
  assert.equal(get.status, 200);
  assert.equal((await get.json())[0].usr, "member");

  const write = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "body", "author"] },
    data: [{ body: "by bearer" }],
  }, bearer(tok));
  assert.equal(write.status, 200, await write.clone().text());
  const [written] = await write.json();
  assert.equal(written.author, "member");
  // The anonymous role may not insert: the same write without the token is refused.
  const anon = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "body"] },
    data: [{ body: "anonymous" }],
  });
  assert.equal(anon.status, 403);

  const batch = await srv.post(
    "/svc",
    [{ function: "whoami" }, { function: "whoami" }],
    bearer(tok),
  );
  assert.equal(batch.status, 200);
  const items = await batch.json() as { usr: string }[][];
  assert.deepEqual(items.map((rows) => rows[0].usr), ["member", "member"]);
});

Deno.test("database.json and database.ts describe what the Bearer token's role can read", async () => {
  const member = await session("member");
  const names = (doc: { schemas: { name: string; relations: { name: string }[] }[] }) =>
    doc.schemas.flatMap((s) => s.relations.map((r) => `${s.name}.${r.name}`));
  const asMember = await srv.get("/svc/database.json", bearer(member));
  assert.equal(asMember.status, 200);
  assert.ok(names(await asMember.json()).includes("public.note"));
  const ts = await srv.get("/svc/database.ts", bearer(member));
  assert.equal(ts.status, 200);
  assert.match(await ts.text(), /note/);
  // A refused token is not served the anonymous description.
  const bad = await srv.get("/svc/database.json", bearer(member.slice(0, -3) + "AAA"));
  assert.equal(bad.status, 401);
  assert.equal(bad.headers.get("x-svc-errorcode"), "AUTH_TOKEN_INVALID");
  await bad.body?.cancel();
});

Deno.test("the header wins over the cookie, which is neither renewed nor cleared", async () => {
  const member = await session("member");
  // An editor cookie due for renewal: on its own it is renewed.
  const editor = await session("editor", {}, 1200);
  const alone = await whoami(cookie(editor));
  assert.equal(alone.row.usr, "editor");
  assert.match(alone.res.headers.get("set-cookie") ?? "", /^accesstoken=ey/);

  const both = await whoami({ ...cookie(editor), ...bearer(member) });
  assert.equal(both.row.usr, "member");
  assert.equal(both.res.headers.get("set-cookie"), null, "the cookie is not renewed");

  // An invalid cookie is cleared on its own, ignored beside a Bearer token.
  const cleared = await whoami(cookie("garbage"));
  assert.equal(cleared.row.usr, "~anonymous");
  assert.match(cleared.res.headers.get("set-cookie") ?? "", /Max-Age=0/);
  const ignored = await whoami({ ...cookie("garbage"), ...bearer(member) });
  assert.equal(ignored.row.usr, "member");
  assert.equal(ignored.res.headers.get("set-cookie"), null);

  // A refused Bearer token is 401 even with a valid cookie beside it.
  const refused = await whoami({ ...cookie(editor), ...bearer("x.y.z") });
  assert.equal(refused.status, 401);
  assert.equal(refused.res.headers.get("set-cookie"), null);
});

Deno.test("a Bearer token past renew_after is not renewed", async () => {
  const old = await session("member", {}, 1500);
  const res = await whoami(bearer(old));
  assert.equal(res.row.usr, "member");
  assert.equal(res.res.headers.get("set-cookie"), null);
  // The same token as a cookie is renewed.
  const viaCookie = await whoami(cookie(old));
  assert.match(viaCookie.res.headers.get("set-cookie") ?? "", /^accesstoken=ey/);
});

Deno.test("refused Bearer tokens are 401 AUTH_TOKEN_INVALID, never anonymous", async () => {
  const t = now();
  const claims = { role: "member", iat: t, exp: t + 600 };
  const cases: Record<string, string> = {
    "bad signature": await token(claims, "HS256", TEST_SECRET + "-other"),
    "expired": await token({ role: "member", iat: t - 7200, exp: t - 3600 }),
    "alg none": new UnsecuredJWT(claims).encode(),
    "another HS size": await token(claims, "HS384"),
    "no role": await token({ iat: t, exp: t + 600 }),
    "empty role": await token({ ...claims, role: "" }),
    "no exp": await token({ role: "member", iat: t }),
    "issued in the future": await token({ role: "member", iat: t + 3600, exp: t + 7200 }),
    "too old a session": await token({ ...claims, auth_time: t - 700000 }),
    "tampered payload": (await token(claims)).replace(
      /\.[^.]+\./,
      `.${btoa('{"role":"editor"}')}.`,
    ),
    "not a JWT": "garbage",
    "RS256 without jwt.jwks_url": await new SignJWT(claims).setProtectedHeader({ alg: "RS256" })
      .sign(
        (await crypto.subtle.generateKey(
          {
            name: "RSASSA-PKCS1-v1_5",
            modulusLength: 2048,
            publicExponent: new Uint8Array([1, 0, 1]),
            hash: "SHA-256",
          },
          true,
          ["sign", "verify"],
        )).privateKey,
      ),
  };
  for (const [what, tok] of Object.entries(cases)) {
    const res = await srv.post("/svc", { function: "whoami" }, bearer(tok));
    const body = await res.json();
    assert.equal(res.status, 401, `${what}: ${JSON.stringify(body)}`);
    assert.equal(body.code, "AUTH_TOKEN_INVALID", what);
    assert.equal(res.headers.get("x-svc-errorcode"), "AUTH_TOKEN_INVALID", what);
    assert.equal(res.headers.get("www-authenticate"), 'Bearer error="invalid_token"', what);
    assert.equal(res.headers.get("set-cookie"), null, what);
  }
  for (const header of ["Bearer", "Bearer ", "bearer a b", `Bearer ${cases.expired}, Bearer x`]) {
    const res = await srv.get("/svc?function=whoami", { authorization: header });
    assert.equal(res.status, 401, header);
    assert.equal((await res.json()).code, "AUTH_TOKEN_INVALID", header);
  }
  // The same on a route, a static-less 404 path and the well-known form.
  for (const path of ["/login", "/nowhere", "/svc/database.json"]) {
    const res = await srv.get(path, bearer(cases.expired));
    assert.equal(res.status, 401, path);
    assert.equal(res.headers.get("x-svc-errorcode"), "AUTH_TOKEN_INVALID", path);
    await res.body?.cancel();
  }
});

Deno.test("a Bearer token's unknown or connecting role is 401 AUTH_ROLE_INVALID, as a cookie's", async () => {
  for (const role of ["nobody", "postgres"]) {
    const tok = await session(role);
    const viaBearer = await whoami(bearer(tok));
    const viaCookie = await whoami(cookie(tok));
    assert.equal(viaBearer.status, 401, role);
    assert.equal(viaBearer.row.code, "AUTH_ROLE_INVALID", role);
    assert.equal(viaCookie.status, 401, role);
    assert.equal(viaCookie.row.code, "AUTH_ROLE_INVALID", role);
  }
});

Deno.test("Basic and other Authorization schemes are not credentials: ignored", async () => {
  const res = await whoami({ authorization: "Basic dXNlcjpwYXNz" });
  assert.equal(res.status, 200);
  assert.equal(res.row.usr, "~anonymous");
  const editor = await session("editor");
  const withCookie = await whoami({ authorization: "Basic dXNlcjpwYXNz", ...cookie(editor) });
  assert.equal(withCookie.row.usr, "editor");
});

Deno.test("a route that sets or clears the session does not on a Bearer request", async () => {
  const member = await session("member", { sub: "m" });
  // Cookie (or anonymous) request: the route sets the session cookie.
  const viaCookie = await srv.post("/login", {}, cookie(member));
  assert.equal(viaCookie.status, 200);
  const set = viaCookie.headers.getSetCookie();
  assert.ok(set.some((c) => c.startsWith("accesstoken=ey")), set.join(" | "));

  const viaBearer = await srv.post("/login", {}, bearer(member));
  assert.equal(viaBearer.status, 200);
  const body = await viaBearer.json();
  assert.equal(body.user, "member");
  assert.equal(body.jwt.sub, "m", "the function gets the verified claims");
  assert.equal(body.authorization, null, "the token itself is not handed to the function");
  const cookies = viaBearer.headers.getSetCookie();
  assert.ok(!cookies.some((c) => c.startsWith("accesstoken=")), cookies.join(" | "));
  assert.ok(cookies.some((c) => c.startsWith("theme=dark")), "other cookies are kept");

  const logout = await srv.post("/logout", {}, bearer(member));
  assert.equal(logout.status, 200);
  assert.equal((await logout.json()).user, "member");
  assert.deepEqual(logout.headers.getSetCookie(), []);
});

Deno.test("a cross-site Bearer request is served: no cookie rule stands in its way", async () => {
  const member = await session("member");
  const crossSite = {
    origin: "https://evil.example",
    referer: "https://evil.example/page",
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "cors",
  };
  const res = await srv.post("/svc", {
    query: { relation: "note", select: ["id", "body", "author"] },
    data: [{ body: "cross-site bearer" }],
  }, { ...crossSite, ...bearer(member) });
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal((await res.json())[0].author, "member");
  // The body contract stays: POST /svc reads JSON only, whatever the credential.
  for (const headers of [bearer(member), cookie(member)]) {
    const text = await fetch(`${srv.url}/svc`, {
      method: "POST",
      headers: { "content-type": "text/plain", ...headers },
      body: JSON.stringify({ function: "whoami" }),
    });
    assert.equal(text.status, 415);
    await text.body?.cancel();
  }
});

Deno.test("stop the server", async () => {
  await srv.stop();
});
