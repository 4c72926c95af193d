/**
 * Session answers are not for shared caches (docs/http.md, "Caching"): an answer carrying a
 * session cookie (a renewal or a clearing) is `Cache-Control: private, no-store`, whatever it said
 * (a static file's `no-cache` included); an answer for a session is `private` unless it says
 * otherwise; an anonymous answer gets nothing added. Found by a hostile client: authenticated
 * reads, private pages and renewed cookies carried no Cache-Control at all.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const dir = await Deno.makeTempDir({ prefix: "svc-caching-" });
await Deno.writeTextFile(`${dir}/page.txt`, "static");
// Routes that mint and clear a session, each answer saying it may be cached publicly.
const ROUTES = `
create function cache_login(req jsonb) returns table (resp jsonb, content jsonb) language sql as $$
  select jsonb_build_object('jwt', jsonb_build_object('role', 'app_user'),
    'headers', jsonb_build_object('cache-control', 'public, max-age=600')), '{"ok": true}'::jsonb
$$;
comment on function cache_login(jsonb) is 'route:: path: /cache_login, method: POST';
create function cache_logout(req jsonb) returns table (resp jsonb, content jsonb) language sql as $$
  select jsonb_build_object('jwt', null,
    'headers', jsonb_build_object('cache-control', 'public, max-age=600')), '{"ok": true}'::jsonb
$$;
comment on function cache_logout(jsonb) is 'route:: path: /cache_logout, method: POST';
grant execute on function cache_login(jsonb), cache_logout(jsonb) to "~anonymous", app_user;
`;
const srv = await startServer(await chinookDb("caching", ROUTES), [`--http.static.path=${dir}`]);
const read = { relation: "genre", limit: 1 };

async function session(ageSeconds: number): Promise<HeadersInit> {
  const t = now() - ageSeconds;
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
}

Deno.test("anonymous answers get no Cache-Control added", async () => {
  const r = await srv.post("/svc", read);
  await r.body?.cancel();
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("cache-control"), null);
});

Deno.test("an answer for a session is private", async () => {
  const fresh = await session(10);
  for (
    const r of [
      await srv.post("/svc", read, fresh),
      await srv.get("/svc?relation=genre&limit=1", fresh),
    ]
  ) {
    await r.body?.cancel();
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("set-cookie"), null, "no renewal yet");
    assert.equal(r.headers.get("cache-control"), "private");
  }
});

Deno.test("an answer renewing or clearing the session cookie is private, no-store", async () => {
  const old = await session(1000); // past jwt.renew_after (half of 1,800 s)
  for (const path of ["/svc?relation=genre&limit=1", "/page.txt"]) {
    const r = await srv.get(path, old);
    await r.body?.cancel();
    assert.equal(r.status, 200, path);
    assert.match(r.headers.get("set-cookie") ?? "", /^accesstoken=/, path);
    assert.equal(r.headers.get("cache-control"), "private, no-store", path);
  }
  const cleared = await srv.get("/page.txt", cookie("garbage.x.y"));
  await cleared.body?.cancel();
  assert.match(cleared.headers.get("set-cookie") ?? "", /Max-Age=0/);
  assert.equal(cleared.headers.get("cache-control"), "private, no-store");
});

Deno.test("a route minting or clearing the session answers private, no-store, over its own header", async () => {
  const login = await srv.post("/cache_login", {});
  await login.body?.cancel();
  assert.equal(login.status, 200);
  assert.match(login.headers.get("set-cookie") ?? "", /^accesstoken=/);
  assert.equal(login.headers.get("cache-control"), "private, no-store");
  for (const who of [await session(10), undefined]) {
    const logout = await srv.post("/cache_logout", {}, who);
    await logout.body?.cancel();
    assert.equal(logout.status, 200);
    assert.match(logout.headers.get("set-cookie") ?? "", /Max-Age=0/);
    assert.equal(logout.headers.get("cache-control"), "private, no-store");
  }
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
  await Deno.remove(dir, { recursive: true });
});
