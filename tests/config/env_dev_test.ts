import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ignoredEnv, isConfigEnv } from "../../src/config/env.ts";

Deno.test("only SVC_CONFIG and SVC_ names with __ are configuration", () => {
  assert.equal(isConfigEnv("SVC_PG__POOL_SIZE"), true);
  assert.equal(isConfigEnv("SVC_PORT"), false);
  assert.equal(isConfigEnv("SVC_SERVICE_HOST"), false);
  assert.equal(isConfigEnv("SVC_CONFIG"), false);
  assert.deepEqual(
    ignoredEnv({
      SVC_PORT: "tcp://10.0.0.1:80",
      SVC_SERVICE_HOST: "x",
      SVC_CONFIG: "a",
      HOME: "/",
    }),
    ["SVC_PORT", "SVC_SERVICE_HOST"],
  );
  const cfg = loadConfig({
    args: [],
    env: { SVC_PORT: "tcp://10.0.0.1:80", SVC_SERVICE_HOST: "10.0.0.1", SVC_PG__POOL_SIZE: "7" },
  });
  assert.equal(cfg.http.port, 8080);
  assert.equal(cfg.pg.pool_size, 7);
  assert.throws(() => loadConfig({ args: [], env: { SVC_PG__NOPE: "1" } }), /pg\.nope/);
});

Deno.test("--dev binds 127.0.0.1 unless http.host is set", () => {
  assert.equal(loadConfig({ args: [], env: {} }).http.host, "0.0.0.0");
  assert.equal(loadConfig({ args: ["--dev"], env: {} }).http.host, "127.0.0.1");
  assert.equal(
    loadConfig({ args: ["--dev", "--http.host=0.0.0.0"], env: {} }).http.host,
    "0.0.0.0",
  );
  assert.equal(
    loadConfig({ args: ["--dev"], env: { SVC_HTTP__HOST: "::" } }).http.host,
    "::",
  );
});

Deno.test("type errors in a config file give file:line:column", async () => {
  const dir = await Deno.makeTempDir();
  const toml = `${dir}/svc.toml`;
  await Deno.writeTextFile(toml, `dev = false\n\n[pg.query]\nmax_depth = "deep"\n`);
  assert.throws(() => loadConfig({ args: [`--config=${toml}`], env: {} }), /svc\.toml:4:1/);
  const huml = `${dir}/svc.huml`;
  await Deno.writeTextFile(huml, `pg::\n  pool_size: "many"\n`);
  assert.throws(() => loadConfig({ args: [`--config=${huml}`], env: {} }), /svc\.huml:2:3/);
  await Deno.remove(dir, { recursive: true });
});
