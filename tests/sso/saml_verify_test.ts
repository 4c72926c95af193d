/**
 * svc's own SAML checks (src/sso/saml_verify.ts) on their own, without samlify in front: every
 * attack is refused by svc itself, for the stated reason, and only the signed XML is ever read.
 */
import assert from "node:assert/strict";
import { generateSelfSigned } from "../../src/sso/certs.ts";
import { ReplayCache, SamlInvalid, verifyResponse } from "../../src/sso/saml_verify.ts";
import { startSamlIdp } from "./saml_idp.ts";

const idp = await startSamlIdp();
await idp.stop();
const acs = "https://sp.example/auth/saml/corp/acs";
const sp = "https://sp.example/auth/saml/corp/metadata";
const rid = "_req-1";
const expect = {
  idpEntityId: idp.entityId,
  idpCertificates: [idp.keys.certificate],
  spEntityId: sp,
  acsUrl: acs,
  requestId: rid,
};
const good = (extra: Partial<Parameters<typeof idp.build>[0]> = {}) =>
  idp.build({ destination: acs, recipient: acs, audience: sp, inResponseTo: rid, ...extra });
const assertionOf = (xml: string) => /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(xml)![0];

function refusedFor(xml: string, reason: RegExp, ex = expect) {
  assert.throws(() => verifyResponse(xml, ex), (e: unknown) => {
    assert.ok(e instanceof SamlInvalid, String(e));
    assert.match(e.message, reason);
    return true;
  });
}

Deno.test("a signed assertion or a signed response verifies; attributes are arrays", () => {
  for (const what of ["Assertion", "Response"] as const) {
    const v = verifyResponse(idp.sign(good(), what), expect);
    assert.equal(v.nameId, "alice@example.com");
    assert.deepEqual(v.attributes, { email: ["alice@example.com"] });
    assert.ok(v.expiresAt > Date.now());
  }
  // Without a request ID (no state cookie), InResponseTo is not compared.
  const v = verifyResponse(idp.sign(good(), "Assertion"), { ...expect, requestId: undefined });
  assert.equal(v.nameId, "alice@example.com");
});

Deno.test("unsigned, signed by another key, tampered after signing", async () => {
  refusedFor(good(), /not signed/);
  const evil = await generateSelfSigned("evil");
  refusedFor(idp.sign(good(), "Assertion", evil), /not signed/);
  refusedFor(idp.sign(good(), "Response", evil), /not signed/);
  const tampered = idp.sign(good(), "Assertion").replace(
    "<saml:AttributeValue>alice@example.com",
    "<saml:AttributeValue>bob@example.com",
  );
  refusedFor(tampered, /not signed/);
});

Deno.test("signature wrapping variants", () => {
  const signed = idp.sign(good(), "Assertion");
  const original = assertionOf(signed);
  const evil = assertionOf(good({ attributes: { email: ["bob@example.com"] } }));
  refusedFor(
    signed.replace(original, `<samlp:Extensions>${original}</samlp:Extensions>${evil}`),
    /exactly one Assertion, found 2/,
  );
  const id = /ID="([^"]+)"/.exec(original)![1];
  refusedFor(
    signed.replace(original, evil.replace(/ID="[^"]+"/, `ID="${id}"`) + original),
    /exactly one Assertion|duplicate ID/,
  );
  const signedResponse = idp.sign(good(), "Response");
  refusedFor(
    signedResponse.replace(
      "<samlp:Status>",
      `<samlp:Extensions>${evil}</samlp:Extensions><samlp:Status>`,
    ),
    /exactly one Assertion, found 2/,
  );
  refusedFor(
    signed.replace("</ds:Signature>", `<ds:Object>${evil}</ds:Object></ds:Signature>`),
    /exactly one Assertion, found 2/,
  );
  // The evil assertion alone, the signed one removed but its signature kept: not covered.
  const sig = /<ds:Signature[\s\S]*<\/ds:Signature>/.exec(signed)![0];
  const orphan = signed.replace(original, evil.replace("</saml:Issuer>", `</saml:Issuer>${sig}`));
  refusedFor(orphan, /not signed/);
});

Deno.test("Audience, Destination, Recipient, InResponseTo, issuer, time", () => {
  const cases: [Partial<Parameters<typeof idp.build>[0]>, RegExp][] = [
    [{ audience: "https://other/sp" }, /Audience/],
    [{ destination: "https://other/acs" }, /Destination/],
    [{ recipient: "https://other/acs" }, /SubjectConfirmation/],
    [{ inResponseTo: "_other" }, /InResponseTo/],
    [{ issuer: "https://evil/idp" }, /Issuer/],
    [{ notBefore: -900, notOnOrAfter: -300 }, /SubjectConfirmation|expired/],
    [{ notBefore: 300, notOnOrAfter: 900 }, /not yet valid/],
  ];
  for (const [extra, reason] of cases) refusedFor(idp.sign(good(extra), "Assertion"), reason);
  // Within the 60 s skew: accepted.
  verifyResponse(idp.sign(good({ notBefore: 30, notOnOrAfter: 600 }), "Assertion"), expect);
  verifyResponse(
    idp.sign(good({ notOnOrAfter: 100 }), "Assertion"),
    { ...expect, now: Date.now() + 130_000 },
  );
});

Deno.test("comments inside NameID and values never truncate; a DTD is refused", () => {
  const full = "user@evil.com.example.com";
  const signed = idp.sign(good({ nameId: full, attributes: { email: [full] } }), "Assertion");
  const v = verifyResponse(signed.replaceAll(full, "user@evil.com<!---->.example.com"), expect);
  assert.equal(v.nameId, full);
  assert.deepEqual(v.attributes.email, [full]);
  refusedFor(`<!DOCTYPE x [<!ENTITY a "b">]>` + signed, /DTD/);
});

Deno.test("the replay cache refuses a seen ID within its lifetime and stays bounded", () => {
  const cache = new ReplayCache(3);
  const now = Date.now();
  assert.equal(cache.remember("a", now + 1000, now), true);
  assert.equal(cache.remember("a", now + 1000, now), false);
  assert.equal(cache.remember("a", now + 1000, now + 2000), true, "expired entries are forgotten");
  for (const id of ["b", "c", "d", "e"]) cache.remember(id, now + 10_000, now);
  assert.equal(cache.remember("e", now + 10_000, now), false);
});
