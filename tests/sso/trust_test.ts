/**
 * Trust that follows the identity providers over time, against real providers on loopback whose
 * keys the tests rotate: SAML IdP metadata fetched again on reload, periodically
 * (`metadata_refresh`, cacheDuration) and refused past its validUntil; OIDC discovery and keys
 * (openid-client's JWKS cache) fetched again on reload. After a rotation and a refresh the old key
 * is refused and the new one accepted, without a restart.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import type { SpKeyPair } from "../../src/sso/certs.ts";
import { Lazy } from "../../src/sso/common.ts";
import { durationMs, metadataTiming } from "../../src/sso/saml_metadata.ts";
import {
  driveIdp,
  freePort,
  Jar,
  newSigningKey,
  type OidcIdp,
  type SigningKey,
  startOidcIdp,
} from "./oidc_idp.ts";
import { startSamlIdp } from "./saml_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
const uri = await emptyDb("sso", fixture);
const svcPort = freePort();
const oidcPort = freePort();
const origin = `http://127.0.0.1:${svcPort}`;
const tmp = await Deno.makeTempDir();
const idp = await startSamlIdp();
// Publishes a one-second cacheDuration; publishes metadata already past its validUntil.
const cachedIdp = await startSamlIdp();
cachedIdp.metadataAttrs = `cacheDuration="PT1S"`;
const expiredIdp = await startSamlIdp();
expiredIdp.metadataAttrs = `validUntil="${new Date(Date.now() - 60_000).toISOString()}"`;
const k1 = await newSigningKey("k1");
let oidc: OidcIdp = await startOidcIdp([`${origin}/auth/oidc/main/callback`], oidcPort, k1);
const srv = await startServer(uri, [
  `--http.port=${svcPort}`,
  `--http.public_host=127.0.0.1:${svcPort}`,
  "--http.functions.sso_callback=public.sso_login",
  `--saml.certificate_path=${tmp}/saml.crt`,
  `--saml.private_key_path=${tmp}/saml.key`,
  `--saml.corp.idp_metadata_url=${idp.base}/metadata`,
  `--saml.fast.idp_metadata_url=${idp.base}/metadata`,
  "--saml.fast.metadata_refresh=1",
  `--saml.cached.idp_metadata_url=${cachedIdp.base}/metadata`,
  `--saml.expired.idp_metadata_url=${expiredIdp.base}/metadata`,
  `--openid.main.issuer=http://127.0.0.1:${oidcPort}`,
  `--openid.main.client_id=${oidc.clientId}`,
  `--openid.main.client_secret=${oidc.clientSecret}`,
]);

const test = (name: string, fn: () => Promise<void> | void) =>
  Deno.test({ name, fn, sanitizeOps: false, sanitizeResources: false });

/** Polls `ok` until it holds (deadline `ms`); fails with `what`. */
async function until(what: string, ok: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await ok()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`not within ${ms} ms: ${what}`);
}

async function status(url: string): Promise<number> {
  const res = await fetch(url, { redirect: "manual" });
  await res.body?.cancel();
  return res.status;
}

/** A SAML login at `entry` answered by a response signed with `keys`: svc's answer. */
async function samlLogin(entry: string, keys: SpKeyPair): Promise<Response> {
  const jar = new Jar();
  const res = await jar.fetch(`${origin}/auth/saml/${entry}/login`);
  assert.equal(res.status, 303, await res.text());
  await (await fetch(res.headers.get("location")!)).text();
  const acs = `${origin}/auth/saml/${entry}/acs`;
  const xml = idp.sign(
    idp.build({
      destination: acs,
      recipient: acs,
      audience: `${origin}/auth/saml/${entry}/metadata`,
      inResponseTo: idp.lastRequest!.id,
    }),
    "Assertion",
    keys,
  );
  return await jar.fetch(acs, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ SAMLResponse: btoa(xml) }),
  });
}

async function accepted(res: Response): Promise<boolean> {
  const body = await res.text();
  if (res.status === 303) return true;
  assert.equal(res.headers.get("x-svc-errorcode"), "SSO_SAML_INVALID_RESPONSE", body);
  return false;
}

/** An OIDC login; `key` re-signs the provider's ID token (a key it may no longer publish). */
async function oidcLogin(key?: SigningKey): Promise<Response> {
  oidc.tamper = key
    ? async (body) => {
      body.id_token = await oidc.forge(body.id_token as string, () => {}, key);
    }
    : null;
  try {
    const jar = new Jar();
    const res = await jar.fetch(`${origin}/auth/oidc/main/login`);
    assert.equal(res.status, 303, await res.text());
    const cb = await driveIdp(
      jar,
      res.headers.get("location")!,
      "alice@example.com",
      `${origin}/auth/oidc/main/callback`,
    );
    return await jar.fetch(cb);
  } finally {
    oidc.tamper = null;
  }
}

test("every entry resolves (except metadata past its validUntil)", async () => {
  await until("the entries are ready", async () =>
    (await Promise.all(
      ["corp", "fast", "cached"].map((e) => status(`${origin}/auth/saml/${e}/metadata`)),
    )).every((s) => s === 200) && await status(`${origin}/auth/oidc/main/login`) === 303);
  assert.ok(await accepted(await samlLogin("corp", idp.keys)));
});

test("SAML: the IdP rotates its key; after a reload the old key is refused, the new one accepted", async () => {
  const old = idp.keys;
  const fetches = idp.metadataFetches;
  const next = await idp.rotate();
  assert.ok(await accepted(await samlLogin("corp", old)), "trusted until svc refreshes");
  assert.equal(await srv.server.runtime.reload("signal"), true);
  // The metadata is fetched again in the background after the reload.
  await until("the old key is refused", async () => !await accepted(await samlLogin("corp", old)));
  assert.ok(idp.metadataFetches > fetches);
  assert.ok(await accepted(await samlLogin("corp", next)), "the new key is accepted");
});

test("SAML: metadata_refresh re-fetches periodically (no reload)", async () => {
  const old = idp.keys;
  const next = await idp.rotate();
  await until("the new key is accepted", async () => await accepted(await samlLogin("fast", next)));
  assert.equal(await accepted(await samlLogin("fast", old)), false, "the old key is refused");
});

test("SAML: cacheDuration shortens the refresh period; metadata past validUntil is not used", async () => {
  const first = cachedIdp.metadataFetches;
  await until(
    "cacheDuration PT1S honoured",
    () => Promise.resolve(cachedIdp.metadataFetches >= first + 2),
  );
  const res = await fetch(`${origin}/auth/saml/expired/login`, { redirect: "manual" });
  assert.equal(res.status, 503, await res.text());
  assert.equal(res.headers.get("x-svc-errorcode"), "SSO_NOT_READY");
});

test("OIDC: the provider rotates its key; after a reload the old key is refused, the new one accepted", async () => {
  assert.equal((await oidcLogin()).status, 303, "a login caches the provider's keys");
  await oidc.stop();
  const k2 = await newSigningKey("k2");
  oidc = await startOidcIdp([`${origin}/auth/oidc/main/callback`], oidcPort, k2);
  const before = await oidcLogin(k1);
  assert.equal(before.status, 303, `k1 is trusted until svc refreshes: ${await before.text()}`);
  assert.equal(await srv.server.runtime.reload("signal"), true);
  await until("an ID token signed with k1 is refused", async () => {
    const res = await oidcLogin(k1);
    const body = await res.text();
    if (res.status === 303) return false;
    assert.equal(res.status, 502, body);
    assert.equal(res.headers.get("x-svc-errorcode"), "SSO_INVALID_ID_TOKEN", body);
    return true;
  });
  const after = await oidcLogin();
  assert.equal(after.status, 303, `k2 is accepted: ${await after.text()}`);
});

test("Lazy: refresh keeps the old value on failure; refreshIfOlder is rate-limited; expiry is 503", async () => {
  let n = 0;
  let fail = false;
  const lazy = new Lazy("test", () => {
    if (fail) return Promise.reject(new Error("down"));
    return Promise.resolve({ n: ++n, until: Date.now() + 60_000 });
  }, { expiresAt: (v) => v.until });
  assert.equal((await lazy.get()).n, 1);
  assert.equal(await lazy.refreshIfOlder(60_000), false, "loaded less than a minute ago");
  assert.equal(n, 1);
  assert.equal(await lazy.refreshIfOlder(0), true);
  assert.equal((await lazy.get()).n, 2);
  fail = true;
  assert.equal(await lazy.refresh(), false);
  assert.equal((await lazy.get()).n, 2, "a failed refresh keeps the previous value");
  (await lazy.get()).until = Date.now() - 1;
  await assert.rejects(lazy.get(), /not ready/, "expired and not refreshable: 503");
  fail = false;
  await lazy.refresh();
  assert.equal((await lazy.get()).n, 3);
  lazy.stop();
});

test("metadata timing: refresh period, cacheDuration, validUntil", () => {
  const now = Date.parse("2030-01-01T00:00:00Z");
  const md = (attrs: string) =>
    `<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x" ${attrs}/>`;
  assert.deepEqual(metadataTiming(md(""), 3600, now), {
    refreshIn: 3600_000,
    expiresAt: undefined,
  });
  assert.equal(metadataTiming(md(`cacheDuration="PT10M"`), 3600, now).refreshIn, 600_000);
  assert.deepEqual(metadataTiming(md(`validUntil="2030-01-01T00:05:00Z"`), 3600, now), {
    refreshIn: 300_000,
    expiresAt: now + 300_000,
  });
  assert.throws(
    () => metadataTiming(md(`validUntil="2029-12-31T23:00:00Z"`), 3600, now),
    /expired/,
  );
  assert.throws(
    () => metadataTiming(md(`validUntil="2030-01-02T00:00:00"`), 3600, now),
    /validUntil/,
  );
  assert.equal(durationMs("P1DT2H3M4.5S"), 86400_000 + 7200_000 + 180_000 + 4500);
  assert.equal(durationMs("bogus"), undefined);
});

test("cleanup", async () => {
  await srv.stop();
  await Promise.all([idp.stop(), cachedIdp.stop(), expiredIdp.stop(), oidc.stop()]);
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
