/**
 * A SAML identity provider for tests: samlify in the IdP role publishes its metadata (entity ID,
 * HTTP-Redirect SSO endpoint, its own generated signing certificate) on loopback; `/sso` reads the
 * AuthnRequest and answers the usual auto-submitting form to the ACS with a Response signed by
 * its key. `build`/`sign` make Responses by hand for the attack tests (xml-crypto, the signature
 * engine samlify itself uses). `rotate` replaces the signing key (and the published metadata);
 * `metadataAttrs` adds attributes (validUntil, cacheDuration) to the metadata's root element.
 */
import { createPublicKey, verify } from "node:crypto";
import * as samlify from "samlify";
import { SignedXml } from "xml-crypto";
import { generateSelfSigned, type SpKeyPair } from "../../src/sso/certs.ts";
import { freePort } from "./oidc_idp.ts";

const RSA_SHA256 = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
const RSA_SHA1 = "http://www.w3.org/2000/09/xmldsig#rsa-sha1";
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
  /**
   * The last AuthnRequest `/sso` received: ID, ACS URL, whether the query carries Signature and
   * SigAlg, and the raw query string (for {@link redirectSignatureValid}).
   */
  lastRequest: { id: string; acs: string; signed: boolean; query: string } | null;
  /** How many times the metadata was fetched. */
  metadataFetches: number;
  /** Attributes added to the metadata's root element (e.g. `cacheDuration="PT1S"`). */
  metadataAttrs: string;
  build(f: ResponseFields): string;
  sign(
    xml: string,
    what: "Assertion" | "Response",
    keys?: SpKeyPair,
    opts?: { sha1?: boolean },
  ): string;
  /** Signs with `next` from now on (a new key when not given) and publishes it; returns it. */
  rotate(next?: SpKeyPair): Promise<SpKeyPair>;
  stop(): Promise<void>;
}

const esc = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll(
    '"',
    "&quot;",
  );

const iso = (offset: number) => new Date(Date.now() + offset * 1000).toISOString();

const SIG_ALGS: Record<string, string> = {
  "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256": "sha256",
  "http://www.w3.org/2001/04/xmldsig-more#rsa-sha512": "sha512",
};

/**
 * Whether the HTTP-Redirect binding signature of a raw query string (`SAMLRequest=…&RelayState=…
 * &SigAlg=…&Signature=…`, as it appeared in the URL) verifies with `certificate` (PEM): the signed
 * octets are `SAMLRequest=<v>[&RelayState=<v>]&SigAlg=<v>` with each value exactly as URL-encoded
 * in the query, in that order whatever the query's order (SAML bindings, 3.4.4.1).
 */
export function redirectSignatureValid(query: string, certificate: string): boolean {
  const raw = new Map<string, string>();
  for (const part of query.split("&")) {
    const eq = part.indexOf("=");
    if (eq > 0) raw.set(part.slice(0, eq), part.slice(eq + 1));
  }
  const sigAlg = raw.get("SigAlg");
  const signature = raw.get("Signature");
  const request = raw.get("SAMLRequest");
  if (!sigAlg || !signature || !request) return false;
  const hash = SIG_ALGS[decodeURIComponent(sigAlg)];
  if (!hash) return false;
  const relay = raw.has("RelayState") ? `&RelayState=${raw.get("RelayState")}` : "";
  const octets = new TextEncoder().encode(`SAMLRequest=${request}${relay}&SigAlg=${sigAlg}`);
  const sig = Uint8Array.from(atob(decodeURIComponent(signature)), (c) => c.charCodeAt(0));
  return verify(hash, octets, createPublicKey(certificate), sig);
}

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
  const metadataOf = (k: SpKeyPair) =>
    samlify.IdentityProvider({
      entityID: entityId,
      signingCert: k.certificate,
      privateKey: k.privateKey,
      wantAuthnRequestsSigned: opts.wantAuthnRequestsSigned ?? true,
      singleSignOnService: [{
        Binding: samlify.Constants.namespace.binding.redirect,
        Location: `${base}/sso`,
      }],
    }).getMetadata();
  const keys = await generateSelfSigned("test idp");
  let metadata = metadataOf(keys);
  const idp: SamlIdp = {
    entityId,
    base,
    keys,
    metadataFetches: 0,
    metadataAttrs: "",
    async rotate(next) {
      const k = next ?? await generateSelfSigned("test idp (rotated)");
      metadata = metadataOf(k);
      idp.keys = k;
      return k;
    },
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
    sign(xml, what, k = idp.keys, opts = {}) {
      const sig = new SignedXml({
        privateKey: k.privateKey,
        publicCert: k.certificate,
        signatureAlgorithm: opts.sha1 ? RSA_SHA1 : RSA_SHA256,
        canonicalizationAlgorithm: EXC_C14N,
      });
      const target = what === "Response"
        ? "/*[local-name(.)='Response']"
        : "/*[local-name(.)='Response']/*[local-name(.)='Assertion']";
      sig.addReference({
        xpath: target,
        digestAlgorithm: opts.sha1
          ? "http://www.w3.org/2000/09/xmldsig#sha1"
          : "http://www.w3.org/2001/04/xmlenc#sha256",
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
      idp.metadataFetches++;
      const body = idp.metadataAttrs
        ? metadata.replace(/<(\w+:)?EntityDescriptor\b/, (m) => `${m} ${idp.metadataAttrs}`)
        : metadata;
      return new Response(body, { headers: { "content-type": "application/xml" } });
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
        query: url.search.slice(1),
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
