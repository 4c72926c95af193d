/** The SSO state cookie, query decoding and public URL rules (pure units). */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { loadConfig } from "../../src/config/load.ts";
import { publicOrigin } from "../../src/sso/common.ts";
import { decodeQuery, StateCookies } from "../../src/sso/login_state.ts";
import { SvcError } from "../../src/svc_error.ts";

const secret = new TextEncoder().encode("state-test-secret-state-test-secret-0123");

async function badState(p: Promise<unknown>) {
  await assert.rejects(p, (e: unknown) => e instanceof SvcError && e.code === "SSO_BAD_STATE");
}

Deno.test("decodeQuery nests dotted keys, keeps strings, repeats become arrays, empty is null", () => {
  assert.equal(decodeQuery(new URLSearchParams("")), null);
  assert.deepEqual(decodeQuery(new URLSearchParams("next=/a&x.y.z=1&t=1&t=2&__proto__.p=1")), {
    next: "/a",
    x: { y: { z: "1" } },
    t: ["1", "2"],
    ["__proto__"]: { p: "1" },
  });
  assert.equal(({} as Record<string, unknown>).p, undefined, "no prototype pollution");
});

Deno.test("state cookies: attributes, one use, entry-bound, signed, expiring", async () => {
  const states = new StateCookies(secret);
  const set = await states.cookie({ protocol: "oidc", name: "a", state: "s", query: null });
  assert.match(set, /^svc_sso=[^;]+; Max-Age=600; Path=\/auth\/; HttpOnly; Secure; SameSite=Lax$/);
  const saml = await states.cookie({ protocol: "saml", name: "a", rid: "_1", query: null });
  assert.match(saml, /SameSite=None/);
  const header = set.split(";")[0];
  await badState(states.consume(header, "saml", "a"));
  await badState(states.consume(header, "oidc", "b"));
  const st = await states.consume(header, "oidc", "a");
  assert.equal(st.state, "s");
  await badState(states.consume(header, "oidc", "a"));
  await badState(states.consume(null, "oidc", "a"));
  await badState(states.consume(`${header}; ${header}`, "oidc", "a"));
  // Signed with the session secret itself instead of the derived key: refused.
  const foreign = await new SignJWT({ protocol: "oidc", name: "a", query: null })
    .setProtectedHeader({ alg: "HS256" }).setJti("x").setExpirationTime("5m").sign(secret);
  await badState(states.consume(`svc_sso=${foreign}`, "oidc", "a"));
  // Another instance (another secret) cannot read it either.
  const other = new StateCookies(new TextEncoder().encode("another-secret-another-secret-0123456"));
  const fresh = (await states.cookie({ protocol: "oidc", name: "a", query: null })).split(";")[0];
  await badState(other.consume(fresh, "oidc", "a"));
});

Deno.test("public origin: per-entry host, http for loopback, https otherwise, public_scheme wins", () => {
  const cfg = (flags: string[]) => loadConfig({ args: flags, env: {} });
  assert.equal(publicOrigin(cfg([]), undefined), undefined);
  assert.equal(
    publicOrigin(cfg(["--http.public_host=app.example.com"]), undefined),
    "https://app.example.com",
  );
  assert.equal(
    publicOrigin(cfg(["--http.public_host=localhost:8080"]), undefined),
    "http://localhost:8080",
  );
  assert.equal(publicOrigin(cfg([]), "127.0.0.1:9"), "http://127.0.0.1:9");
  assert.equal(publicOrigin(cfg([]), "[::1]:9"), "http://[::1]:9");
  assert.equal(
    publicOrigin(cfg(["--http.public_host=a.example", "--http.public_scheme=http"]), "b.example"),
    "http://b.example",
  );
});
