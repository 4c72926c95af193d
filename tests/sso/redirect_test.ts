/**
 * Redirect targets are checked before the function's transaction commits: an SSO callback's or a
 * route's `redirect` with a control character (raw or a percent-encoded tab/CR/LF), a backslash or
 * a scheme-relative `//host` answers 400 HTTP_UNSAFE_REDIRECT and nothing the function wrote
 * persists; characters beyond ASCII are percent-encoded. Real SAML logins and real routes.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { safeRedirect } from "../../src/http/routes/response.ts";
import { freePort, Jar } from "./oidc_idp.ts";
import { startSamlIdp } from "./saml_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
// A callback and a route that follow `next` / `to` without any check, writing a row first.
const naive = `
create function public.sso_naive(p jsonb) returns jsonb
language plpgsql security definer set search_path = public as $$
begin
  insert into sso_log (ran_as, payload) values ('naive', p);
  return jsonb_build_object('jwt', jsonb_build_object('role', 'member'),
    'redirect', p->'state'->>'next');
end $$;
revoke execute on function public.sso_naive(jsonb) from public;
grant execute on function public.sso_naive(jsonb) to "~anonymous";
create table go_log (id serial primary key, target text);
create function public.go(req jsonb, out resp jsonb, out content jsonb)
language plpgsql security definer set search_path = public as $$
begin
  insert into go_log (target) values (req->'query'->>'to');
  resp := jsonb_build_object('redirect', req->'query'->>'to');
end $$;
revoke execute on function public.go(jsonb) from public;
grant execute on function public.go(jsonb) to "~anonymous";
create function public.hdr(req jsonb, out resp jsonb, out content jsonb) language sql as $$
  select jsonb_build_object('headers', jsonb_build_object('x-v', req->'query'->>'v')), null::jsonb
$$;
revoke execute on function public.hdr(jsonb) from public;
grant execute on function public.hdr(jsonb) to "~anonymous";
`;
const uri = await emptyDb("redirects", fixture + naive);
const svcPort = freePort();
const origin = `http://127.0.0.1:${svcPort}`;
const tmp = await Deno.makeTempDir();
const idp = await startSamlIdp();
const srv = await startServer(uri, [
  `--http.port=${svcPort}`,
  `--http.public_host=127.0.0.1:${svcPort}`,
  "--http.functions.sso_callback=public.sso_naive",
  `--saml.certificate_path=${tmp}/saml.crt`,
  `--saml.private_key_path=${tmp}/saml.key`,
  `--saml.corp.idp_metadata_url=${idp.base}/metadata`,
  "--route.public.go.path=/go",
  "--route.public.go.method=GET",
  "--route.public.hdr.path=/hdr",
  "--route.public.hdr.method=GET",
]);
const sql = sqlClient(uri);

const test = (name: string, fn: () => Promise<void> | void) =>
  Deno.test({ name, fn, sanitizeOps: false, sanitizeResources: false });

const UNSAFE = [
  ["a raw tab (browsers drop it: //evil.com)", "/\t/evil.com"],
  ["a percent-encoded tab", "/%09/evil.com"],
  ["a percent-encoded CR/LF", "/x%0D%0ALocation: //evil.com"],
  ["CR/LF", "/x\r\nSet-Cookie: a=b"],
  ["a backslash", "/\\evil.com"],
  ["a scheme-relative URL", "//evil.com/x"],
  ["a scheme-relative URL after spaces", "  //evil.com"],
  ["a DEL", "/a\x7f"],
] as const;

/** A SAML login at svc whose login query is `query`; svc's answer to the IdP's response. */
async function samlLogin(query: string): Promise<Response> {
  const jar = new Jar();
  const res = await jar.fetch(`${origin}/auth/saml/corp/login${query}`);
  assert.equal(res.status, 303, await res.text());
  await (await fetch(res.headers.get("location")!)).text();
  const acs = `${origin}/auth/saml/corp/acs`;
  const xml = idp.sign(
    idp.build({
      destination: acs,
      recipient: acs,
      audience: `${origin}/auth/saml/corp/metadata`,
      inResponseTo: idp.lastRequest!.id,
    }),
    "Assertion",
  );
  return await jar.fetch(acs, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ SAMLResponse: btoa(xml) }),
  });
}

async function unsafe(res: Response): Promise<void> {
  const body = await res.text();
  assert.equal(res.status, 400, body);
  assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_UNSAFE_REDIRECT", body);
  assert.equal(res.headers.get("location"), null);
  assert.ok(!res.headers.getSetCookie().some((c) => /^accesstoken=[^;]/.test(c)), "no session");
}

const rows = async (table: "sso_log" | "go_log") =>
  (await sql.unsafe(`select count(*)::int as n from ${table}`))[0].n as number;

test("the IdP is ready", async () => {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const res = await fetch(`${origin}/auth/saml/corp/metadata`);
    await res.body?.cancel();
    if (res.status === 200) break;
    assert.ok(Date.now() < deadline, "the SAML entry did not become ready");
    await new Promise((r) => setTimeout(r, 200));
  }
});

for (const [what, next] of UNSAFE) {
  test(`SSO callback: a redirect with ${what} is 400 before the commit`, async () => {
    await sql`truncate sso_log`;
    await unsafe(await samlLogin(`?next=${encodeURIComponent(next)}`));
    assert.equal(await rows("sso_log"), 0, "the callback's writes were rolled back");
  });
  test(`route: a redirect with ${what} is 400 before the commit`, async () => {
    await sql`truncate go_log`;
    await unsafe(
      await fetch(`${origin}/go?to=${encodeURIComponent(next)}`, { redirect: "manual" }),
    );
    assert.equal(await rows("go_log"), 0, "the route's writes were rolled back");
  });
}

test("a safe redirect is followed; characters beyond ASCII are percent-encoded", async () => {
  await sql`truncate sso_log`;
  await sql`truncate go_log`;
  for (
    const [next, location] of [["/after?x=1#y", "/after?x=1#y"], [
      "/café/€",
      "/caf%C3%A9/%E2%82%AC",
    ], ["https://example.com/x", "https://example.com/x"]]
  ) {
    const res = await samlLogin(`?next=${encodeURIComponent(next)}`);
    assert.equal(res.status, 303, await res.text());
    assert.equal(res.headers.get("location"), location);
    const r = await fetch(`${origin}/go?to=${encodeURIComponent(next)}`, { redirect: "manual" });
    assert.equal(r.status, 303, await r.text());
    assert.equal(r.headers.get("location"), location);
  }
  assert.equal(await rows("sso_log"), 3);
  assert.equal(await rows("go_log"), 3);
});

test("safeRedirect agrees with the routes' SQL rule", async () => {
  const samples = [
    ...UNSAFE.map(([, v]) => v),
    "/ok",
    "/a/b?c=%20d",
    "/%2F/x",
    "https://x.example/",
    "/ü",
    " /lead",
    "/x%0",
    "/x%0aY",
    "/a\x85b",
  ];
  for (const v of samples) {
    let js = true;
    try {
      safeRedirect(v);
    } catch {
      js = false;
    }
    const r = await fetch(`${origin}/go?to=${encodeURIComponent(v)}`, { redirect: "manual" });
    await r.body?.cancel();
    assert.equal(r.status === 303, js, `${JSON.stringify(v)}: route ${r.status}, js ${js}`);
  }
});

test("a header value with a control character is 500 HTTP_ROUTE_RESPONSE_INVALID, and svc keeps serving", async () => {
  for (const v of ["a\x7fb", "a\x01b", "a\x1bb"]) {
    const res = await fetch(`${origin}/hdr?v=${encodeURIComponent(v)}`);
    const body = await res.text();
    assert.equal(res.status, 500, body);
    assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_ROUTE_RESPONSE_INVALID");
  }
  const ok = await fetch(`${origin}/hdr?v=${encodeURIComponent("a\tb c")}`);
  await ok.body?.cancel();
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get("x-v"), "a\tb c");
});

test("docs/sso.md's sample callback: OIDC needs email_verified; an unsafe next falls back to /", async () => {
  const readme = await Deno.readTextFile(new URL("../../docs/sso.md", import.meta.url));
  const sample = /```sql\n(create table sso_user[\s\S]*?)```/.exec(readme)![1];
  const db = sqlClient(await emptyDb("readme_sample", sample));
  try {
    const call = async (identity: unknown, next: string) =>
      (await db.unsafe<{ r: { redirect: string; jwt: { role: string } } }>(
        "select public.sso_login($1::text::jsonb) as r",
        [
          JSON.stringify({ jwt: null, identity, state: { next } }),
        ],
      ))[0].r;
    const oidc = (claims: Record<string, unknown>) => ({ protocol: "oidc", name: "corp", claims });
    const alice = { email: "alice@example.com", email_verified: true };
    assert.equal((await call(oidc(alice), "/home")).redirect, "/home");
    assert.equal((await call(oidc(alice), "/home")).jwt.role, "app_user");
    for (const claims of [{ email: "alice@example.com" }, { ...alice, email_verified: false }]) {
      await assert.rejects(call(oidc(claims), "/"), /unverified/);
    }
    const saml = { protocol: "saml", name: "corp", claims: { email: ["alice@example.com"] } };
    assert.equal((await call(saml, "/a?b=c")).redirect, "/a?b=c");
    for (const [, next] of UNSAFE) {
      const r = (await call(saml, next)).redirect;
      assert.equal(r, "/", JSON.stringify(next));
    }
  } finally {
    await db.end();
  }
});

test("cleanup", async () => {
  await srv.stop();
  await sql.end();
  await idp.stop();
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
