/**
 * SAML login end to end against a samlify IdP on loopback signing with its own generated key:
 * metadata down at startup (the SP metadata served all the same), a full login ending with the
 * session cookie, one against an IdP that does not ask for signed requests, SP metadata and
 * certificate reuse, and each attack refused with SSO_SAML_INVALID_RESPONSE and no session.
 */
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { sqlClient } from "../helpers/sql.ts";

/** A row of the fixture's sso_log (payload: what the login function received). */
interface SsoRow {
  ran_as: string;
  // deno-lint-ignore no-explicit-any
  payload: any;
}
import * as samlify from "samlify";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { generateSelfSigned } from "../../src/sso/certs.ts";
import { loadOrCreateSpKeys } from "../../src/sso/certs.ts";
import { freePort, Jar } from "./oidc_idp.ts";
import { redirectSignatureValid, type SamlIdp, startSamlIdp } from "./saml_idp.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/sso.sql", import.meta.url));
const uri = await emptyDb("sso", fixture);
const svcPort = freePort();
const idpPort = freePort();
const origin = `http://127.0.0.1:${svcPort}`;
const acs = `${origin}/auth/saml/corp/acs`;
const spEntityId = `${origin}/auth/saml/corp/metadata`;
const tmp = await Deno.makeTempDir();
// An IdP whose metadata says WantAuthnRequestsSigned="false" (entry `lax`, defaults otherwise).
const laxIdp = await startSamlIdp(freePort(), { wantAuthnRequestsSigned: false });
// An entry whose own key is unusable (SSO_INTERNAL at login) and one with its own generated pair.
await Deno.writeTextFile(`${tmp}/broken.crt`, (await generateSelfSigned("broken")).certificate);
await Deno.writeTextFile(
  `${tmp}/broken.key`,
  "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
);
const srv = await startServer(uri, [
  `--http.port=${svcPort}`,
  `--http.public_host=127.0.0.1:${svcPort}`,
  "--http.functions.sso_callback=public.sso_login",
  `--saml.corp.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  `--saml.certificate_path=${tmp}/saml.crt:${tmp}/elsewhere.crt`,
  `--saml.private_key_path=${tmp}/saml.key`,
  `--saml.broken.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  `--saml.broken.certificate_path=${tmp}/broken.crt`,
  `--saml.broken.private_key_path=${tmp}/broken.key`,
  `--saml.own.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  `--saml.own.certificate_path=${tmp}/own.crt`,
  `--saml.own.private_key_path=${tmp}/own.key`,
  "--saml.own.force_signed_requests=false",
  `--saml.lax.idp_metadata_url=${laxIdp.base}/metadata`,
  // IdP-initiated logins allowed; SHA-1 allowed; a small response size cap.
  `--saml.idpinit.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  "--saml.idpinit.allow_unsolicited=true",
  `--saml.sha1.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  "--saml.sha1.allow_sha1=true",
  `--saml.small.idp_metadata_url=http://127.0.0.1:${idpPort}/metadata`,
  "--saml.small.max_response_size=8192",
]);
const sql = sqlClient(uri);
let idp: SamlIdp;

const test = (name: string, fn: () => Promise<void>) => Deno.test({ name, fn });

function sessionSet(res: Response): string | null {
  for (const c of res.headers.getSetCookie()) {
    const m = /^accesstoken=([^;]*)/.exec(c);
    if (m && m[1] !== "") return m[1];
  }
  return null;
}

async function refused(res: Response, status = 400, code = "SSO_SAML_INVALID_RESPONSE") {
  const body = await res.text();
  assert.equal(res.status, status, body);
  assert.equal(res.headers.get("x-svc-errorcode"), code, body);
  assert.equal(sessionSet(res), null, "no session may be set");
}

/** Starts a login: the jar holds the state cookie; returns the AuthnRequest's ID. */
async function startLogin(
  jar: Jar,
  query = "",
  entry = "corp",
): Promise<{ rid: string; location: URL }> {
  const res = await jar.fetch(`${origin}/auth/saml/${entry}/login${query}`);
  assert.equal(res.status, 303, await res.text());
  assert.match(
    res.headers.getSetCookie().join("\n"),
    /svc_sso=.*Path=\/auth\/; HttpOnly; Secure; SameSite=None/,
  );
  const location = new URL(res.headers.get("location")!);
  const sso = await fetch(location);
  const html = await sso.text();
  return { rid: idp.lastRequest!.id, location, ...{ html } };
}

const acsOf = (entry: string) => `${origin}/auth/saml/${entry}/acs`;

function post(jar: Jar, xml: string, relayState?: string, to = acs): Promise<Response> {
  const form = new URLSearchParams({ SAMLResponse: btoa(xml) });
  if (relayState !== undefined) form.set("RelayState", relayState);
  return jar.fetch(to, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: form,
  });
}

/** A response as the IdP would sign it for request `rid` (fields overridable). */
function good(
  rid: string,
  extra: Partial<Parameters<SamlIdp["build"]>[0]> = {},
  entry = "corp",
) {
  return idp.build({
    destination: acsOf(entry),
    recipient: acsOf(entry),
    audience: `${origin}/auth/saml/${entry}/metadata`,
    inResponseTo: rid,
    ...extra,
  });
}

test("IdP metadata down at startup: SP metadata served, login 503 SSO_NOT_READY, then a working login", async () => {
  // Nothing listens on the IdP's port yet: the SP metadata depends on svc's configuration alone.
  const meta = await fetch(`${origin}/auth/saml/corp/metadata`);
  assert.equal(meta.status, 200);
  assert.match(meta.headers.get("content-type")!, /^application\/samlmetadata\+xml/);
  const xml = await meta.text();
  const parsed = samlify.ServiceProvider({ metadata: xml }).entityMeta;
  assert.equal(parsed.getEntityID(), spEntityId);
  assert.equal(parsed.getAssertionConsumerService("post"), acs);
  const pem = await Deno.readTextFile(`${tmp}/saml.crt`);
  assert.equal(
    String(parsed.getX509Certificate("signing")).replace(/\s/g, ""),
    pem.replace(/-----[^-]+-----|\s/g, ""),
    "the metadata carries the SP certificate",
  );
  const down = await fetch(`${origin}/auth/saml/corp/login`);
  await refused(down, 503, "SSO_NOT_READY");
  idp = await startSamlIdp(idpPort);
  const deadline = Date.now() + 15_000;
  let status = 0;
  while (Date.now() < deadline) {
    const res = await fetch(`${origin}/auth/saml/corp/login`, { redirect: "manual" });
    await res.body?.cancel();
    status = res.status;
    if (status === 303) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(status, 303);
});

test("an IdP that does not ask for signed requests: the default login works, signed anyway", async () => {
  await sql`truncate sso_log`;
  const jar = new Jar();
  const res = await jar.fetch(`${origin}/auth/saml/lax/login?next=/lax`);
  assert.equal(res.status, 303, await res.text());
  const location = new URL(res.headers.get("location")!);
  assert.equal(location.origin + location.pathname, `${laxIdp.base}/sso`);
  assert.ok(location.searchParams.has("Signature"), "force_signed_requests (default) signs");
  const page = await (await fetch(location)).text();
  assert.ok(laxIdp.lastRequest!.signed);
  assert.equal(laxIdp.lastRequest!.acs, `${origin}/auth/saml/lax/acs`);
  const action = /action="([^"]+)"/.exec(page)![1];
  const samlResponse = /name="SAMLResponse" value="([^"]+)"/.exec(page)![1];
  const relay = /name="RelayState" value="([^"]+)"/.exec(page)![1].replaceAll("&amp;", "&");
  const done = await jar.fetch(action, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ SAMLResponse: samlResponse, RelayState: relay }),
  });
  assert.equal(done.status, 303, await done.text());
  assert.equal(done.headers.get("location"), "/lax");
  assert.equal(decodeJwt(sessionSet(done)!).role, "member");
  const [row] = await sql<SsoRow>`select payload from sso_log`;
  assert.equal(row.payload.identity.name, "lax");
});

test("full login through the IdP's form: session cookie, documented payload, signed AuthnRequest", async () => {
  await sql`truncate sso_log`;
  const jar = new Jar();
  const res = await jar.fetch(`${origin}/auth/saml/corp/login?next=/after&x.y=2`);
  assert.equal(res.status, 303);
  const location = new URL(res.headers.get("location")!);
  assert.equal(location.origin + location.pathname, `${idp.base}/sso`);
  const page = await (await fetch(location)).text();
  assert.ok(idp.lastRequest!.signed, "the AuthnRequest is signed (force_signed_requests)");
  // The redirect-binding signature verifies with the SP certificate over the exact octets; it
  // does not with another certificate, nor once a signed parameter changes. Shown to fail when
  // svc signs with another key (the "own" entry's pair in place of the shared one).
  const spCert = await Deno.readTextFile(`${tmp}/saml.crt`);
  const query = idp.lastRequest!.query;
  assert.ok(redirectSignatureValid(query, spCert), "the AuthnRequest signature verifies");
  assert.ok(!redirectSignatureValid(query, (await generateSelfSigned("other")).certificate));
  assert.match(query, /&RelayState=next%3D%252Fafter/);
  assert.ok(!redirectSignatureValid(query.replace("%252Fafter", "%252Felse"), spCert));
  assert.equal(idp.lastRequest!.acs, acs);
  const action = /action="([^"]+)"/.exec(page)![1];
  const samlResponse = /name="SAMLResponse" value="([^"]+)"/.exec(page)![1];
  const relay = /name="RelayState" value="([^"]+)"/.exec(page)![1].replaceAll("&amp;", "&");
  assert.equal(action, acs);
  const done = await jar.fetch(action, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ SAMLResponse: samlResponse, RelayState: relay }),
  });
  assert.equal(done.status, 303, await done.text());
  assert.equal(done.headers.get("location"), "/after");
  const token = sessionSet(done);
  assert.ok(token);
  assert.equal(decodeJwt(token).role, "member");
  const [row] = await sql<SsoRow>`select ran_as, payload from sso_log`;
  assert.equal(row.ran_as, "postgres/~anonymous");
  assert.deepEqual(row.payload.state, { next: "/after", x: { y: "2" } });
  assert.deepEqual(row.payload.identity, {
    protocol: "saml",
    name: "corp",
    claims: { email: ["alice@example.com"] },
    name_id: "alice@example.com",
  });
  assert.equal(row.payload.jwt, null);
});

test("SP metadata: entity ID, ACS URL and the generated certificate, reused on later boots", async () => {
  const res = await fetch(`${origin}/auth/saml/corp/metadata`);
  assert.equal(res.status, 200);
  const xml = await res.text();
  assert.ok(xml.includes(`entityID="${spEntityId}"`), xml);
  assert.ok(xml.includes(`Location="${acs}"`));
  const pem = await Deno.readTextFile(`${tmp}/saml.crt`);
  const b64 = pem.replace(/-----[^-]+-----|\s/g, "");
  assert.ok(xml.replace(/\s/g, "").includes(b64), "the metadata carries the generated cert");
  assert.equal((await Deno.stat(`${tmp}/saml.key`)).mode! & 0o777, 0o600);
  const again = await loadOrCreateSpKeys(`${tmp}/elsewhere.crt:${tmp}/saml.crt`, `${tmp}/saml.key`);
  assert.equal(again.certificate, pem, "reused, not regenerated");
});

test("an entry's own certificate is generated apart; an unusable key is 500 SSO_INTERNAL", async () => {
  const res = await fetch(`${origin}/auth/saml/own/metadata`);
  assert.equal(res.status, 200);
  const xml = (await res.text()).replace(/\s/g, "");
  const own = (await Deno.readTextFile(`${tmp}/own.crt`)).replace(/-----[^-]+-----|\s/g, "");
  const shared = (await Deno.readTextFile(`${tmp}/saml.crt`)).replace(/-----[^-]+-----|\s/g, "");
  assert.ok(xml.includes(own) && !xml.includes(shared));
  // force_signed_requests=false, but the IdP metadata wants signed requests: signed anyway.
  const login = await fetch(`${origin}/auth/saml/own/login`, { redirect: "manual" });
  assert.equal(login.status, 303);
  const query = new URL(login.headers.get("location")!).search.slice(1);
  assert.ok(redirectSignatureValid(query, await Deno.readTextFile(`${tmp}/own.crt`)));
  assert.ok(!redirectSignatureValid(query, await Deno.readTextFile(`${tmp}/saml.crt`)));
  const broken = await fetch(`${origin}/auth/saml/broken/login`, { redirect: "manual" });
  await refused(broken, 500, "SSO_INTERNAL");
});

test("unsolicited responses are refused by default: no, garbage or used state cookie", async () => {
  await sql`truncate sso_log`;
  // Someone else's solicited response (its InResponseTo), and an IdP-initiated one.
  const victim = new Jar();
  const { rid } = await startLogin(victim);
  const solicited = idp.sign(good(rid), "Assertion");
  const idpInitiated = idp.sign(good("", { inResponseTo: undefined }), "Assertion");
  for (const xml of [solicited, idpInitiated]) {
    await refused(await post(new Jar(), xml, "next=/x"), 400, "SSO_BAD_STATE");
    const garbage = new Jar();
    garbage.cookies.set("svc_sso", "garbage");
    await refused(await post(garbage, xml), 400, "SSO_BAD_STATE");
  }
  // A state cookie already used by its own login cannot carry another response.
  const jar = new Jar();
  const login = await startLogin(jar);
  const cookie = jar.cookies.get("svc_sso")!;
  const ok = await post(jar, idp.sign(good(login.rid), "Assertion"));
  assert.equal(ok.status, 303, await ok.text());
  const reused = new Jar();
  reused.cookies.set("svc_sso", cookie);
  await refused(
    await post(reused, idp.sign(good(login.rid), "Assertion")),
    400,
    "SSO_BAD_STATE",
  );
  assert.equal((await sql`select count(*)::int as n from sso_log`)[0].n, 1, "one login ran");
});

test("allow_unsolicited: an IdP-initiated response is accepted once, then a replay is refused", async () => {
  const xml = idp.sign(good("", { inResponseTo: undefined }, "idpinit"), "Assertion");
  const first = await post(new Jar(), xml, "next=/x", acsOf("idpinit"));
  assert.equal(first.status, 303, await first.text());
  assert.equal(first.headers.get("location"), "/x");
  assert.ok(sessionSet(first));
  await refused(await post(new Jar(), xml, undefined, acsOf("idpinit")));
  // A solicited response without its login's state is still refused (login CSRF).
  const victim = new Jar();
  const { rid } = await startLogin(victim, "", "idpinit");
  await refused(
    await post(new Jar(), idp.sign(good(rid, {}, "idpinit"), "Assertion"), "", acsOf("idpinit")),
  );
  // With its state, it is accepted.
  const res = await post(
    victim,
    idp.sign(good(rid, {}, "idpinit"), "Assertion"),
    "",
    acsOf("idpinit"),
  );
  assert.equal(res.status, 303, await res.text());
});

test("a SHA-1 signed response is refused unless allow_sha1", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  await refused(await post(jar, idp.sign(good(rid), "Assertion", idp.keys, { sha1: true })));
  const jar2 = new Jar();
  const { rid: rid2 } = await startLogin(jar2, "", "sha1");
  const res = await post(
    jar2,
    idp.sign(good(rid2, {}, "sha1"), "Assertion", idp.keys, { sha1: true }),
    "",
    acsOf("sha1"),
  );
  assert.equal(res.status, 303, await res.text());
});

test("a SAMLResponse over max_response_size is 413 before parsing", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar, "", "small");
  const big = idp.sign(
    good(rid, { attributes: { email: ["alice@example.com"], pad: ["x".repeat(9000)] } }, "small"),
    "Assertion",
  );
  await refused(await post(jar, big, "", acsOf("small")), 413, "HTTP_BODY_TOO_LARGE");
  // A body beyond the form cap is cut off without reading it all.
  const huge = await fetch(acsOf("small"), {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "SAMLResponse=" + "A".repeat(200_000),
  });
  await refused(huge, 413, "HTTP_BODY_TOO_LARGE");
  // The default cap (256 KiB): a 358 KiB response signed by an unknown key is refused unparsed.
  const evil = await generateSelfSigned("evil");
  const pad: Record<string, string[]> = {};
  for (let i = 0; i < 2500; i++) pad[`a${i}`] = ["x".repeat(56)];
  const jar3 = new Jar();
  const { rid: rid3 } = await startLogin(jar3);
  const large = idp.sign(good(rid3, { attributes: pad }), "Assertion", evil);
  assert.ok(large.length > 350 * 1024 && large.length < 400 * 1024, String(large.length));
  await refused(await post(jar3, large), 413, "HTTP_BODY_TOO_LARGE");
  const jar2 = new Jar();
  const { rid: rid2 } = await startLogin(jar2, "", "small");
  const fits = await post(jar2, idp.sign(good(rid2, {}, "small"), "Assertion"), "", acsOf("small"));
  assert.equal(fits.status, 303, await fits.text());
});

test("a signed Response (not the assertion) is accepted", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const res = await post(jar, idp.sign(good(rid), "Response"));
  assert.equal(res.status, 303, await res.text());
  assert.ok(sessionSet(res));
});

test("attack: unsigned assertion", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  await refused(await post(jar, good(rid)));
});

test("attack: assertion signed by another key", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const evil = await generateSelfSigned("evil");
  await refused(await post(jar, idp.sign(good(rid), "Assertion", evil)));
  await refused(
    await post(
      new Jar(),
      idp.sign(good("", { inResponseTo: undefined }, "idpinit"), "Response", evil),
      undefined,
      acsOf("idpinit"),
    ),
  );
});

test("attack: signature wrapping (signed assertion moved, evil assertion added)", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const signed = idp.sign(good(rid), "Assertion");
  const original = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(signed)![0];
  const evil = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(
    good(rid, { nameId: "admin@example.com", attributes: { email: ["bob@example.com"] } }),
  )![0];
  // The signed assertion hidden in Extensions, the evil one in its place.
  const moved = signed.replace(
    original,
    `<samlp:Extensions>${original}</samlp:Extensions>${evil}`,
  );
  await refused(await post(jar, moved));
  // Control (solicited logins: the refused post spent this login's state, so a response built the
  // same way for a login of its own): a signed assertion for its own request is accepted, and the
  // refusal above (SSO_SAML_INVALID_RESPONSE with a valid state) came from the wrapping.
  const jarOk = new Jar();
  const { rid: ridOk } = await startLogin(jarOk);
  const unwrapped = await post(jarOk, idp.sign(good(ridOk), "Assertion"));
  assert.equal(unwrapped.status, 303, "the signed response itself is acceptable");
  await unwrapped.body?.cancel();
  // The evil assertion carrying the signed one's ID (so a lookup by ID finds the signed one),
  // built for this login's own request (so nothing but the wrapping can refuse it). Shown not
  // vacuous: a response signed the same way for a login of its own is accepted right after (the
  // refused post spent this login's state).
  const jar2 = new Jar();
  const { rid: rid2 } = await startLogin(jar2);
  const signed2 = idp.sign(good(rid2), "Assertion");
  const original2 = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(signed2)![0];
  const evil2 = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(
    good(rid2, { nameId: "admin@example.com", attributes: { email: ["bob@example.com"] } }),
  )![0];
  const id = /<saml:Assertion ID="([^"]+)"/.exec(original2)![1];
  const sameId = signed2.replace(
    original2,
    `${evil2.replace(/<saml:Assertion ID="[^"]+"/, `<saml:Assertion ID="${id}"`)}` +
      `<samlp:Extensions>${original2}</samlp:Extensions>`,
  );
  await refused(await post(jar2, sameId));
  const jar3 = new Jar();
  const { rid: rid3 } = await startLogin(jar3);
  const control = await post(jar3, idp.sign(good(rid3), "Assertion"));
  assert.equal(control.status, 303, await control.text());
  assert.equal(decodeJwt(sessionSet(control)!).email, "alice@example.com");
});

test("attack: evil assertion wrapped in Extensions or in the signature's Object", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const evil = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(
    good(rid, { attributes: { email: ["bob@example.com"] } }),
  )![0];
  const signedResponse = idp.sign(good(rid), "Response");
  const inExtensions = signedResponse.replace(
    /(<samlp:Status>)/,
    `<samlp:Extensions>${evil}</samlp:Extensions>$1`,
  );
  await refused(await post(jar, inExtensions));
  const jar2 = new Jar();
  const { rid: rid2 } = await startLogin(jar2);
  const signedAssertion = idp.sign(good(rid2), "Assertion");
  const inObject = signedAssertion.replace(
    "</ds:Signature>",
    `<ds:Object>${evil}</ds:Object></ds:Signature>`,
  );
  await refused(await post(jar2, inObject));
});

for (
  const [what, extra] of [
    ["wrong Audience", { audience: "https://other.example/sp" }],
    ["wrong Destination", { destination: "https://other.example/acs" }],
    ["wrong Recipient", { recipient: "https://other.example/acs" }],
    ["expired", { notBefore: -900, notOnOrAfter: -300 }],
    ["not yet valid", { notBefore: 300, notOnOrAfter: 900 }],
    ["another issuer", { issuer: "https://evil.example/idp" }],
  ] as const
) {
  test(`attack: ${what}`, async () => {
    const jar = new Jar();
    const { rid } = await startLogin(jar);
    await refused(await post(jar, idp.sign(good(rid, extra), "Assertion")));
  });
}

test("attack: InResponseTo mismatch", async () => {
  const jar = new Jar();
  await startLogin(jar);
  await refused(await post(jar, idp.sign(good("_some-other-request"), "Assertion")));
});

test("attack: replayed response (same browser, same state)", async () => {
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const xml = idp.sign(good(rid), "Assertion");
  const cookie = jar.cookies.get("svc_sso")!;
  const ok = await post(jar, xml);
  assert.equal(ok.status, 303, await ok.text());
  jar.cookies.set("svc_sso", cookie);
  jar.cookies.delete("accesstoken");
  // Its state was consumed by the first post (the assertion ID too: see allow_unsolicited).
  await refused(await post(jar, xml), 400, "SSO_BAD_STATE");
});

test("attack: XML comment inside NameID never yields a truncated identity", async () => {
  await sql`truncate sso_log`;
  const jar = new Jar();
  const { rid } = await startLogin(jar);
  const signed = idp.sign(
    good(rid, {
      nameId: "user@evil.com.example.com",
      attributes: { email: ["user@evil.com.example.com"] },
    }),
    "Assertion",
  );
  const commented = signed.replaceAll(
    "user@evil.com.example.com",
    "user@evil.com<!---->.example.com",
  );
  assert.notEqual(commented, signed);
  // Still validly signed (comments are not signed), so it reaches the callback, whole.
  const res = await post(jar, commented);
  assert.equal(res.status, 303, await res.text());
  assert.equal(decodeJwt(sessionSet(res)!).email, "user@evil.com.example.com");
  const [row] = await sql<SsoRow>`select payload from sso_log`;
  assert.equal(row.payload.identity.name_id, "user@evil.com.example.com");
  assert.deepEqual(row.payload.identity.claims.email, ["user@evil.com.example.com"]);
});

test("attack: DOCTYPE / entities (XXE, billion laughs) rejected fast", async () => {
  const laughs = `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">` +
    Array.from({ length: 9 }, (_, i) => `<!ENTITY lol${i + 1} "${`&lol${i || ""};`.repeat(10)}">`)
      .join("") +
    `]>`;
  const xxe = `<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>`;
  for (const prolog of [laughs, xxe]) {
    const jar = new Jar();
    const { rid } = await startLogin(jar);
    const signed = idp.sign(good(rid, { nameId: "&lol9;" }), "Assertion");
    const t0 = performance.now();
    await refused(await post(jar, prolog + signed.replace("&amp;lol9;", "&lol9;")));
    assert.ok(performance.now() - t0 < 5000, "refused fast (nothing expanded)");
  }
});

test("malformed ACS posts: no SAMLResponse, not base64 → 400 SSO_BAD_REQUEST", async () => {
  for (const body of ["RelayState=x", "SAMLResponse=%%%not-base64"]) {
    const res = await fetch(acs, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body,
    });
    await refused(res, 400, "SSO_BAD_REQUEST");
  }
  const get = await fetch(acs);
  assert.equal(get.status, 405);
  await get.body?.cancel();
});

test("cleanup", async () => {
  await srv.stop();
  await sql.end();
  await idp?.stop();
  await laxIdp.stop();
  await stopDb();
  await Deno.remove(tmp, { recursive: true });
});
