/**
 * The pure parts of Bearer tokens and external issuers: the Authorization header's token, the
 * `jwt.role_claim` path language, and the `jwt.*` keys checked at configuration load.
 */
import assert from "node:assert/strict";
import { bearerToken } from "../../src/auth/bearer.ts";
import { claimAt, parseClaimPath } from "../../src/auth/issuers.ts";
import { ConfigError, loadConfig } from "../../src/config/load.ts";

Deno.test("bearerToken: the Bearer scheme's one token, '' when malformed, undefined otherwise", () => {
  assert.equal(bearerToken("Bearer abc.def.ghi"), "abc.def.ghi");
  assert.equal(bearerToken("bearer  abc.def-_~+/=="), "abc.def-_~+/==");
  assert.equal(bearerToken("BEARER x"), "x");
  for (const bad of ["Bearer", "Bearer ", "Bearer a b", "Bearer a, Bearer b", "Bearer a;b"]) {
    assert.equal(bearerToken(bad), "", bad);
  }
  for (const other of [null, undefined, "Basic dXNlcjpwYXNz", "Bearerx y", "Token abc", ""]) {
    assert.equal(bearerToken(other), undefined, String(other));
  }
});

Deno.test("parseClaimPath: keys, quoted keys and array indexes", () => {
  assert.deepEqual(parseClaimPath("role"), ["role"]);
  assert.deepEqual(parseClaimPath(".role"), ["role"]);
  assert.deepEqual(parseClaimPath(".app_metadata.role"), ["app_metadata", "role"]);
  assert.deepEqual(parseClaimPath("app_metadata.role"), ["app_metadata", "role"]);
  assert.deepEqual(parseClaimPath('."https://example.com/role"'), ["https://example.com/role"]);
  assert.deepEqual(parseClaimPath('."a \\"b\\" \\\\c".d'), ['a "b" \\c', "d"]);
  assert.deepEqual(parseClaimPath(".roles[0]"), ["roles", 0]);
  assert.deepEqual(parseClaimPath(".realm_access.roles[12]"), ["realm_access", "roles", 12]);
  assert.deepEqual(parseClaimPath("[1].x"), [1, "x"]);
  for (
    const bad of [
      "",
      ".",
      "..a",
      ".a.",
      ".a[",
      ".a[x]",
      ".a[-1]",
      '."unterminated',
      '.""',
      "a b",
      ".a]",
      '."a\\x"',
    ]
  ) {
    assert.throws(() => parseClaimPath(bad), Error, bad);
  }
});

Deno.test("claimAt: own properties and array elements only", () => {
  const claims = {
    role: "top",
    app_metadata: { role: "nested" },
    roles: ["first", "second"],
    "https://example.com/role": "url",
  };
  assert.equal(claimAt(claims, parseClaimPath("role")), "top");
  assert.equal(claimAt(claims, parseClaimPath(".app_metadata.role")), "nested");
  assert.equal(claimAt(claims, parseClaimPath(".roles[1]")), "second");
  assert.equal(claimAt(claims, parseClaimPath('."https://example.com/role"')), "url");
  assert.equal(claimAt(claims, parseClaimPath(".roles[2]")), undefined);
  assert.equal(claimAt(claims, parseClaimPath(".roles.length")), undefined);
  assert.equal(claimAt(claims, parseClaimPath(".role.length")), undefined);
  assert.equal(claimAt(claims, parseClaimPath(".app_metadata.constructor")), undefined);
  assert.equal(claimAt(claims, parseClaimPath(".app_metadata[0]")), undefined);
});

Deno.test("configuration: jwt.role_claim, jwt.jwks_url, jwt.issuer, jwt.audience checked at load", () => {
  const load = (...args: string[]) => loadConfig({ args, env: {} });
  const cfg = load(
    "--jwt.jwks_url=https://idp.example/.well-known/jwks.json",
    "--jwt.issuer=https://idp.example/",
    "--jwt.audience=a, b",
    '--jwt.role_claim=."https://x/role"',
  );
  assert.deepEqual(cfg.jwt.audience, ["a", "b"]);
  assert.equal(load().jwt.role_claim, "role");
  assert.throws(() => load("--jwt.role_claim=.a["), ConfigError);
  assert.throws(() => load("--jwt.role_claim=.a["), /jwt\.role_claim.*character 3/);
  assert.throws(() => load("--jwt.jwks_url=not a url"), /jwt\.jwks_url/);
  assert.throws(() => load("--jwt.jwks_url=ftp://idp.example/keys"), /jwt\.jwks_url/);
  assert.throws(() => load("--jwt.issuer=https://idp.example/"), /jwt\.issuer.*jwt\.jwks_url/);
  assert.throws(() => load("--jwt.audience=x"), /jwt\.audience.*jwt\.jwks_url/);
});
