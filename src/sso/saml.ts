/**
 * SAML 2.0 login with samlify as the protocol engine (AuthnRequest over HTTP-Redirect, schema
 * validation and signature checks of the Response over HTTP-POST, SP metadata) and svc's own
 * checks on top (src/sso/saml_verify.ts) plus replay protection (src/util/once.ts). IdP metadata
 * is fetched at startup and retried lazily, then fetched again on every reload, periodically
 * (`metadata_refresh`, cacheDuration, validUntil) and, at most once a minute, when a response is
 * signed by a key it does not hold. The SP side (its certificate from src/sso/certs.ts, its
 * metadata) depends on svc's configuration alone, so the SP metadata is served while the IdP is
 * unreachable. A response must answer a login this browser started (its state cookie) unless
 * `allow_unsolicited`.
 */
import * as samlify from "samlify";
import * as xmllint from "@authenio/samlify-xmllint-wasm";
import { type Config, type SamlConfig, samlKeyPaths } from "../config/load.ts";
import type { RequestRole } from "../auth/roles.ts";
import { type CallbackDeps, type CallbackOutcome, runCallback } from "./callback.ts";
import { loadOrCreateSpKeys, type SpKeyPair } from "./certs.ts";
import { entryBasics, Lazy, reason, refuse } from "./common.ts";
import { hasDtd, SamlInvalid, SamlUnknownKey, verifyResponse } from "./saml_verify.ts";
import { metadataTiming } from "./saml_metadata.ts";
import { claimOnce } from "../util/once.ts";
import { SvcError } from "../svc_error.ts";
import { decodeQuery, type StateCookies } from "./login_state.ts";
import { log } from "../observe/log.ts";

samlify.setSchemaValidator(xmllint);

const REDIRECT = samlify.Constants.namespace.binding.redirect;
const POST = samlify.Constants.namespace.binding.post;
/** How often, at most, a response signed by an unknown key may trigger a metadata re-fetch. */
export const UNKNOWN_KEY_REFRESH_MS = 60_000;

/** The SP side of an entry: svc's configuration and key pair alone, no IdP. */
interface SpSide {
  /** Parses Responses; its metadata is the SP metadata. */
  sp: samlify.ServiceProviderInstance;
  keys: SpKeyPair;
  spEntityId: string;
  acsUrl: string;
  metadata: string;
  fn: string;
}

/** An entry resolved with its IdP's metadata. */
interface Resolved extends SpSide {
  idp: samlify.IdentityProviderInstance;
  /** The SP and IdP entities AuthnRequests are made with (see {@link SamlEntry.login}). */
  login: { sp: samlify.ServiceProviderInstance; idp: samlify.IdentityProviderInstance };
  idpEntityId: string;
  idpCertificates: string[];
  /** When to fetch the IdP metadata again, and its validUntil. */
  refreshIn: number;
  expiresAt?: number;
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

/** The ACS form, at most `max` bytes (413 HTTP_BODY_TOO_LARGE beyond). */
async function readForm(req: Request, max: number): Promise<URLSearchParams> {
  const reader = req.body?.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  if (reader) {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > max) {
        await reader.cancel();
        throw tooLarge();
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

function tooLarge(): SvcError {
  return new SvcError("HTTP_BODY_TOO_LARGE", "the SAML response is too large");
}

/** One `saml.<name>` entry. */
export class SamlEntry {
  readonly lazy: Lazy<Resolved>;
  #spSide: Promise<SpSide> | null = null;

  /** Creates the entry; call `lazy.start()` to resolve it. */
  constructor(
    readonly name: string,
    readonly entry: SamlConfig,
    readonly cfg: Config,
    readonly states: StateCookies,
    readonly deps: CallbackDeps,
  ) {
    this.lazy = new Lazy(`saml.${name}`, () => this.#resolve(), {
      refreshIn: (r) => r.refreshIn,
      expiresAt: (r) => r.expiresAt,
    });
  }

  /** The SP side, built once (again after a failure). */
  #sp(): Promise<SpSide> {
    const p = this.#spSide ??= this.#resolveSp();
    p.catch(() => {
      if (this.#spSide === p) this.#spSide = null;
    });
    return p;
  }

  async #resolveSp(): Promise<SpSide> {
    const { origin, fn } = entryBasics(this.cfg, this.entry);
    const paths = samlKeyPaths(this.cfg, this.entry);
    const keys = await spKeys(paths.certificate, paths.privateKey);
    const base = `${origin}/auth/saml/${encodeURIComponent(this.name)}`;
    const spEntityId = `${base}/metadata`;
    const acsUrl = `${base}/acs`;
    const sp = this.#serviceProvider(spEntityId, acsUrl, keys, this.entry.force_signed_requests);
    return { sp, keys, spEntityId, acsUrl, metadata: sp.getMetadata(), fn };
  }

  #serviceProvider(
    entityID: string,
    acsUrl: string,
    keys: SpKeyPair,
    signed: boolean,
  ): samlify.ServiceProviderInstance {
    return samlify.ServiceProvider({
      entityID,
      authnRequestsSigned: signed,
      wantAssertionsSigned: true,
      signingCert: keys.certificate,
      privateKey: keys.privateKey,
      requestSignatureAlgorithm: samlify.Constants.algorithms.signature.RSA_SHA256,
      assertionConsumerService: [{ Binding: POST, Location: acsUrl }],
      clockDrifts: [-60_000, 60_000],
    });
  }

  async #resolve(): Promise<Resolved> {
    if (!this.entry.idp_metadata_url) throw new Error("idp_metadata_url is not set");
    const side = await this.#sp();
    const idpMetadata = await fetchMetadata(this.entry.idp_metadata_url);
    const timing = metadataTiming(idpMetadata, this.entry.metadata_refresh);
    const idp = samlify.IdentityProvider({ metadata: idpMetadata });
    const idpEntityId = idp.entityMeta.getEntityID();
    const certs = idp.entityMeta.getX509Certificate("signing");
    const idpCertificates = (Array.isArray(certs) ? certs : [certs]).filter(Boolean);
    if (!idpEntityId || idpCertificates.length === 0) {
      throw new Error("IdP metadata lacks an entity ID or a signing certificate");
    }
    const sso = idp.entityMeta.getSingleSignOnService("redirect");
    if (typeof sso !== "string" || !sso) {
      throw new Error("IdP metadata has no HTTP-Redirect SingleSignOnService");
    }
    // AuthnRequests are signed when forced or when the IdP's metadata asks for it. samlify refuses
    // to make a request whose signing differs from the IdP's WantAuthnRequestsSigned
    // (ERR_METADATA_CONFLICT_REQUEST_SIGNED_FLAG), but a signature the IdP did not ask for is
    // harmless: requests are made with entities that agree on it (the IdP one carries nothing
    // else a request uses but its SSO URL).
    const wants = idp.entityMeta.isWantAuthnRequestsSigned();
    const signed = this.entry.force_signed_requests || wants;
    const login = {
      sp: signed === this.entry.force_signed_requests
        ? side.sp
        : this.#serviceProvider(side.spEntityId, side.acsUrl, side.keys, signed),
      idp: signed === wants ? idp : samlify.IdentityProvider({
        entityID: idpEntityId,
        wantAuthnRequestsSigned: signed,
        singleSignOnService: [{ Binding: REDIRECT, Location: sso }],
      }),
    };
    return { ...side, idp, login, idpEntityId, idpCertificates, ...timing };
  }

  /** `GET /auth/saml/<name>/login`: 303 to the IdP with a (signed) AuthnRequest. */
  async login(req: Request): Promise<Response> {
    const r = await this.lazy.get();
    const search = new URL(req.url).searchParams;
    let location: string, cookie: string;
    try {
      const relayState = search.toString();
      const ctx = r.login.sp.createLoginRequest(
        r.login.idp,
        "redirect",
        relayState ? { relayState } : {},
      );
      location = ctx.context;
      cookie = await this.states.cookie({
        protocol: "saml",
        name: this.name,
        rid: ctx.id,
        query: decodeQuery(search),
      });
    } catch (e) {
      // The client's own query (nested too deep) is its 400; anything else is svc's.
      if (e instanceof SvcError && e.code === "SSO_BAD_REQUEST") {
        throw refuse(`saml.${this.name}`, "SSO_BAD_REQUEST", e.message);
      }
      throw refuse(`saml.${this.name}`, "SSO_INTERNAL", "cannot start the login", e);
    }
    return new Response(null, {
      status: 303,
      headers: { location, "set-cookie": cookie, "cache-control": "no-store" },
    });
  }

  /**
   * `GET /auth/saml/<name>/metadata`: the SP metadata XML. It needs svc's configuration only, never
   * the IdP (whose administrator needs it first); 503 SSO_NOT_READY when the SP side cannot be
   * built (no public host or callback function, key pair unreadable), with the reason logged.
   */
  async metadata(): Promise<Response> {
    let side: SpSide;
    try {
      side = await this.#sp();
    } catch (e) {
      log.warn("sso {entry}: no SP metadata ({reason})", {
        entry: `saml.${this.name}`,
        reason: reason(e),
      });
      throw new SvcError("SSO_NOT_READY", `the SP side of saml.${this.name} is not ready`);
    }
    return new Response(side.metadata, {
      headers: { "content-type": "application/samlmetadata+xml; charset=utf-8" },
    });
  }

  /** `POST /auth/saml/<name>/acs`: verify the Response, then run the callback as `who`. */
  async acs(req: Request, who: RequestRole): Promise<CallbackOutcome> {
    const entry = `saml.${this.name}`;
    let r = await this.lazy.get();
    const max = this.entry.max_response_size;
    let form: URLSearchParams;
    try {
      // base64 is 4/3 of the response; RelayState and the field names fit in the slack.
      form = await readForm(req, Math.ceil(max / 3) * 4 + 16 * 1024);
    } catch (e) {
      if (e instanceof SvcError) throw refuse(entry, "HTTP_BODY_TOO_LARGE", e.message);
      throw refuse(entry, "SSO_BAD_REQUEST", "unreadable form", e);
    }
    const encoded = form.get("SAMLResponse");
    if (!encoded) throw refuse(entry, "SSO_BAD_REQUEST", "the form has no SAMLResponse");
    const compact = encoded.replace(/\s+/g, "");
    // The size cap holds before anything parses the XML (decoding included).
    if (Math.floor(compact.length / 4) * 3 > max) {
      throw refuse(entry, "HTTP_BODY_TOO_LARGE", `the SAML response is over ${max} bytes`);
    }
    let xml: string;
    try {
      const bin = atob(compact);
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
    // The login this browser started (its state cookie, consumed once). Without one, only an
    // unsolicited response (no InResponseTo) is accepted, and only with allow_unsolicited.
    const st = await this.states.consume(req.headers.get("cookie"), "saml", this.name).catch(
      (e) => {
        if (e instanceof SvcError && e.code === "SSO_BAD_STATE") {
          if (this.entry.allow_unsolicited) return null;
          throw refuse(entry, "SSO_BAD_STATE", e.message);
        }
        throw e;
      },
    );
    const check = async (r: Resolved) => {
      const identity = verifyResponse(xml, {
        idpEntityId: r.idpEntityId,
        idpCertificates: r.idpCertificates,
        spEntityId: r.spEntityId,
        acsUrl: r.acsUrl,
        requestId: st ? st.rid ?? "" : null,
        allowSha1: this.entry.allow_sha1,
      });
      try {
        await r.sp.parseLoginResponse(r.idp, "post", {
          body: { SAMLResponse: encoded, RelayState: form.get("RelayState") ?? undefined },
        });
      } catch (e) {
        throw typeof e === "string" ? new Error(e) : e;
      }
      return identity;
    };
    let identity;
    try {
      identity = await check(r);
    } catch (e) {
      // Signed by a key the metadata does not hold: the IdP may have rotated its key. The
      // metadata is fetched again (at most once a minute) and the response checked once more.
      if (!(e instanceof SamlUnknownKey)) throw invalid(e);
      if (!await this.lazy.refreshIfOlder(UNKNOWN_KEY_REFRESH_MS)) throw invalid(e);
      r = await this.lazy.get();
      try {
        identity = await check(r);
      } catch (e) {
        throw invalid(e);
      }
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
