/**
 * SAML with `http.workers` = 2 against the real process: on first boot the SP key pair is created
 * once, before the workers start, so both workers serve logins at once (no worker loses a race for
 * the key files and answers 503); SIGUSR1 makes every worker fetch the IdP metadata again, so a
 * rotated key is followed by all of them.
 */
import assert from "node:assert/strict";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { spawnSvc, type SvcProcess, workersInLog } from "../helpers/process.ts";
import type { SpKeyPair } from "../../src/sso/certs.ts";
import { freePort } from "./oidc_idp.ts";
import { startSamlIdp } from "./saml_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
const uri = await emptyDb("ssoworkers", fixture);
const tmp = await Deno.makeTempDir();
const idp = await startSamlIdp();
const port = freePort();
const base = `http://127.0.0.1:${port}`;
let svc: SvcProcess;

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, fn, sanitizeOps: false, sanitizeResources: false });

/** A request on a fresh connection (the kernel spreads new connections over the workers). */
async function fresh(url: string, init: RequestInit = {}): Promise<Response> {
  const client = Deno.createHttpClient({});
  try {
    const res = await fetch(url, { ...init, client, redirect: "manual" });
    const body = await res.arrayBuffer();
    return new Response(res.status === 303 ? null : body, {
      status: res.status,
      headers: res.headers,
    });
  } finally {
    client.close();
  }
}

/** A login answered by a response signed with `keys`, each step on a fresh connection. */
async function login(keys: SpKeyPair): Promise<number> {
  const res = await fresh(`${base}/auth/saml/corp/login`);
  assert.equal(res.status, 303, await res.text());
  const cookie = res.headers.getSetCookie().find((c) => c.startsWith("svc_sso="))!.split(";")[0];
  await (await fetch(res.headers.get("location")!)).text();
  const acs = `${base}/auth/saml/corp/acs`;
  const xml = idp.sign(
    idp.build({
      destination: acs,
      recipient: acs,
      audience: `${base}/auth/saml/corp/metadata`,
      inResponseTo: idp.lastRequest!.id,
    }),
    "Assertion",
    keys,
  );
  const done = await fresh(acs, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie },
    body: new URLSearchParams({ SAMLResponse: btoa(xml) }),
  });
  return done.status;
}

test("first boot with 2 workers: the SP key is created once, both workers serve at once", async () => {
  svc = await spawnSvc([
    `--pg.uri=${uri}`,
    `--http.port=${port}`,
    `--http.public_host=127.0.0.1:${port}`,
    "--http.workers=2",
    "--pg.pool_size=4",
    "--pg.query.wellknown_path=/nonexistent",
    "--http.functions.sso_callback=public.sso_login",
    `--saml.certificate_path=${tmp}/new/saml.crt`,
    `--saml.private_key_path=${tmp}/new/saml.key`,
    `--saml.corp.idp_metadata_url=${idp.base}/metadata`,
  ]);
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const res = await fresh(`${base}/auth/saml/corp/login`);
      if (res.status === 303) break;
    } catch { /* not listening yet */ }
    assert.ok(Date.now() < deadline, `no worker served a login:\n${svc.output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  // From the first login served, every login on every worker is served within 1 s.
  const until = Date.now() + 1000;
  const statuses: number[] = [];
  while (Date.now() < until || workersInLog(svc, "/auth/saml/corp/login").size < 2) {
    const res = await fresh(`${base}/auth/saml/corp/login`);
    await res.body?.cancel();
    statuses.push(res.status);
    assert.ok(Date.now() < deadline, "both workers did not serve");
  }
  assert.deepEqual([...new Set(statuses)], [303], `every login served: ${statuses.join(",")}`);
  assert.deepEqual([...workersInLog(svc, "/auth/saml/corp/login")].sort(), [0, 1]);
  assert.doesNotMatch(svc.output(), /not ready|already exists/i);
});

test("SIGUSR1: every worker fetches the IdP metadata again (key rotation followed)", async () => {
  const old = idp.keys;
  assert.equal(await login(old), 303);
  const next = await idp.rotate();
  svc.kill("SIGUSR1");
  // Both workers must have dropped the old key: several fresh connections in a row refuse it.
  const deadline = Date.now() + 30_000;
  let refusedInARow = 0;
  while (refusedInARow < 6) {
    refusedInARow = await login(old) === 400 ? refusedInARow + 1 : 0;
    assert.ok(Date.now() < deadline, `the old key is still trusted:\n${svc.output().slice(-2000)}`);
  }
  for (let i = 0; i < 4; i++) assert.equal(await login(next), 303, "the new key is accepted");
});

test("cleanup", async () => {
  assert.equal((await svc.stop()).code, 0);
  await idp.stop();
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
