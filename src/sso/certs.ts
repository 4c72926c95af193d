/**
 * The SAML service-provider certificate and key (docs/sso.md "SAML"): the first
 * existing file of each colon-separated search list is used; when the certificate is missing
 * everywhere, an RSA 2048 self-signed certificate (10 years, @peculiar/x509) and its PKCS#8 key
 * are generated into the first path of each list (key mode 0600) and reused on later boots. With
 * several workers the supervisor generates them once before any worker starts
 * ({@link prepareSpKeys}); processes sharing the files (replicas on one volume) wait for the one
 * that created them.
 */
// @peculiar/x509 needs the Reflect metadata polyfill loaded before it (its documented setup).
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { dirname } from "node:path";
import { type Config, samlKeyPaths } from "../config/load.ts";

/** A PEM certificate and its PEM private key. */
export interface SpKeyPair {
  certificate: string;
  privateKey: string;
}

async function firstExisting(list: string): Promise<string | undefined> {
  for (const p of list.split(":").filter((x) => x !== "")) {
    try {
      if ((await Deno.stat(p)).isFile) return p;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  }
  return undefined;
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = btoa(String.fromCharCode(...new Uint8Array(der)));
  return `-----BEGIN ${label}-----\n${b64.match(/.{1,64}/g)!.join("\n")}\n-----END ${label}-----\n`;
}

/** Generates a self-signed RSA certificate with `cn` as subject and issuer. */
export async function generateSelfSigned(cn: string): Promise<SpKeyPair> {
  const alg = {
    name: "RSASSA-PKCS1-v1_5",
    hash: "SHA-256",
    publicExponent: new Uint8Array([1, 0, 1]),
    modulusLength: 2048,
  };
  const keys = await crypto.subtle.generateKey(alg, true, ["sign", "verify"]);
  const notBefore = new Date(Date.now() - 60_000);
  const notAfter = new Date(notBefore.getTime() + 10 * 365 * 86400_000);
  const serial = Array.from(crypto.getRandomValues(new Uint8Array(16)))
    .map((b) => b.toString(16).padStart(2, "0")).join("").replace(/^[89a-f]/, "1");
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial,
    name: `CN=${cn.replace(/[,+="\\<>;#]/g, "_")}`,
    notBefore,
    notAfter,
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true)],
  });
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return { certificate: cert.toString("pem") + "\n", privateKey: pem("PRIVATE KEY", pkcs8) };
}

/**
 * Loads the certificate and key from the search lists, generating both on first boot. Generation
 * writes to the first path of each list.
 */
export async function loadOrCreateSpKeys(
  certList: string,
  keyList: string,
  cn = "svc SAML service provider",
): Promise<SpKeyPair> {
  const certPath = await firstExisting(certList);
  const keyPath = await firstExisting(keyList);
  if (certPath && keyPath) {
    return {
      certificate: await Deno.readTextFile(certPath),
      privateKey: await Deno.readTextFile(keyPath),
    };
  }
  if (certPath || keyPath) {
    throw new Error(
      `found ${certPath ? `certificate ${certPath}` : `private key ${keyPath}`} without its ${
        certPath ? "private key" : "certificate"
      }`,
    );
  }
  const target = { cert: certList.split(":")[0], key: keyList.split(":")[0] };
  if (!target.cert || !target.key) throw new Error("empty certificate or key path");
  const pair = await generateSelfSigned(cn);
  await Deno.mkdir(dirname(target.key), { recursive: true, mode: 0o700 });
  await Deno.mkdir(dirname(target.cert), { recursive: true });
  try {
    // The key is created first and exclusively: whoever creates it writes the certificate too.
    await Deno.writeTextFile(target.key, pair.privateKey, { mode: 0o600, createNew: true });
  } catch (e) {
    if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
    return await awaitPair(target.cert, target.key);
  }
  await Deno.writeTextFile(target.cert, pair.certificate, { createNew: true });
  return pair;
}

/** The pair another process is writing: waits (up to 10 s) until both files are complete. */
async function awaitPair(certPath: string, keyPath: string): Promise<SpKeyPair> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const read = (p: string) => Deno.readTextFile(p).catch(() => "");
    const [certificate, privateKey] = await Promise.all([read(certPath), read(keyPath)]);
    if (/-----END [^-]+-----\s*$/.test(certificate) && /-----END [^-]+-----\s*$/.test(privateKey)) {
      return { certificate, privateKey };
    }
    if (Date.now() > deadline) {
      throw new Error(`${keyPath} exists but ${certPath} was not completed by its creator`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Loads or generates the SP key pair of every `saml.<name>` entry once (the supervisor, before
 * its workers start, so that they never race to create the files). A failure is returned per
 * pair (the entries stay unresolved and say why when a worker resolves them).
 */
export async function prepareSpKeys(cfg: Config): Promise<{ pair: string; error: string }[]> {
  const pairs = new Set<string>();
  for (const [name, e] of Object.entries(cfg.saml)) {
    if (name === "certificate_path" || name === "private_key_path" || typeof e !== "object") {
      continue;
    }
    const paths = samlKeyPaths(cfg, e);
    pairs.add(JSON.stringify([paths.certificate, paths.privateKey]));
  }
  const failures: { pair: string; error: string }[] = [];
  for (const p of pairs) {
    const [cert, key] = JSON.parse(p) as [string, string];
    try {
      await loadOrCreateSpKeys(cert, key);
    } catch (e) {
      failures.push({ pair: `${cert} / ${key}`, error: (e as Error).message });
    }
  }
  return failures;
}
