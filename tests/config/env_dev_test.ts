import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ignoredEnv, isConfigEnv, keyOfEnv, suspiciousEnv } from "../../src/config/env.ts";

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

Deno.test("SVC_ variables with single underscores are suspicious, with the key they mean", () => {
  assert.equal(keyOfEnv("SVC_PG_URI"), "pg.uri");
  assert.equal(keyOfEnv("SVC_PG_POOL_SIZE"), "pg.pool_size");
  assert.equal(keyOfEnv("SVC_PG_QUERY_ANONYMOUS_ROLE"), "pg.query.anonymous_role");
  assert.equal(keyOfEnv("SVC_ROUTE_PUBLIC_LOGIN_PATH"), "route.public.login.path");
  assert.equal(keyOfEnv("SVC_NOTHING_LIKE_IT"), undefined);
  assert.deepEqual(
    suspiciousEnv({
      SVC_PG_URI: "postgres://x@y/z",
      SVC_DEV: "1",
      SVC_FOO: "1",
      SVC_HTTP_PORT: "8090", // not a platform's: no tcp:// value
      // Configuration, or read on purpose by svc's tasks and tests.
      SVC_PG__URI: "postgres://x@y/z",
      SVC_CONFIG: "svc.toml",
      SVC_DEV_DIR: "/d",
      SVC_RELOAD_REASON: "signal",
      SVC_MEM_LOG: "/m",
      SVC_MEM_INTERVAL_MS: "10",
      SVC_CHROMIUM: "/c",
      SVC_UPDATE_SCREENSHOTS: "1",
      SVC_DEMO_SCREENSHOT: "1",
      SVC_TEST_CRASHED: "1",
      SVC_REQUIRE_BROWSER: "1",
      SVC_REQUIRE_ANYTHING: "1",
      // Kubernetes and Docker links, for a service named svc or svc-api.
      SVC_PORT: "tcp://10.0.0.1:80",
      SVC_SERVICE_HOST: "10.0.0.1",
      SVC_SERVICE_PORT: "80",
      SVC_SERVICE_PORT_HTTP: "80",
      SVC_PORT_80_TCP: "tcp://10.0.0.1:80",
      SVC_PORT_80_TCP_PROTO: "tcp",
      SVC_PORT_80_TCP_PORT: "80",
      SVC_PORT_80_TCP_ADDR: "10.0.0.1",
      SVC_API_SERVICE_HOST: "10.0.0.2",
      SVC_API_PORT: "tcp://10.0.0.2:8080",
      SVC_NAME: "/web/svc",
      SVC_ENV_FOO: "x",
    }),
    [
      { name: "SVC_DEV", key: "dev" },
      { name: "SVC_FOO" },
      { name: "SVC_HTTP_PORT", key: "http.port", suggestion: "SVC_HTTP__PORT" },
      { name: "SVC_PG_URI", key: "pg.uri", suggestion: "SVC_PG__URI" },
    ],
  );
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
