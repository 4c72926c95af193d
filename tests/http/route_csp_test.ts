/**
 * A route's own policy (`resp.csp`) on an HTML page it answers without a template gets a fresh
 * nonce in `script-src` and `style-src`, as the configured policy and a template page's do
 * (docs/routes.md); before, it was sent verbatim. A JSON answer's `resp.csp` stays as given.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

const FIXTURE = `
create schema pages;
grant usage on schema pages to "~anonymous";
create function pages.plain(req jsonb) returns table (resp jsonb, content jsonb)
  language sql stable as $$
  select jsonb_build_object('headers', jsonb_build_object('content-type', 'text/html'),
                            'csp', 'default-src ''self''; img-src https://img.example'),
         to_jsonb('<!doctype html><p>hello</p>'::text)
$$;
create function pages.data(req jsonb) returns table (resp jsonb, content jsonb)
  language sql stable as $$
  select jsonb_build_object('csp', 'default-src ''none'''), '{"a":1}'::jsonb
$$;
grant execute on function pages.plain(jsonb), pages.data(jsonb) to "~anonymous";
`;

const srv = await startServer(await chinookDb("route_csp", FIXTURE), [
  "--route.pages.plain.path=/plain",
  "--route.pages.data.path=/data",
]);

Deno.test("resp.csp on an HTML page without a template gets a fresh nonce", async () => {
  const nonces = new Set<string>();
  for (let i = 0; i < 2; i++) {
    const r = await srv.get("/plain");
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal(await r.text(), "<!doctype html><p>hello</p>");
    const csp = r.headers.get("content-security-policy") ?? "";
    assert.match(csp, /^default-src 'self'; img-src https:\/\/img\.example; /, csp);
    const m = /script-src [^;]*'nonce-([A-Za-z0-9+/=]+)'/.exec(csp);
    assert.ok(m, csp);
    assert.match(csp, /style-src [^;]*'nonce-/, csp);
    nonces.add(m[1]);
  }
  assert.equal(nonces.size, 2, "a fresh nonce per response");
  const d = await srv.get("/data");
  assert.deepEqual(await d.json(), { a: 1 });
  assert.equal(d.headers.get("content-security-policy"), "default-src 'none'");
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
