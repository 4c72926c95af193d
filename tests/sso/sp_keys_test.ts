/**
 * The SAML SP key pair lives with the other generated secrets unless configured: without
 * `saml.certificate_path` / `private_key_path` it is generated in `secrets.dir`, not `/secrets`
 * (a black-box audit's server created `/secrets/saml.crt` although it was given another
 * `--secrets.dir`).
 */
import assert from "node:assert/strict";
import { loadConfig, samlKeyPaths } from "../../src/config/load.ts";
import { prepareSpKeys } from "../../src/sso/certs.ts";

const entry = [
  "--saml.corp.idp_metadata_url=http://127.0.0.1:9/metadata",
  "--saml.corp.callback_function=public.saml_cb",
  "--http.public_host=localhost",
];

Deno.test("without paths, the SP key pair is generated in secrets.dir", async () => {
  const dir = await Deno.makeTempDir({ prefix: "svc-spkeys-" });
  try {
    const cfg = loadConfig({ args: [`--secrets.dir=${dir}/`, ...entry], env: {} });
    assert.deepEqual(samlKeyPaths(cfg, {}), {
      certificate: `${dir}/saml.crt`,
      privateKey: `${dir}/saml.key`,
    });
    assert.deepEqual(await prepareSpKeys(cfg), []);
    assert.ok((await Deno.stat(`${dir}/saml.crt`)).isFile);
    assert.ok((await Deno.stat(`${dir}/saml.key`)).isFile);
    // Configured paths win, an entry's over the section's.
    const set = loadConfig({
      args: [`--secrets.dir=${dir}`, `--saml.certificate_path=${dir}/a.crt`, ...entry],
      env: {},
    });
    assert.equal(samlKeyPaths(set, {}).certificate, `${dir}/a.crt`);
    assert.equal(samlKeyPaths(set, {}).privateKey, `${dir}/saml.key`);
    assert.equal(samlKeyPaths(set, { certificate_path: "/x.crt" }).certificate, "/x.crt");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
