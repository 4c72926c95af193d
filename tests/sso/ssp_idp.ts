/**
 * An independent SAML identity provider for tests: SimpleSAMLphp (Debian's `simplesamlphp`) run
 * by PHP's built-in server on loopback, with its own generated signing key, one user in its
 * example username/password source, and its whole configuration in a temporary directory
 * (`SIMPLESAMLPHP_CONFIG_DIR`). The service provider's metadata is whatever the SP publishes:
 * `trustSp` writes the SP's metadata XML where SimpleSAMLphp reads it on every request.
 */
import { generateSelfSigned } from "../../src/sso/certs.ts";
import { exists, onPath, type Requirement } from "../helpers/requires.ts";
import { freePort } from "../../src/db/cluster.ts";

/** Where Debian installs SimpleSAMLphp. */
const SSP_WWW = "/usr/share/simplesamlphp/www";

/** SimpleSAMLphp and PHP, as found here; `SVC_REQUIRE_SAML_IDP=1` makes their absence a failure. */
export const SIMPLESAMLPHP: Requirement = (() => {
  const php = onPath("php");
  const hasDom = () =>
    new Deno.Command(php!, { args: ["-r", 'exit(class_exists("DOMDocument") ? 0 : 1);'] })
      .outputSync().success;
  const missing = !php
    ? "no php on PATH"
    : !exists(`${SSP_WWW}/_include.php`)
    ? `no ${SSP_WWW}/_include.php`
    : !hasDom()
    ? "PHP has no DOM extension (php-xml)"
    : null;
  return {
    what: "SimpleSAMLphp",
    path: missing ? null : php,
    missing,
    requireEnv: "SVC_REQUIRE_SAML_IDP",
    install:
      "apt-get install -y --no-install-recommends simplesamlphp php-cli php-xml php-mbstring",
  };
})();

/** The one user of the IdP. */
export const SSP_USER = {
  username: "alice",
  password: "alice-secret-0123",
  email: "alice@example.com",
};

/** A running SimpleSAMLphp IdP. */
export interface SspIdp {
  base: string;
  entityId: string;
  metadataUrl: string;
  /** Makes the IdP trust an SP: its metadata XML (as the SP publishes it). */
  trustSp(metadataXml: string): Promise<void>;
  /** What the PHP server printed (its access log and errors). */
  output(): string;
  stop(): Promise<void>;
}

const php = (s: string) => `'${s.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;

/** Starts SimpleSAMLphp on a free loopback port with a fresh configuration and key. */
export async function startSspIdp(): Promise<SspIdp> {
  const port = freePort();
  const base = `http://127.0.0.1:${port}`;
  const entityId = `${base}/saml2/idp/metadata.php`;
  const dir = await Deno.makeTempDir({ prefix: "svc-ssp-" });
  for (const d of ["config", "cert", "metadata", "data", "log", "tmp", "sessions"]) {
    await Deno.mkdir(`${dir}/${d}`);
  }
  const keys = await generateSelfSigned("simplesamlphp test idp");
  await Deno.writeTextFile(`${dir}/cert/idp.crt`, keys.certificate);
  await Deno.writeTextFile(`${dir}/cert/idp.key`, keys.privateKey);
  const salt = crypto.randomUUID();
  await Deno.writeTextFile(
    `${dir}/config/config.php`,
    `<?php
$config = [
  'baseurlpath' => ${php(`${base}/`)},
  'certdir' => ${php(`${dir}/cert/`)},
  'loggingdir' => ${php(`${dir}/log/`)},
  'datadir' => ${php(`${dir}/data/`)},
  'tempdir' => ${php(`${dir}/tmp`)},
  'metadatadir' => ${php(`${dir}/metadata/`)},
  'metadata.sources' => [
    ['type' => 'flatfile', 'directory' => ${php(`${dir}/metadata`)}],
    ['type' => 'xml', 'file' => ${php(`${dir}/metadata/sp.xml`)}],
  ],
  'secretsalt' => ${php(salt)},
  'auth.adminpassword' => ${php(crypto.randomUUID())},
  'admin.checkforupdates' => false,
  'timezone' => 'UTC',
  'technicalcontact_email' => 'na@example.org',
  'enable.saml20-idp' => true,
  'module.enable' => ['exampleauth' => true, 'core' => true, 'saml' => true],
  'logging.handler' => 'errorlog',
  'logging.level' => SimpleSAML\\Logger::WARNING,
  'store.type' => 'phpsession',
  'session.phpsession.savepath' => ${php(`${dir}/sessions`)},
  'session.cookie.secure' => false,
  'session.cookie.samesite' => null,
  'language.cookie.secure' => false,
  'production' => true,
  'showerrors' => true,
  'errorreporting' => false,
];
`,
  );
  await Deno.writeTextFile(
    `${dir}/config/authsources.php`,
    `<?php
$config = [
  'admin' => ['core:AdminPassword'],
  'users' => ['exampleauth:UserPass',
    ${php(`${SSP_USER.username}:${SSP_USER.password}`)} => [
      'email' => [${php(SSP_USER.email)}],
      'eduPersonAffiliation' => ['member', 'staff'],
    ],
  ],
];
`,
  );
  await Deno.writeTextFile(
    `${dir}/metadata/saml20-idp-hosted.php`,
    `<?php
$metadata['__DYNAMIC:1__'] = [
  'host' => '__DEFAULT__',
  'privatekey' => 'idp.key',
  'certificate' => 'idp.crt',
  'auth' => 'users',
  'signature.algorithm' => 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256',
  // AuthnRequests must be signed, and are verified with the SP's certificate from its metadata.
  'validate.authnrequest' => true,
  'redirect.validate' => true,
  'attributes.NameFormat' => 'urn:oasis:names:tc:SAML:2.0:attrname-format:basic',
  // The NameID is the user's e-mail, whatever format the SP asks for.
  'simplesaml.nameidattribute' => 'email',
];
`,
  );
  // Trusts no SP until trustSp: an empty (valid) metadata document.
  await Deno.writeTextFile(
    `${dir}/metadata/sp.xml`,
    `<md:EntitiesDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata"/>`,
  );
  const child = new Deno.Command(SIMPLESAMLPHP.path!, {
    args: [
      "-d",
      `session.save_path=${dir}/sessions`,
      "-d",
      "display_errors=stderr",
      "-S",
      `127.0.0.1:${port}`,
      "-t",
      SSP_WWW,
    ],
    env: { SIMPLESAMLPHP_CONFIG_DIR: `${dir}/config` },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  const dec = new TextDecoder();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const c of s) out += dec.decode(c);
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch { /* exited */ }
    await child.status;
    await pumps;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  const metadataUrl = `${base}/saml2/idp/metadata.php`;
  // Up when its metadata answers.
  const deadline = Date.now() + 20_000;
  for (;;) {
    const res = await fetch(metadataUrl).catch(() => null);
    const text = await res?.text();
    if (res?.status === 200 && text?.includes("IDPSSODescriptor")) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`SimpleSAMLphp did not come up (${res?.status}):\n${text ?? ""}\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    base,
    entityId,
    metadataUrl,
    trustSp: (xml) => Deno.writeTextFile(`${dir}/metadata/sp.xml`, xml),
    output: () => out,
    stop,
  };
}
