/**
 * A SAML identity provider for tests: samlify in the IdP role publishes its metadata (entity ID,
 * HTTP-Redirect SSO endpoint, its own generated signing certificate) on loopback; `/sso` reads the
 * AuthnRequest and answers the usual auto-submitting form to the ACS with a Response signed by
 * its key. `build`/`sign` make Responses by hand for the attack tests (xml-crypto, the signature
 * engine samlify itself uses).
 */
import * as samlify from "samlify";
import { SignedXml } from "xml-crypto";
import { generateSelfSigned, type SpKeyPair } from "../../src/sso/certs.ts";
import { freePort } from "./oidc_idp.ts";

const RSA_SHA256 = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
const EXC_C14N = "http://www.w3.org/2001/10/xml-exc-c14n#";

/** Fields of a hand-made Response. */
export interface ResponseFields {
  destination: string;
  recipient: string;
  audience: string;
  inResponseTo?: string;
  issuer?: string;
  nameId?: string;
  attributes?: Record<string, string[]>;
  /** Offsets from now, seconds. */
  notBefore?: number;
  notOnOrAfter?: number;
  responseId?: string;
  assertionId?: string;
}

/** A running test IdP. */
export interface SamlIdp {
  entityId: string;
  base: string;
  keys: SpKeyPair;
  /** Who `/sso` logs in (attributes of the next responses). */
  user: { nameId: string; attributes: Record<string, string[]> };
  /** The last AuthnRequest `/sso` received (ID, ACS URL, whether the query was signed). */
  lastRequest: { id: string; acs: string; signed: boolean } | null;
  build(f: ResponseFields): string;
  sign(xml: string, what: "Assertion" | "Response", keys?: SpKeyPair): string;
  stop(): Promise<void>;
}

const esc = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll(
    '"',
    "&quot;",
  );

const iso = (offset: number) => new Date(Date.now() + offset * 1000).toISOString();

async function inflate(b64: string): Promise<string> {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  return await new Response(stream).text();
}

/**
 * Starts the IdP (on `port`, default a free one). Its metadata sets `WantAuthnRequestsSigned` to
 * `opts.wantAuthnRequestsSigned` (default true).
 */
export async function startSamlIdp(
  port = freePort(),
  opts: { wantAuthnRequestsSigned?: boolean } = {},
): Promise<SamlIdp> {
  const base = `http://127.0.0.1:${port}`;
  const entityId = `${base}/idp`;
  const keys = await generateSelfSigned("test idp");
  const idpEntity = samlify.IdentityProvider({
    entityID: entityId,
    signingCert: keys.certificate,
    privateKey: keys.privateKey,
    wantAuthnRequestsSigned: opts.wantAuthnRequestsSigned ?? true,
    singleSignOnService: [{
      Binding: samlify.Constants.namespace.binding.redirect,
      Location: `${base}/sso`,
    }],
  });
  const metadata = idpEntity.getMetadata();
  const idp: SamlIdp = {
    entityId,
    base,
    keys,
    user: { nameId: "alice@example.com", attributes: { email: ["alice@example.com"] } },
    lastRequest: null,
    build(f) {
      const rid = f.responseId ?? `_r${crypto.randomUUID()}`;
      const aid = f.assertionId ?? `_a${crypto.randomUUID()}`;
      const irt = f.inResponseTo ? ` InResponseTo="${esc(f.inResponseTo)}"` : "";
      const issuer = esc(f.issuer ?? entityId);
      const attrs = Object.entries(f.attributes ?? idp.user.attributes).map(([name, values]) =>
        `<saml:Attribute Name="${esc(name)}">${
          values.map((v) => `<saml:AttributeValue>${esc(v)}</saml:AttributeValue>`).join("")
        }</saml:Attribute>`
      ).join("");
      const notBefore = iso(f.notBefore ?? -5);
      const notOnOrAfter = iso(f.notOnOrAfter ?? 300);
      return `<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ` +
        `xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="${rid}" Version="2.0" ` +
        `IssueInstant="${iso(0)}" Destination="${esc(f.destination)}"${irt}>` +
        `<saml:Issuer>${issuer}</saml:Issuer>` +
        `<samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>` +
        `<saml:Assertion ID="${aid}" Version="2.0" IssueInstant="${iso(0)}">` +
        `<saml:Issuer>${issuer}</saml:Issuer>` +
        `<saml:Subject><saml:NameID Format="urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress">${
          esc(f.nameId ?? idp.user.nameId)
        }</saml:NameID>` +
        `<saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">` +
        `<saml:SubjectConfirmationData NotOnOrAfter="${notOnOrAfter}" Recipient="${
          esc(f.recipient)
        }"${irt}/>` +
        `</saml:SubjectConfirmation></saml:Subject>` +
        `<saml:Conditions NotBefore="${notBefore}" NotOnOrAfter="${notOnOrAfter}">` +
        `<saml:AudienceRestriction><saml:Audience>${
          esc(f.audience)
        }</saml:Audience></saml:AudienceRestriction>` +
        `</saml:Conditions>` +
        `<saml:AuthnStatement AuthnInstant="${iso(0)}" SessionIndex="${aid}">` +
        `<saml:AuthnContext><saml:AuthnContextClassRef>urn:oasis:names:tc:SAML:2.0:ac:classes:Password</saml:AuthnContextClassRef></saml:AuthnContext>` +
        `</saml:AuthnStatement>` +
        (attrs ? `<saml:AttributeStatement>${attrs}</saml:AttributeStatement>` : "") +
        `</saml:Assertion></samlp:Response>`;
    },
    sign(xml, what, k = keys) {
      const sig = new SignedXml({
        privateKey: k.privateKey,
        publicCert: k.certificate,
        signatureAlgorithm: RSA_SHA256,
        canonicalizationAlgorithm: EXC_C14N,
      });
      const target = what === "Response"
        ? "/*[local-name(.)='Response']"
        : "/*[local-name(.)='Response']/*[local-name(.)='Assertion']";
      sig.addReference({
        xpath: target,
        digestAlgorithm: "http://www.w3.org/2001/04/xmlenc#sha256",
        transforms: ["http://www.w3.org/2000/09/xmldsig#enveloped-signature", EXC_C14N],
      });
      sig.computeSignature(xml, {
        prefix: "ds",
        location: { reference: `${target}/*[local-name(.)='Issuer']`, action: "after" },
      });
      return sig.getSignedXml();
    },
    stop: () => Promise.resolve(),
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, async (req) => {
    const url = new URL(req.url);
    if (url.pathname === "/metadata") {
      return new Response(metadata, { headers: { "content-type": "application/xml" } });
    }
    if (url.pathname === "/sso") {
      const request = await inflate(url.searchParams.get("SAMLRequest") ?? "");
      const id = /\sID="([^"]+)"/.exec(request)?.[1] ?? "";
      const acs = /AssertionConsumerServiceURL="([^"]+)"/.exec(request)?.[1] ?? "";
      const audience = /<saml:Issuer[^>]*>([^<]+)</.exec(request)?.[1] ?? "";
      idp.lastRequest = {
        id,
        acs,
        signed: url.searchParams.has("Signature") && url.searchParams.has("SigAlg"),
      };
      const xml = idp.sign(
        idp.build({ destination: acs, recipient: acs, audience, inResponseTo: id }),
        "Assertion",
      );
      const relay = url.searchParams.get("RelayState");
      const html = `<!doctype html><html><body onload="document.forms[0].submit()">` +
        `<form method="post" action="${esc(acs)}">` +
        `<input type="hidden" name="SAMLResponse" value="${btoa(xml)}">` +
        (relay !== null ? `<input type="hidden" name="RelayState" value="${esc(relay)}">` : "") +
        `<noscript><button type="submit">Continue</button></noscript></form></body></html>`;
      return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
    }
    return new Response("not found", { status: 404 });
  });
  idp.stop = () => server.shutdown();
  return idp;
}
