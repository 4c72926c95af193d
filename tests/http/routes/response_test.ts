/** Applying resp/content to a Response: pure unit tests (real Sessions, no database). */
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { Sessions } from "../../../src/auth/session.ts";
import {
  type ApplyContext,
  applyHttpResponse,
  buildResponse,
  cookieHeader,
} from "../../../src/http/routes/response.ts";
import { SvcError } from "../../../src/svc_error.ts";
import { configureLogging } from "../../../src/observe/log.ts";

configureLogging({ level: "fatal", handler: "json", filter: {}, exclude: {} } as never);

const sessions = new Sessions({
  secret: new TextEncoder().encode("unit-test-secret-unit-test-secret"),
  algorithm: "HS256",
  maxAge: 600,
  renewAfter: 0.5,
  maxSessionAge: 3600,
  cookieName: "accesstoken",
  sameSite: "Lax",
});
const ctx = (o: Partial<ApplyContext> = {}): ApplyContext => ({
  sessions,
  sessionCookieName: "accesstoken",
  cookiesMaxAge: 100,
  authId: "app.f",
  allowedAuth: null,
  ...o,
});

Deno.test("cookie defaults and overrides", () => {
  assert.equal(
    cookieHeader("a", "x y", 100),
    "a=x%20y; Max-Age=100; Path=/; HttpOnly; Secure; SameSite=Lax",
  );
  assert.equal(
    cookieHeader("a", {
      value: "1",
      max_age: null,
      http_only: false,
      secure: false,
      same_site: "None",
      domain: "example.com",
    }, 100),
    "a=1; Domain=example.com; Path=/; SameSite=None",
  );
  assert.equal(
    cookieHeader("a", null, 100),
    "a=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Lax",
  );
  assert.throws(() => cookieHeader("a b", "1", 100), /invalid cookie name/);
  assert.throws(() => cookieHeader("a", { value: "1", path: "/\r\nx" }, 100), /path must be/);
  assert.throws(() => cookieHeader("a", { value: "1", same_site: "Sometimes" }, 100), /same_site/);
});

Deno.test("jwt object mints with service-set times; null clears; allowed_auth gates", async () => {
  const t = Math.floor(Date.now() / 1000);
  const { response, session } = await buildResponse(
    { jwt: { role: "r", iat: 1, exp: 2, auth_time: 3, x: 1 } },
    { ok: true },
    ctx(),
  );
  assert.ok(session);
  const set = response.headers.getSetCookie()[0];
  const claims = decodeJwt(set.slice(12, set.indexOf(";")));
  assert.ok(
    claims.iat! >= t && claims.exp === claims.iat! + 600 && claims.auth_time === claims.iat,
  );
  assert.equal(claims.x, 1);
  const cleared = await buildResponse({ jwt: null }, null, ctx());
  assert.match(cleared.response.headers.get("set-cookie")!, /^accesstoken=; Max-Age=0/);
  // allowed_auth gates minting only: clearing (logout, revocation) is always honoured.
  await assert.rejects(
    buildResponse({ jwt: { role: "r" } }, null, ctx({ allowedAuth: /^app\.login$/ })),
    (e: Error) => e instanceof SvcError && e.code === "AUTH_JWT_NOT_ALLOWED",
  );
  const out = await buildResponse(
    { status: 401, jwt: null },
    null,
    ctx({ allowedAuth: /^app\.login$/ }),
  );
  assert.equal(out.response.status, 401);
  assert.ok(out.session);
  assert.deepEqual(out.response.headers.getSetCookie(), [sessions.clearCookie()]);
  // Ahead of /svc there is no identifier: only an unrestricted allowed_auth lets it mint.
  await assert.rejects(
    buildResponse({ jwt: { role: "r" } }, null, ctx({ authId: null, allowedAuth: /.*/ })),
    (e: Error) => e instanceof SvcError && e.code === "AUTH_JWT_NOT_ALLOWED",
  );
  const ahead = await buildResponse({ jwt: null }, null, ctx({ authId: null, allowedAuth: /.*/ }));
  assert.deepEqual(ahead.response.headers.getSetCookie(), [sessions.clearCookie()]);
  // A jwt without a role cannot be minted: 500 HTTP_ROUTE_RESPONSE_INVALID.
  await assert.rejects(
    buildResponse({ jwt: { x: 1 } }, null, ctx()),
    (e: Error) => e instanceof SvcError && e.code === "HTTP_ROUTE_RESPONSE_INVALID",
  );
});

Deno.test("content: JSON by default, text with a non-JSON content type", async () => {
  const j = await buildResponse(null, { a: 1 }, ctx());
  assert.equal(j.response.headers.get("content-type"), "application/json");
  assert.equal(await j.response.text(), '{"a":1}');
  const t = await buildResponse({ headers: { "content-type": "text/csv" } }, "a,b\n1,2", ctx());
  assert.equal(await t.response.text(), "a,b\n1,2");
  assert.equal(t.session, false);
});

Deno.test("template through the render hook, with the nonce at it.nonce", async () => {
  let seen: unknown;
  const r = await buildResponse(
    { template: "p.eta" },
    { nonce: "forged", v: 1 },
    ctx({
      hooks: {
        render: (name, it, nonce) => {
          seen = { name, it, nonce };
          return Promise.resolve(`<p>${nonce}</p>`);
        },
      },
    }),
  );
  const s = seen as { name: string; it: { nonce: string; v: number }; nonce: string };
  assert.equal(s.name, "p.eta");
  assert.equal(s.it.nonce, s.nonce);
  assert.notEqual(s.nonce, "forged");
  assert.equal(r.response.headers.get("content-type"), "text/html; charset=utf-8");
  assert.equal(await r.response.text(), `<p>${s.nonce}</p>`);
});

Deno.test("applyHttpResponse: single envelope (SSO callback shape)", async () => {
  const r = await applyHttpResponse(
    { redirect: "/home", jwt: { role: "r" }, content: null, template_data: { x: 1 } },
    ctx(),
  );
  assert.equal(r.response.status, 303);
  assert.equal(r.response.headers.get("location"), "/home");
  assert.ok(r.session);
  const plain = await applyHttpResponse({ status: 201, content: { ok: 1 } }, ctx());
  assert.equal(plain.response.status, 201);
  assert.deepEqual(await plain.response.json(), { ok: 1 });
  // A callback outside allowed_auth logs out, and cannot set the session cookie by a header.
  const restricted = ctx({ authId: "app.cb", allowedAuth: /^app\.login$/ });
  const out = await applyHttpResponse({ jwt: null, redirect: "/bye" }, restricted);
  assert.equal(out.response.status, 303);
  assert.deepEqual(out.response.headers.getSetCookie(), [sessions.clearCookie()]);
  await assert.rejects(
    applyHttpResponse({ headers: { "Set-Cookie": "accesstoken=x; Path=/a" } }, restricted),
    (e: Error) => e instanceof SvcError && e.code === "HTTP_ROUTE_RESPONSE_INVALID",
  );
});

Deno.test("malformed resp is 500 HTTP_ROUTE_RESPONSE_INVALID", async () => {
  for (
    const resp of [
      "x",
      { status: 99 },
      { status: 200.5 },
      { headers: "x" },
      { headers: { "bad name": "1" } },
      { headers: { a: "1\n2" } },
      { cookies: { accesstoken: "x" } },
      { headers: { "set-cookie": "accesstoken=x" } },
      { headers: { "Set-Cookie": ["a=1", "accesstoken=; Max-Age=0"] } },
      { headers: { "clear-site-data": '"cookies"' } },
      { headers: { a: "1\x7f2" } },
      { redirect: 42 },
      { template: "t" },
    ]
  ) {
    await assert.rejects(
      buildResponse(resp, null, ctx()),
      (e: Error) => e instanceof SvcError && e.code === "HTTP_ROUTE_RESPONSE_INVALID",
      JSON.stringify(resp),
    );
  }
});

Deno.test("an unsafe redirect is 400 HTTP_UNSAFE_REDIRECT; non-ASCII is percent-encoded", async () => {
  for (const redirect of ["/a\r\nb", "/\t/evil.com", "/%09/evil.com", "//evil.com", "/\\evil"]) {
    await assert.rejects(
      buildResponse({ redirect }, null, ctx()),
      (e: Error) => e instanceof SvcError && e.code === "HTTP_UNSAFE_REDIRECT" && e.status === 400,
      JSON.stringify(redirect),
    );
  }
  const ok = await buildResponse({ redirect: "/ü?x=ü" }, null, ctx());
  assert.equal(ok.response.headers.get("location"), "/%C3%BC?x=%C3%BC");
});
