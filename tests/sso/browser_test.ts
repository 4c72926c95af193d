/**
 * A real headless Chromium logs in through svc once with OpenID Connect (oidc-provider's login and
 * consent forms) and once with SAML (the IdP's auto-submitting POST form), and ends on a svc page
 * with the session cookie set in the browser.
 */
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { browserTest, CHROMIUM, launchChromium } from "../helpers/browser.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { freePort, startOidcIdp } from "./oidc_idp.ts";
import { redirectSignatureValid, startSamlIdp } from "./saml_idp.ts";

async function setup() {
  const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
  const uri = await emptyDb("sso", fixture);
  const svcPort = freePort();
  const origin = `http://127.0.0.1:${svcPort}`;
  const oidc = await startOidcIdp([`${origin}/auth/oidc/main/callback`]);
  const saml = await startSamlIdp();
  const tmp = await Deno.makeTempDir();
  const srv = await startServer(uri, [
    `--http.port=${svcPort}`,
    `--http.public_host=127.0.0.1:${svcPort}`,
    "--http.functions.sso_callback=public.sso_login",
    `--openid.main.issuer=${oidc.issuer}`,
    `--openid.main.client_id=${oidc.clientId}`,
    `--openid.main.client_secret=${oidc.clientSecret}`,
    `--saml.corp.idp_metadata_url=${saml.base}/metadata`,
    `--saml.certificate_path=${tmp}/saml.crt`,
    `--saml.private_key_path=${tmp}/saml.key`,
  ]);
  const browser = await launchChromium();
  return { origin, oidc, saml, tmp, srv, browser };
}
// Nothing is started without a browser: the tests below are then ignored (or fail in CI).
const { origin, oidc, saml, tmp, srv, browser } = CHROMIUM.path
  ? await setup()
  : {} as Awaited<ReturnType<typeof setup>>;

const test = (name: string, fn: () => Promise<void>) => browserTest({ name, fn });

async function sessionCookie(context: Awaited<ReturnType<typeof browser.newContext>>) {
  const cookies = await context.cookies(origin);
  return cookies.find((c) => c.name === "accesstoken");
}

test("browser: OIDC login through the provider's forms ends on svc with the session cookie", async () => {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${origin}/auth/oidc/main/login?next=/svc/health`);
    await page.fill('input[name="login"]', "alice@example.com");
    await page.fill('input[name="password"]', "secret");
    await page.click('button[type="submit"]');
    await page.waitForSelector('input[name="prompt"][value="consent"]', { state: "attached" });
    await page.click('button[type="submit"]');
    await page.waitForURL(`${origin}/svc/health`);
    assert.match(await page.content(), /"status":"ok"/);
    const cookie = await sessionCookie(context);
    assert.ok(cookie, "the browser holds the session cookie");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Lax");
    assert.equal(decodeJwt(cookie.value).role, "member");
  } finally {
    await context.close();
  }
});

test("browser: SAML login through the IdP's POST form ends on svc with the session cookie", async () => {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${origin}/auth/saml/corp/login?next=/svc/health`);
    await page.waitForURL(`${origin}/svc/health`);
    assert.match(await page.content(), /"status":"ok"/);
    const cookie = await sessionCookie(context);
    assert.ok(cookie, "the browser holds the session cookie");
    assert.equal(decodeJwt(cookie.value).email, "alice@example.com");
    assert.equal(saml.lastRequest?.signed, true);
    const spCert = await Deno.readTextFile(`${tmp}/saml.crt`);
    assert.ok(redirectSignatureValid(saml.lastRequest!.query, spCert), "signed with the SP key");
  } finally {
    await context.close();
  }
});

test("cleanup", async () => {
  await browser.close();
  await srv.stop();
  await oidc.stop();
  await saml.stop();
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
