/**
 * svc's own checks of a SAML Response, on top of samlify (docs/sso.md "SAML"): no DTD; exactly one
 * Assertion (anywhere in the document, so one hidden in Extensions or a ds:Object counts); unique
 * IDs; a signature by the IdP's metadata key on the Assertion or on the enclosing Response, whose
 * single Reference points at that element; and everything used (issuer, subject, conditions,
 * attributes) is read from the XML the signature covers, never from the original document, which
 * defeats signature wrapping. Then Audience = SP entity ID, Destination and Recipient = ACS URL,
 * InResponseTo = the login's request ID (absent for an unsolicited response), time conditions
 * within the skew, timestamps with a zone, no SHA-1 unless allowed.
 */
import { DOMParser } from "@xmldom/xmldom";
import { SignedXml } from "xml-crypto";

const PROTOCOL = "urn:oasis:names:tc:SAML:2.0:protocol";
const ASSERTION = "urn:oasis:names:tc:SAML:2.0:assertion";
const DSIG = "http://www.w3.org/2000/09/xmldsig#";
const SUCCESS = "urn:oasis:names:tc:SAML:2.0:status:Success";
const BEARER = "urn:oasis:names:tc:SAML:2.0:cm:bearer";

/** Tolerated clock skew, seconds. */
export const SAML_SKEW = 60;

/** A refused response; the message is the logged reason. */
export class SamlInvalid extends Error {
  override name = "SamlInvalid";
}

/**
 * A response signed, but by no key of the IdP's metadata: the caller may re-fetch the metadata
 * (the IdP may have rotated its key) and verify again.
 */
export class SamlUnknownKey extends SamlInvalid {
  override name = "SamlUnknownKey";
}

const SHA1 = new Set([
  "http://www.w3.org/2000/09/xmldsig#rsa-sha1",
  "http://www.w3.org/2000/09/xmldsig#sha1",
  "http://www.w3.org/2000/09/xmldsig#dsa-sha1",
  "http://www.w3.org/2000/09/xmldsig#hmac-sha1",
]);

/** What a response must match. */
export interface SamlExpectations {
  idpEntityId: string;
  /** The IdP's signing certificates (PEM). */
  idpCertificates: string[];
  spEntityId: string;
  acsUrl: string;
  /**
   * The AuthnRequest ID of this browser's login: InResponseTo must equal it. Null: an unsolicited
   * response, which must carry no InResponseTo. Undefined: not compared.
   */
  requestId?: string | null;
  /** Accept SHA-1 signature and digest algorithms (default: refused). */
  allowSha1?: boolean;
  /** Current time, ms (default: the clock). */
  now?: number;
}

/** The verified identity. */
export interface SamlIdentity {
  assertionId: string;
  /** End of the assertion's validity (ms): how long its ID stays in the replay cache. */
  expiresAt: number;
  nameId: string | null;
  attributes: Record<string, string[]>;
}

function fail(reason: string): never {
  throw new SamlInvalid(reason);
}

/** Whether an XML text carries a DTD (DOCTYPE or ENTITY declarations are never accepted). */
export function hasDtd(xml: string): boolean {
  return /<!DOCTYPE|<!ENTITY/i.test(xml);
}

/** Parses XML strictly (no DTD, errors are failures). */
export function parseXml(xml: string): Document {
  if (hasDtd(xml)) fail("a DTD is not allowed");
  const errors: string[] = [];
  const doc = new DOMParser({
    errorHandler: {
      warning: () => {},
      error: (m: string) => errors.push(m),
      fatalError: (m: string) => errors.push(m),
    },
  }).parseFromString(xml, "text/xml") as unknown as Document;
  if (errors.length || !doc?.documentElement) fail(`malformed XML (${errors[0] ?? "empty"})`);
  return doc;
}

function elements(root: Document | Element, ns: string, local: string): Element[] {
  return Array.from(root.getElementsByTagNameNS(ns, local) as unknown as ArrayLike<Element>);
}

function children(el: Element, ns: string, local: string): Element[] {
  const out: Element[] = [];
  for (let n = el.firstChild; n; n = n.nextSibling) {
    const e = n as Element;
    if (n.nodeType === 1 && e.namespaceURI === ns && e.localName === local) out.push(e);
  }
  return out;
}

function child(el: Element, ns: string, local: string): Element | undefined {
  const c = children(el, ns, local);
  if (c.length > 1) fail(`more than one ${local} in ${el.localName}`);
  return c[0];
}

/** All text below a node (comments never cut a value short). */
function text(el: Element | undefined): string | null {
  return el ? (el.textContent ?? "").trim() : null;
}

function time(value: string | null, what: string): number | undefined {
  if (value === null || value === "") return undefined;
  // xs:dateTime without a zone would be read as the server's local time.
  if (!/(Z|[+-]\d{2}:\d{2})$/.test(value.trim())) fail(`${what} has no time zone`);
  const t = Date.parse(value);
  if (!Number.isFinite(t)) fail(`unparsable ${what}`);
  return t;
}

function pemOf(cert: string): string {
  if (cert.includes("BEGIN CERTIFICATE")) return cert;
  const b64 = cert.replace(/\s+/g, "");
  return `-----BEGIN CERTIFICATE-----\n${
    b64.match(/.{1,64}/g)!.join("\n")
  }\n-----END CERTIFICATE-----\n`;
}

/** The parts of xml-crypto's SignedXml (pinned) used to check SignedInfo's signature alone. */
interface SignedInfoCheck {
  getCanonSignedInfoXml(doc: Node): string;
  findSignatureAlgorithm(name: string): {
    verifySignature(material: string, key: string, signature: string): boolean;
  };
  signatureAlgorithm?: string;
  signatureValue?: string;
}

/**
 * False when the loaded signature's SignatureValue does not verify over its SignedInfo with
 * `cert`. xml-crypto's checkSignature re-parses the whole document and digests every reference
 * before it checks that value, which costs about a second on a large response signed by an
 * unknown key; this check costs one RSA verification. Undecided (true) on any error: the full
 * check still runs and decides.
 */
function signedInfoVerifies(verifier: SignedXml, doc: Node, cert: string): boolean {
  try {
    const v = verifier as unknown as SignedInfoCheck;
    const canon = v.getCanonSignedInfoXml(doc);
    return v.findSignatureAlgorithm(v.signatureAlgorithm!)
      .verifySignature(canon, cert, v.signatureValue!);
  } catch {
    return true;
  }
}

/**
 * The signed form of `parent` (its canonical XML, parsed) when `sig` is a valid IdP signature
 * whose only Reference is `#<parent ID>`; undefined otherwise. SHA-1 algorithms are refused
 * unless `allowSha1`.
 */
function signedForm(
  xml: string,
  sig: Element,
  parent: Element,
  certs: string[],
  allowSha1: boolean,
): Element | null {
  const id = parent.getAttribute("ID");
  if (!id) return null;
  const refs = elements(sig, DSIG, "Reference");
  if (refs.length !== 1 || refs[0].getAttribute("URI") !== `#${id}`) return null;
  if (!allowSha1) {
    const algorithms = [
      ...elements(sig, DSIG, "SignatureMethod"),
      ...elements(sig, DSIG, "DigestMethod"),
    ].map((e) => e.getAttribute("Algorithm") ?? "");
    if (algorithms.some((a) => SHA1.has(a))) {
      fail("the signature uses SHA-1 (allow it with allow_sha1)");
    }
  }
  for (const cert of certs) {
    const pem = pemOf(cert);
    const verifier = new SignedXml({ publicCert: pem, getCertFromKeyInfo: () => null });
    try {
      verifier.loadSignature(sig as unknown as Node);
      if (!signedInfoVerifies(verifier, sig.ownerDocument as unknown as Node, pem)) continue;
      if (!verifier.checkSignature(xml)) continue;
    } catch {
      continue;
    }
    const signed = verifier.getSignedReferences();
    if (signed.length !== 1) return null;
    const root = parseXml(signed[0]).documentElement as unknown as Element;
    if (root.localName !== parent.localName || root.getAttribute("ID") !== id) return null;
    return root;
  }
  return null;
}

/** Verifies a decoded SAMLResponse; throws SamlInvalid with the reason. */
export function verifyResponse(xml: string, ex: SamlExpectations): SamlIdentity {
  const now = ex.now ?? Date.now();
  const skew = SAML_SKEW * 1000;
  const doc = parseXml(xml);
  const response = doc.documentElement as unknown as Element;
  if (response.namespaceURI !== PROTOCOL || response.localName !== "Response") {
    fail("the document is not a SAML Response");
  }
  if (elements(doc, "*", "EncryptedAssertion").length) {
    fail("encrypted assertions are not supported");
  }
  const all = elements(doc, "*", "Assertion");
  if (all.length !== 1) fail(`expected exactly one Assertion, found ${all.length}`);
  const assertion = all[0];
  if (assertion.namespaceURI !== ASSERTION || assertion.parentNode !== response) {
    fail("the Assertion is not a child of the Response");
  }
  const ids = new Set<string>();
  for (const el of elements(doc, "*", "*")) {
    for (const name of ["ID", "Id", "id"]) {
      const v = el.getAttribute(name);
      if (!v) continue;
      if (ids.has(v)) fail(`duplicate ID ${v.slice(0, 60)}`);
      ids.add(v);
    }
  }

  // The signed assertion: from the Assertion's own signature, else from the Response's.
  let signed: Element | null = null;
  const aSig = child(assertion, DSIG, "Signature");
  const sha1 = ex.allowSha1 ?? false;
  if (aSig) signed = signedForm(xml, aSig, assertion, ex.idpCertificates, sha1);
  const rSig = child(response, DSIG, "Signature");
  if (!signed && rSig) {
    const signedResponse = signedForm(xml, rSig, response, ex.idpCertificates, sha1);
    if (signedResponse) {
      const inner = children(signedResponse, ASSERTION, "Assertion");
      if (inner.length !== 1) fail("the signed Response does not hold exactly one Assertion");
      signed = inner[0];
    }
  }
  if (!signed) {
    const why = "the Assertion is not signed by the identity provider's metadata key";
    if (aSig || rSig) throw new SamlUnknownKey(why);
    fail(why);
  }
  if (signed.getAttribute("ID") !== assertion.getAttribute("ID")) {
    fail("the signed Assertion is not the one in the Response");
  }

  // The Response envelope (Destination, InResponseTo, Status).
  if (response.getAttribute("Destination") !== ex.acsUrl) fail("Destination is not this ACS URL");
  const status = child(response, PROTOCOL, "Status");
  const statusCode = status && child(status, PROTOCOL, "StatusCode");
  if (statusCode?.getAttribute("Value") !== SUCCESS) fail("the Response status is not Success");
  const inResponseTo = response.getAttribute("InResponseTo");
  if (ex.requestId === null && response.hasAttribute("InResponseTo")) {
    fail("InResponseTo names a request this browser did not start");
  }
  if (typeof ex.requestId === "string" && inResponseTo !== ex.requestId) {
    fail("InResponseTo does not match the login's request");
  }

  // Everything below is read from the signed form only.
  if (text(child(signed, ASSERTION, "Issuer")) !== ex.idpEntityId) {
    fail("the Assertion's Issuer is not the identity provider");
  }
  const subject = child(signed, ASSERTION, "Subject");
  if (!subject) fail("the Assertion has no Subject");
  const confirmations = children(subject, ASSERTION, "SubjectConfirmation")
    .filter((c) => c.getAttribute("Method") === BEARER);
  if (confirmations.length === 0) fail("no bearer SubjectConfirmation");
  let expiresAt = Infinity;
  const confirmed = confirmations.some((c) => {
    const d = child(c, ASSERTION, "SubjectConfirmationData");
    if (!d || d.getAttribute("Recipient") !== ex.acsUrl) return false;
    const until = time(d.getAttribute("NotOnOrAfter"), "NotOnOrAfter");
    if (until === undefined || until <= now - skew) return false;
    const nb = time(d.getAttribute("NotBefore"), "NotBefore");
    if (nb !== undefined && nb > now + skew) return false;
    if (ex.requestId === null && d.hasAttribute("InResponseTo")) return false;
    if (typeof ex.requestId === "string" && d.getAttribute("InResponseTo") !== ex.requestId) {
      return false;
    }
    expiresAt = Math.min(expiresAt, until + skew);
    return true;
  });
  if (!confirmed) {
    fail("no SubjectConfirmation matches (Recipient, NotOnOrAfter, InResponseTo)");
  }
  const conditions = child(signed, ASSERTION, "Conditions");
  if (!conditions) fail("the Assertion has no Conditions");
  const notBefore = time(conditions.getAttribute("NotBefore"), "NotBefore");
  const notOnOrAfter = time(conditions.getAttribute("NotOnOrAfter"), "NotOnOrAfter");
  if (notBefore !== undefined && notBefore > now + skew) fail("the Assertion is not yet valid");
  if (notOnOrAfter !== undefined) {
    if (notOnOrAfter <= now - skew) fail("the Assertion has expired");
    expiresAt = Math.min(expiresAt, notOnOrAfter + skew);
  }
  const restrictions = children(conditions, ASSERTION, "AudienceRestriction");
  if (restrictions.length === 0) fail("the Assertion has no AudienceRestriction");
  for (const r of restrictions) {
    if (!children(r, ASSERTION, "Audience").some((a) => text(a) === ex.spEntityId)) {
      fail("the Audience is not this service provider");
    }
  }

  const attributes: Record<string, string[]> = Object.create(null);
  for (const statement of children(signed, ASSERTION, "AttributeStatement")) {
    for (const attr of children(statement, ASSERTION, "Attribute")) {
      const name = attr.getAttribute("Name");
      if (!name) continue;
      const values = children(attr, ASSERTION, "AttributeValue").map((v) => text(v) ?? "");
      attributes[name] = [...(attributes[name] ?? []), ...values];
    }
  }
  return {
    assertionId: signed.getAttribute("ID")!,
    expiresAt,
    nameId: text(child(subject, ASSERTION, "NameID")),
    attributes: JSON.parse(JSON.stringify(attributes)),
  };
}
