/**
 * Password authentication: MD5 (`md5` + md5(md5(password + user) + salt)) and SCRAM-SHA-256
 * (RFC 5802 / RFC 7677) without channel binding: Deno's TLS does not expose the server's
 * certificate, which `tls-server-end-point` binding hashes, so svc offers SCRAM-SHA-256 only (the
 * GS2 header says "n": no channel binding) and a server that insists on SCRAM-SHA-256-PLUS is
 * refused with a clear error.
 */
import { createHash } from "node:crypto";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The MD5 password message for `user` with the server's 4-byte `salt`. */
export function md5Password(user: string, password: string, salt: Uint8Array): string {
  const inner = createHash("md5").update(password + user).digest("hex");
  const outer = createHash("md5").update(enc.encode(inner)).update(salt).digest("hex");
  return `md5${outer}`;
}

// SASLprep (RFC 4013) as PostgreSQL's client applies it to SCRAM passwords: non-ASCII spaces map
// to a space, "commonly mapped to nothing" characters are dropped, the result is NFKC-normalized.
// A password with a prohibited character is used as it is (PostgreSQL does the same on both
// sides). Approximations: unassigned code points are those of the running Unicode version, and
// the bidirectional-text rule is not checked.
const SPACES = /[\u00A0\u1680\u2000-\u200B\u202F\u205F\u3000]/gu;
const NOTHING = /[\u00AD\u034F\u1806\u180B-\u180D\u200B-\u200D\u2060\uFE00-\uFE0F\uFEFF]/gu;
const PROHIBITED =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u001F\u007F-\u009F\u0340\u0341\u06DD\u070F\u180E\u200C-\u200F\u2028-\u202E\u2060-\u2063\u206A-\u206F\u2FF0-\u2FFB\uFDD0-\uFDEF\uFFF9-\uFFFF\p{Co}\p{Cs}\p{Cn}\u{1D173}-\u{1D17A}\u{E0001}\u{E0020}-\u{E007F}]/u;

/** The password as SCRAM hashes it (SASLprep, or unchanged when prep refuses it). */
export function saslprep(password: string): string {
  if (/^[\x20-\x7e]*$/.test(password)) return password;
  const mapped = password.replace(SPACES, " ").replace(NOTHING, "").normalize("NFKC");
  if (PROHIBITED.test(mapped) || mapped === "") return password;
  return mapped;
}

function b64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

function unb64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function hmac(key: Uint8Array, data: Uint8Array): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey(
    "raw",
    key as Uint8Array<ArrayBuffer>,
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, data as Uint8Array<ArrayBuffer>));
}

async function sha256(data: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>));
}

async function pbkdf2(password: Uint8Array, salt: Uint8Array, iterations: number) {
  const k = await crypto.subtle.importKey(
    "raw",
    password as Uint8Array<ArrayBuffer>,
    "PBKDF2",
    false,
    ["deriveBits"],
  );
  const bits = await crypto.subtle.deriveBits(
    { name: "PBKDF2", hash: "SHA-256", salt: salt as Uint8Array<ArrayBuffer>, iterations },
    k,
    256,
  );
  return new Uint8Array(bits);
}

/** Why a SCRAM exchange was refused (the server misbehaved or could not be verified). */
export class ScramError extends Error {
  /** A refusal with its reason. */
  constructor(message: string) {
    super(message);
    this.name = "ScramError";
  }
}

/**
 * One SCRAM-SHA-256 exchange: {@link first} gives the client-first message, {@link final} takes
 * the server-first message and gives the client-final one, {@link verify} checks the
 * server-final message (the server proves it knows the password too).
 */
export class Scram {
  readonly #password: string;
  readonly #nonce: string;
  #firstBare = "";
  #serverSignature: Uint8Array | null = null;

  /** An exchange for `password`; `nonce` only for tests (random otherwise). */
  constructor(password: string, nonce?: string) {
    this.#password = password;
    this.#nonce = nonce ?? b64(crypto.getRandomValues(new Uint8Array(18)));
  }

  /** The client-first message (the user name is empty: PostgreSQL takes the startup user). */
  first(): Uint8Array {
    this.#firstBare = `n=,r=${this.#nonce}`;
    return enc.encode(`n,,${this.#firstBare}`);
  }

  /** The client-final message answering `serverFirst`. */
  async final(serverFirst: Uint8Array): Promise<Uint8Array> {
    const text = dec.decode(serverFirst);
    const attrs = new Map<string, string>();
    for (const part of text.split(",")) {
      const eq = part.indexOf("=");
      if (eq === 1) attrs.set(part[0], part.slice(2));
    }
    if (attrs.has("e")) throw new ScramError(`SCRAM error from the server: ${attrs.get("e")}`);
    const r = attrs.get("r");
    const s = attrs.get("s");
    const i = Number(attrs.get("i"));
    if (!r || !r.startsWith(this.#nonce) || r.length <= this.#nonce.length) {
      throw new ScramError("SCRAM server nonce does not extend the client's");
    }
    if (!s) throw new ScramError("SCRAM server-first message without salt");
    if (!Number.isInteger(i) || i < 1 || i > 10_000_000) {
      throw new ScramError(`SCRAM iteration count out of range: ${attrs.get("i")}`);
    }
    let salt: Uint8Array;
    try {
      salt = unb64(s);
    } catch {
      throw new ScramError("SCRAM salt is not base64");
    }
    const salted = await pbkdf2(enc.encode(saslprep(this.#password)), salt, i);
    const clientKey = await hmac(salted, enc.encode("Client Key"));
    const storedKey = await sha256(clientKey);
    const withoutProof = `c=biws,r=${r}`; // biws: base64 of the GS2 header "n,,"
    const authMessage = enc.encode(`${this.#firstBare},${text},${withoutProof}`);
    const clientSignature = await hmac(storedKey, authMessage);
    const proof = clientKey.map((b, k) => b ^ clientSignature[k]);
    const serverKey = await hmac(salted, enc.encode("Server Key"));
    this.#serverSignature = await hmac(serverKey, authMessage);
    return enc.encode(`${withoutProof},p=${b64(proof)}`);
  }

  /** Checks the server-final message; throws unless the server proved the password. */
  verify(serverFinal: Uint8Array): void {
    const text = dec.decode(serverFinal);
    const e = /(?:^|,)e=([^,]*)/.exec(text);
    if (e) throw new ScramError(`SCRAM error from the server: ${e[1]}`);
    const v = /(?:^|,)v=([^,]*)/.exec(text);
    if (!v || !this.#serverSignature) throw new ScramError("SCRAM server-final message invalid");
    const got = unb64(v[1]);
    const want = this.#serverSignature;
    let diff = got.length ^ want.length;
    for (let k = 0; k < Math.min(got.length, want.length); k++) diff |= got[k] ^ want[k];
    if (diff !== 0) throw new ScramError("SCRAM server signature does not match: wrong server");
  }
}
