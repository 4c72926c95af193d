/**
 * The shared replay store (`sso.store`) against real svc processes and a real cluster: the table
 * comes from `--print-setup-sql`, svc connects as the NOINHERIT authenticator it creates, and an
 * assertion (or login state) consumed once is refused after a restart and by a second process
 * sharing the database; concurrent replays to two processes let exactly one through; expired rows
 * are purged; without the table svc says its replay protection is per process, and a configured
 * but missing table refuses logins with 503 rather than forgetting.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, psql, stopDb, testCluster } from "../helpers/db.ts";
import { runSvc, spawnSvc, type SvcProcess } from "../helpers/process.ts";
import { freePort, Jar } from "./oidc_idp.ts";
import { type SamlIdp, startSamlIdp } from "./saml_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
const superUri = await emptyDb("ssostore", fixture);
const setup = await runSvc(["--print-setup-sql", "--sso.store=svc_sso.used"]);
assert.equal(setup.code, 0, setup.stderr);
assert.match(setup.stdout, /create table if not exists "svc_sso"\."used"/);
await psql(setup.stdout + `grant member to svc_authenticator;`, "ssostore");
const authUri = (await testCluster()).uriFor("ssostore").replace("postgres@", "svc_authenticator@");
const sql = sqlClient(superUri);
const tmp = await Deno.makeTempDir();
const idp: SamlIdp = await startSamlIdp();
// Every process serves the same public host, as replicas behind one load balancer do.
const publicHost = `127.0.0.1:${freePort()}`;
const acsPath = (entry: string) => `/auth/saml/${entry}/acs`;
const acsUrl = (entry: string) => `http://${publicHost}${acsPath(entry)}`;

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, fn, sanitizeOps: false, sanitizeResources: false });

/** A svc process on its own port with the shared public host; ready when its entries are. */
async function svc(extra: string[] = ["--sso.store=svc_sso.used"]): Promise<
  SvcProcess & {
    base: string;
  }
> {
  const port = freePort();
  const p = await spawnSvc([
    `--pg.uri=${authUri}`,
    `--http.port=${port}`,
    `--http.public_host=${publicHost}`,
    "--http.workers=1",
    "--pg.query.wellknown_path=/nonexistent",
    "--http.functions.sso_callback=public.sso_login",
    `--saml.certificate_path=${tmp}/saml.crt`,
    `--saml.private_key_path=${tmp}/saml.key`,
    `--saml.corp.idp_metadata_url=${idp.base}/metadata`,
    `--saml.idpinit.idp_metadata_url=${idp.base}/metadata`,
    "--saml.idpinit.allow_unsolicited=true",
    ...extra,
  ]);
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const res = await fetch(`${base}/auth/saml/corp/metadata`);
      await res.body?.cancel();
      if (res.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`svc not ready:\n${p.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { ...p, base };
}

/** A response for `entry` answering `rid` (none: IdP-initiated). */
function response(entry: string, rid?: string): string {
  return idp.sign(
    idp.build({
      destination: acsUrl(entry),
      recipient: acsUrl(entry),
      audience: `http://${publicHost}/auth/saml/${entry}/metadata`,
      inResponseTo: rid,
      notOnOrAfter: 3600,
    }),
    "Assertion",
  );
}

function post(base: string, entry: string, xml: string, jar = new Jar()): Promise<Response> {
  return jar.fetch(`${base}${acsPath(entry)}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ SAMLResponse: btoa(xml) }),
  });
}

async function expect(res: Response, status: number, code?: string): Promise<void> {
  const body = await res.text();
  assert.equal(res.status, status, body);
  if (code) assert.equal(res.headers.get("x-svc-errorcode"), code, body);
}

test("the setup SQL's table is svc's alone: the browser's roles cannot read it", async () => {
  await assert.rejects(
    sql.begin(async (tx) => {
      await tx`set local role "~anonymous"`;
      await tx`select count(*) from svc_sso.used`;
    }),
    /permission denied/,
  );
});

test("a consumed assertion and login state are refused after a restart", async () => {
  let a = await svc();
  try {
    // IdP-initiated (allow_unsolicited): only the assertion ID stops a replay.
    const unsolicited = response("idpinit");
    await expect(await post(a.base, "idpinit", unsolicited), 303);
    // Solicited: the login's state cookie is consumed too.
    const jar = new Jar();
    const login = await jar.fetch(`${a.base}/auth/saml/corp/login`);
    assert.equal(login.status, 303);
    const sso = await fetch(login.headers.get("location")!);
    await sso.text();
    const solicited = response("corp", idp.lastRequest!.id);
    const cookie = jar.cookies.get("svc_sso")!;
    await expect(await post(a.base, "corp", solicited, jar), 303);

    assert.equal((await a.stop()).code, 0);
    a = await svc();
    await expect(await post(a.base, "idpinit", unsolicited), 400, "SSO_SAML_INVALID_RESPONSE");
    const again = new Jar();
    again.cookies.set("svc_sso", cookie);
    await expect(await post(a.base, "corp", solicited, again), 400, "SSO_BAD_STATE");
    assert.match(a.output(), /already used \(replay\)/);
    const rows = await sql`select ns, count(*)::int as n from svc_sso.used group by ns order by ns`;
    assert.deepEqual(rows.map((r) => [r.ns, r.n]), [
      ["saml:corp", 1],
      ["saml:idpinit", 1],
      ["sso-state", 1],
    ]);
  } finally {
    await a.stop();
  }
});

test("two processes sharing the database: a replay on the other is refused, a race lets one through", async () => {
  const [b1, b2] = await Promise.all([svc(), svc()]);
  try {
    const xml = response("idpinit");
    await expect(await post(b1.base, "idpinit", xml), 303);
    await expect(await post(b2.base, "idpinit", xml), 400, "SSO_SAML_INVALID_RESPONSE");
    for (let i = 0; i < 3; i++) {
      const racing = response("idpinit");
      const answers = await Promise.all(
        [b1, b2, b1, b2].map((b) => post(b.base, "idpinit", racing)),
      );
      for (const r of answers) await r.body?.cancel();
      assert.deepEqual(answers.map((r) => r.status).sort(), [303, 400, 400, 400]);
    }
  } finally {
    await Promise.all([b1.stop(), b2.stop()]);
  }
});

test("expired rows are purged in the background", async () => {
  await sql`insert into svc_sso.used values ('saml:x', 'old', now() - interval '1 hour'),
    ('saml:x', 'fresh', now() + interval '1 hour')`;
  const c = await svc();
  try {
    const deadline = Date.now() + 20_000;
    while ((await sql`select 1 from svc_sso.used where key = 'old'`).length) {
      assert.ok(Date.now() < deadline, "the expired row was not purged");
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal((await sql`select 1 from svc_sso.used where key = 'fresh'`).length, 1);
  } finally {
    await c.stop();
  }
});

test("without sso.store replay protection is per process (logged); a missing table is 503", async () => {
  const local = await svc([]);
  try {
    assert.match(local.output(), /replay protection is per process/);
  } finally {
    await local.stop();
  }
  const missing = await svc(["--sso.store=svc_sso.missing"]);
  try {
    await expect(await post(missing.base, "idpinit", response("idpinit")), 503, "SSO_NOT_READY");
    assert.match(missing.output(), /svc_sso\.missing/);
  } finally {
    await missing.stop();
  }
});

test("cleanup", async () => {
  await sql.end();
  await idp.stop();
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
