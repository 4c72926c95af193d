import assert from "node:assert/strict";
import { ConfigError, connectionString, loadConfig } from "../../src/config/load.ts";
import { KEYS } from "../../src/config/keys.ts";
import { resolveConfig } from "../../src/pg/config.ts";
import { loadYaml } from "../../src/formats/yaml.ts";

await loadYaml();

const dir = await Deno.makeTempDir({ prefix: "svc-cfg-" });

function write(name: string, text: string): string {
  const p = `${dir}/${name}`;
  Deno.writeTextFileSync(p, text);
  return p;
}

const files = {
  toml: write(
    "a.toml",
    `[http]\nport = 1111\n[pg.query]\nanonymous_role = "file_role"\nmax_depth = 3\n`,
  ),
  yaml: write(
    "a.yaml",
    `http:\n  port: 1111\npg:\n  query:\n    anonymous_role: file_role\n    max_depth: 3\n`,
  ),
  huml: write(
    "a.huml",
    `http::\n  port: 1111\npg::\n  query::\n    anonymous_role: "file_role"\n    max_depth: 3\n`,
  ),
};

for (const [fmt, path] of Object.entries(files)) {
  Deno.test(`precedence matrix (${fmt}): flag > env > file > default`, () => {
    const base = loadConfig({ args: ["--config", path], env: {} });
    assert.equal(base.http.port, 1111);
    assert.equal(base.pg.query.anonymous_role, "file_role");
    assert.equal(base.pg.query.max_depth, 3);
    assert.equal(base.pg.pool_size, 10); // default
    const env = loadConfig({
      args: ["--config", path],
      env: { SVC_HTTP__PORT: "2222", SVC_PG__QUERY__ANONYMOUS_ROLE: "env_role" },
    });
    assert.equal(env.http.port, 2222);
    assert.equal(env.pg.query.anonymous_role, "env_role");
    assert.equal(env.pg.query.max_depth, 3);
    const flag = loadConfig({
      args: ["--config", path, "--http.port=3333", "--pg.query.anonymous_role", "flag_role"],
      env: { SVC_HTTP__PORT: "2222", SVC_PG__QUERY__ANONYMOUS_ROLE: "env_role" },
    });
    assert.equal(flag.http.port, 3333);
    assert.equal(flag.pg.query.anonymous_role, "flag_role");
    // SVC_CONFIG selects the file too.
    assert.equal(loadConfig({ args: [], env: { SVC_CONFIG: path } }).http.port, 1111);
  });
}

Deno.test("defaults, and dev turns allow_* and typescript on unless set", () => {
  const d = loadConfig({ args: [], env: {} });
  assert.equal(d.http.port, 8080);
  assert.equal(d.jwt.max_age, 1800);
  assert.equal(d.jwt.renew_after, 0.5);
  assert.equal(d.jwt.cookie_name, "accesstoken");
  assert.equal(d.pg.query.anonymous_role, "~anonymous");
  assert.equal(d.pg.query.allow_count, false);
  assert.equal(d.http.typescript.enable, false);
  assert.equal(d.http.metrics.enable, false);
  assert.equal(d.http.metrics.host, "127.0.0.1");
  const dev = loadConfig({ args: ["--dev", "--pg.query.allow_sql=false"], env: {} });
  assert.equal(dev.dev, true);
  assert.equal(dev.pg.query.allow_count, true);
  assert.equal(dev.pg.query.allow_rollback, true);
  assert.equal(dev.pg.query.allow_sql, false);
  assert.equal(dev.http.typescript.enable, true);
  assert.equal(dev.http.metrics.enable, true);
});

Deno.test("a tool's own defaults sit below the file, the environment and the flags", () => {
  const defaults = { "secrets.dir": "/tool/secrets" };
  assert.equal(loadConfig({ args: [], env: {}, defaults }).secrets.dir, "/tool/secrets");
  const f = write("secrets.toml", `[secrets]\ndir = "/file/secrets"\n`);
  assert.equal(
    loadConfig({ args: [`--config=${f}`], env: {}, defaults }).secrets.dir,
    "/file/secrets",
  );
  const env = { SVC_SECRETS__DIR: "/env/secrets" };
  assert.equal(loadConfig({ args: [], env, defaults }).secrets.dir, "/env/secrets");
  assert.equal(
    loadConfig({ args: ["--secrets.dir", "/flag/secrets"], env, defaults }).secrets.dir,
    "/flag/secrets",
  );
});

Deno.test("pg.uri with a granular field is a configuration error", () => {
  assert.throws(
    () => loadConfig({ args: ["--pg.uri=postgres://a@b/c"], env: { SVC_PG__HOST: "x" } }),
    (e: Error) =>
      e instanceof ConfigError && /pg\.uri/.test(e.message) && /pg\.host/.test(e.message),
  );
  const ok = loadConfig({ args: ["--pg.uri=postgres://a@b/c"], env: {} });
  assert.equal(connectionString(ok), "postgres://a@b/c");
  const g = loadConfig({ args: ["--pg.user=u", "--pg.database=d", "--pg.port=5499"], env: {} });
  assert.equal(connectionString(g), "postgres://u@localhost:5499/d");
});

Deno.test("pg.uri with unencoded special characters in the password says to percent-encode them", () => {
  const password = "s3cr#t/p@ss:w?rd%";
  for (const bad of ["s3cr#t", "s3cr/t", "s3cr?t", "s3cr%t", password]) {
    const uri = `postgres://svc_authenticator:${bad}@db.example/app`;
    assert.throws(
      () => loadConfig({ args: [`--pg.uri=${uri}`], env: {} }),
      (e: Error) =>
        e instanceof ConfigError && e.message.includes('"pg.uri"') &&
        /must be percent-encoded/.test(e.message) && e.message.includes("%23") &&
        e.message.includes("pg.password") && !/scheme must be/.test(e.message) &&
        !e.message.includes(bad.slice(0, 5)),
      bad,
    );
  }
  // What the message offers works: the password percent-encoded, or given as pg.password.
  const encoded = `postgres://svc_authenticator:${encodeURIComponent(password)}@db.example/app`;
  const cfg = loadConfig({ args: [`--pg.uri=${encoded}`], env: {} });
  assert.equal(resolveConfig(connectionString(cfg)).password, password);
  const granular = loadConfig({
    args: ["--pg.host=db.example", "--pg.user=svc_authenticator", `--pg.password=${password}`],
    env: {},
  });
  const resolved = resolveConfig(connectionString(granular));
  assert.equal(resolved.password, password);
  assert.deepEqual(resolved.hosts, ["db.example"]);
  // Another scheme is still told so; other connection strings need no pg.password advice.
  assert.throws(
    () => loadConfig({ args: ["--pg.uri=mysql://a@b/c"], env: {} }),
    /the scheme must be postgres:\/\//,
  );
  assert.throws(
    () => loadConfig({ args: [`--pg.read_uri=postgres://r:p#w@replica/app`], env: {} }),
    (e: Error) =>
      e.message.includes('"pg.read_uri"') && /percent-encoded/.test(e.message) &&
      !e.message.includes("pg.password"),
  );
});

Deno.test("unknown keys name the source and the closest known key", () => {
  assert.throws(
    () => loadConfig({ args: ["--http.prot=1"], env: {} }),
    (e: Error) =>
      e instanceof ConfigError && e.message.includes('"http.prot"') && e.message.includes("flag") &&
      e.message.includes('"http.port"'),
  );
  assert.throws(
    () => loadConfig({ args: [], env: { SVC_JWT__MAXAGE: "1" } }),
    (e: Error) =>
      e instanceof ConfigError && e.message.includes("SVC_JWT__MAXAGE") &&
      e.message.includes('"jwt.max_age"'),
  );
  const p = write("bad.toml", `[pg]\npool_sise = 3\n`);
  assert.throws(
    () => loadConfig({ args: ["--config", p], env: {} }),
    (e: Error) =>
      e instanceof ConfigError && e.message.includes(p) && e.message.includes('"pg.pool_size"'),
  );
});

Deno.test("ill-typed values and unparsable files", () => {
  assert.throws(
    () => loadConfig({ args: ["--http.port=abc"], env: {} }),
    (e: Error) =>
      e instanceof ConfigError && e.message.includes("http.port") && e.message.includes("port"),
  );
  // Out of range, for every port key: refused when loading, not when listening.
  for (const key of ["http.port", "pg.port", "http.metrics.port"]) {
    assert.throws(
      () => loadConfig({ args: [`--${key}=99999`], env: {} }),
      (e: Error) => e instanceof ConfigError && e.message.includes(`"${key}"`),
    );
  }
  // Connection strings are parsed when loading (the first connection retries for ever).
  for (
    const [key, value] of [
      ["pg.uri", "x"],
      ["pg.uri", "postgres://h:99999/db"],
      ["pg.uri", "postgres://h/db?sslmode=sometimes"],
      ["pg.listen_uri", "host=h port=abc"],
      ["pg.read_uri", "mysql://h/db"],
    ]
  ) {
    assert.throws(
      () => loadConfig({ args: [`--${key}=${value}`], env: {} }),
      (e: Error) =>
        e instanceof ConfigError && e.message.includes(`"${key}"`) &&
        e.message.includes("connection string"),
      `${key}=${value}`,
    );
  }
  assert.throws(
    () => loadConfig({ args: ["--jwt.algorithm=RS256"], env: {} }),
    (e: Error) => e instanceof ConfigError && e.message.includes("HS256"),
  );
  const t = write("broken.toml", `[http]\nport = = 1\n`);
  assert.throws(
    () => loadConfig({ args: ["--config", t], env: {} }),
    (e: Error) => e instanceof ConfigError && new RegExp(`${t}:2:\\d+`).test(e.message),
  );
  const h = write("broken.huml", `http::\n  port: 1 \n`);
  assert.throws(
    () => loadConfig({ args: ["--config", h], env: {} }),
    (e: Error) => e instanceof ConfigError && new RegExp(`${h}:2:\\d+`).test(e.message),
  );
  const y = write("broken.yaml", `http:\n  port: [1\n`);
  assert.throws(
    () => loadConfig({ args: ["--config", y], env: {} }),
    (e: Error) => e instanceof ConfigError && e.message.includes(y),
  );
});

Deno.test("patterned keys: route, openid, saml, blacklist, logging", () => {
  const p = write(
    "p.toml",
    `
[route.public.login]
path = "/login"
[openid.corp]
issuer = "http://127.0.0.1:9/"
[saml.idp1]
idp_metadata_url = "http://127.0.0.1:9/meta"
[blacklist.relations.public]
secret = "y"
[logging.filter]
path = "^/svc"
`,
  );
  const c = loadConfig({
    args: ["--config", p],
    env: { SVC_BLACKLIST__FUNCTIONS__PUBLIC__DANGER: "y" },
  });
  assert.equal(c.route.public.login.path, "/login");
  assert.equal(c.route.public.login.middleware, false);
  assert.deepEqual(c.openid.corp.scopes, ["openid", "email", "profile"]);
  assert.equal(c.saml.idp1.force_signed_requests, true);
  assert.equal(c.blacklist.relations.public.secret, "y");
  assert.equal(c.blacklist.functions.public.danger, "y");
  assert.equal(c.logging.filter.path, "^/svc");
  assert.throws(
    () => loadConfig({ args: ["--route.public.x.path=/auth/x"], env: {} }),
    ConfigError,
  );
});

Deno.test("docs/configuration.md documents every configuration key", async () => {
  const readme = await Deno.readTextFile(new URL("../../docs/configuration.md", import.meta.url));
  const missing = KEYS.filter((k) => !readme.includes(`\`${k.key}\``)).map((k) => k.key);
  assert.deepEqual(missing, []);
});
