/**
 * svc's own SAML checks (src/sso/saml_verify.ts) on their own, without samlify in front: every
 * attack is refused by svc itself, for the stated reason, and only the signed XML is ever read.
 */
import assert from "node:assert/strict";
import { generateSelfSigned } from "../../src/sso/certs.ts";
import {
  type SamlExpectations,
  SamlInvalid,
  SamlUnknownKey,
  verifyResponse,
} from "../../src/sso/saml_verify.ts";
import { startSamlIdp } from "./saml_idp.ts";

const idp = await startSamlIdp();
await idp.stop();
const acs = "https://sp.example/auth/saml/corp/acs";
const sp = "https://sp.example/auth/saml/corp/metadata";
const rid = "_req-1";
const expect: SamlExpectations = {
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

Deno.test("unsolicited (requestId null): only a response without InResponseTo", () => {
  const unsolicited = { ...expect, requestId: null };
  const v = verifyResponse(idp.sign(good({ inResponseTo: undefined }), "Assertion"), unsolicited);
  assert.equal(v.nameId, "alice@example.com");
  // Someone else's solicited response, replayed without its login's state: refused.
  refusedFor(idp.sign(good(), "Assertion"), /did not start/, unsolicited);
});

Deno.test("SHA-1 signatures are refused unless allowed", () => {
  const sha1 = idp.sign(good(), "Assertion", idp.keys, { sha1: true });
  refusedFor(sha1, /SHA-1/);
  refusedFor(idp.sign(good(), "Response", idp.keys, { sha1: true }), /SHA-1/);
  assert.equal(verifyResponse(sha1, { ...expect, allowSha1: true }).nameId, "alice@example.com");
});

Deno.test("timestamps without a time zone are refused", () => {
  const signed = idp.sign(
    good().replace(/(NotOnOrAfter|NotBefore)="([^"]+)Z"/g, '$1="$2"'),
    "Assertion",
  );
  assert.doesNotMatch(signed, /NotOnOrAfter="[^"]+Z"/);
  refusedFor(signed, /no time zone/);
  // An explicit offset is a zone.
  const offset = idp.sign(
    good().replace(/(NotOnOrAfter|NotBefore)="([^"]+)Z"/g, '$1="$2+00:00"'),
    "Assertion",
  );
  assert.equal(verifyResponse(offset, expect).nameId, "alice@example.com");
});

Deno.test("a signature by an unknown key is told apart from a missing one", async () => {
  const evil = await generateSelfSigned("evil");
  assert.throws(
    () => verifyResponse(idp.sign(good(), "Assertion", evil), expect),
    (e: unknown) => e instanceof SamlUnknownKey,
  );
  assert.throws(
    () => verifyResponse(good(), expect),
    (e: unknown) => e instanceof SamlInvalid && !(e instanceof SamlUnknownKey),
  );
});
