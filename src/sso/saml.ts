/**
 * SAML 2.0 login with samlify as the protocol engine (AuthnRequest over HTTP-Redirect, schema
 * validation and signature checks of the Response over HTTP-POST, SP metadata) and svc's own
 * checks on top (src/sso/saml_verify.ts) plus a replay cache. IdP metadata is fetched at startup
 * and retried lazily; the SP certificate comes from src/sso/certs.ts.
 */
import * as samlify from "samlify";
import * as xmllint from "@authenio/samlify-xmllint-wasm";
import type { Config, SamlConfig } from "../config/load.ts";
import type { RequestRole } from "../db/pool.ts";
import { type CallbackDeps, type CallbackOutcome, runCallback } from "./callback.ts";
import { loadOrCreateSpKeys, type SpKeyPair } from "./certs.ts";
import { entryBasics, Lazy, refuse } from "./common.ts";
import { hasDtd, SamlInvalid, verifyResponse } from "./saml_verify.ts";
import { claimOnce } from "../util/once.ts";
import { decodeQuery, type StateCookies } from "./state.ts";

samlify.setSchemaValidator(xmllint);

const REDIRECT = samlify.Constants.namespace.binding.redirect;
const POST = samlify.Constants.namespace.binding.post;
/** Largest accepted ACS form body, bytes. */
const MAX_FORM = 512 * 1024;

interface Resolved {
  sp: samlify.ServiceProviderInstance;
  idp: samlify.IdentityProviderInstance;
  idpEntityId: string;
  idpCertificates: string[];
  spEntityId: string;
  acsUrl: string;
  metadata: string;
  fn: string;
}

/** Shared SP key pairs by (certificate list, key list), generated at most once per process. */
const keyPairs = new Map<string, Promise<SpKeyPair>>();

function spKeys(certList: string, keyList: string): Promise<SpKeyPair> {
  const k = `${certList}\0${keyList}`;
  let p = keyPairs.get(k);
  if (!p) {
    p = loadOrCreateSpKeys(certList, keyList);
    p.catch(() => keyPairs.delete(k));
    keyPairs.set(k, p);
  }
  return p;
}

async function fetchMetadata(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000), redirect: "follow" });
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`IdP metadata answered HTTP ${res.status}`);
  }
  const text = await res.text();
  if (hasDtd(text)) throw new Error("IdP metadata carries a DTD");
  return text;
}

async function readForm(req: Request): Promise<URLSearchParams> {
  const reader = req.body?.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  if (reader) {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > MAX_FORM) {
        await reader.cancel();
        throw new Error("the form is too large");
      }
      parts.push(value);
    }
  }
  const all = new Uint8Array(size);
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  return new URLSearchParams(new TextDecoder("utf-8", { fatal: true }).decode(all));
}

/** One `saml.<name>` entry. */
export class SamlEntry {
  readonly lazy: Lazy<Resolved>;

  /** Creates the entry; call `lazy.start()` to resolve it. */
  constructor(
    readonly name: string,
    readonly entry: SamlConfig,
    readonly cfg: Config,
    readonly states: StateCookies,
    readonly deps: CallbackDeps,
  ) {
    this.lazy = new Lazy(`saml.${name}`, () => this.#resolve());
  }

  async #resolve(): Promise<Resolved> {
    const { origin, fn } = entryBasics(this.cfg, this.entry);
    if (!this.entry.idp_metadata_url) throw new Error("idp_metadata_url is not set");
    const keys = await spKeys(
      this.entry.certificate_path ?? this.cfg.saml.certificate_path ?? "",
      this.entry.private_key_path ?? this.cfg.saml.private_key_path ?? "",
    );
    const idp = samlify.IdentityProvider({
      metadata: await fetchMetadata(this.entry.idp_metadata_url),
    });
    const idpEntityId = idp.entityMeta.getEntityID();
    const certs = idp.entityMeta.getX509Certificate("signing");
    const idpCertificates = (Array.isArray(certs) ? certs : [certs]).filter(Boolean);
    if (!idpEntityId || idpCertificates.length === 0) {
      throw new Error("IdP metadata lacks an entity ID or a signing certificate");
    }
    if (!idp.entityMeta.getSingleSignOnService(REDIRECT)) {
      throw new Error("IdP metadata has no HTTP-Redirect SingleSignOnService");
    }
    const base = `${origin}/auth/saml/${encodeURIComponent(this.name)}`;
    const spEntityId = `${base}/metadata`;
    const acsUrl = `${base}/acs`;
    const sp = samlify.ServiceProvider({
      entityID: spEntityId,
      // Signed when forced, or when the IdP's metadata asks for it.
      authnRequestsSigned: this.entry.force_signed_requests ||
        idp.entityMeta.isWantAuthnRequestsSigned(),
      wantAssertionsSigned: true,
      signingCert: keys.certificate,
      privateKey: keys.privateKey,
      requestSignatureAlgorithm: samlify.Constants.algorithms.signature.RSA_SHA256,
      assertionConsumerService: [{ Binding: POST, Location: acsUrl }],
      clockDrifts: [-60_000, 60_000],
    });
    return {
      sp,
      idp,
      idpEntityId,
      idpCertificates,
      spEntityId,
      acsUrl,
      metadata: sp.getMetadata(),
      fn,
    };
  }

  /** `GET /auth/saml/<name>/login`: 303 to the IdP with a (signed) AuthnRequest. */
  async login(req: Request): Promise<Response> {
    const r = await this.lazy.get();
    const search = new URL(req.url).searchParams;
    let location: string, cookie: string;
    try {
      const relayState = search.toString();
      const ctx = r.sp.createLoginRequest(r.idp, "redirect", relayState ? { relayState } : {});
      location = ctx.context;
      cookie = await this.states.cookie({
        protocol: "saml",
        name: this.name,
        rid: ctx.id,
        query: decodeQuery(search),
      });
    } catch (e) {
      throw refuse(`saml.${this.name}`, "SSO_INTERNAL", "cannot start the login", e);
    }
    return new Response(null, {
      status: 303,
      headers: { location, "set-cookie": cookie, "cache-control": "no-store" },
    });
  }

  /** `GET /auth/saml/<name>/metadata`: the SP metadata XML. */
  async metadata(): Promise<Response> {
    const r = await this.lazy.get();
    return new Response(r.metadata, {
      headers: { "content-type": "application/samlmetadata+xml; charset=utf-8" },
    });
  }

  /** `POST /auth/saml/<name>/acs`: verify the Response, then run the callback as `who`. */
  async acs(req: Request, who: RequestRole): Promise<CallbackOutcome> {
    const entry = `saml.${this.name}`;
    const r = await this.lazy.get();
    let form: URLSearchParams;
    try {
      form = await readForm(req);
    } catch (e) {
      throw refuse(entry, "SSO_BAD_REQUEST", "unreadable form", e);
    }
    const encoded = form.get("SAMLResponse");
    if (!encoded) throw refuse(entry, "SSO_BAD_REQUEST", "the form has no SAMLResponse");
    let xml: string;
    try {
      const bin = atob(encoded.replace(/\s+/g, ""));
      xml = new TextDecoder("utf-8", { fatal: true }).decode(
        Uint8Array.from(bin, (c) => c.charCodeAt(0)),
      );
    } catch (e) {
      throw refuse(entry, "SSO_BAD_REQUEST", "SAMLResponse is not base64 UTF-8", e);
    }
    const invalid = (why: unknown) =>
      refuse(entry, "SSO_SAML_INVALID_RESPONSE", "the SAML response was refused", why);
    // A DTD is refused before any parser sees the document (XXE, entity expansion).
    if (hasDtd(xml)) throw invalid(new SamlInvalid("a DTD is not allowed"));
    // The login's state, when its cookie came back (SameSite=None); never required.
    const st = await this.states.consume(req.headers.get("cookie"), "saml", this.name)
      .catch(() => null);
    try {
      await r.sp.parseLoginResponse(r.idp, "post", {
        body: { SAMLResponse: encoded, RelayState: form.get("RelayState") ?? undefined },
      });
    } catch (e) {
      throw invalid(typeof e === "string" ? new Error(e) : e);
    }
    let identity;
    try {
      identity = verifyResponse(xml, {
        idpEntityId: r.idpEntityId,
        idpCertificates: r.idpCertificates,
        spEntityId: r.spEntityId,
        acsUrl: r.acsUrl,
        requestId: st?.rid,
      });
    } catch (e) {
      throw invalid(e);
    }
    if (!await claimOnce(`saml:${this.name}`, identity.assertionId, identity.expiresAt)) {
      throw invalid(new SamlInvalid("the assertion was already used (replay)"));
    }
    const relay = form.get("RelayState");
    const state = st ? st.query : relay ? decodeQuery(new URLSearchParams(relay)) : null;
    return await runCallback(this.deps, r.fn, who, {
      protocol: "saml",
      name: this.name,
      claims: identity.attributes,
      name_id: identity.nameId,
    }, state);
  }
}
