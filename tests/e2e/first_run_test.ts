/**
 * First-run and operations polish, at process level: --help, --version, --print-setup-sql, a
 * busy port, container environment variables, the access log's status and the startup URL.
 */
import assert from "node:assert/strict";
import { chinookDb, emptyDb, psql, stopDb } from "../helpers/db.ts";
import { runSvc, spawnSvc } from "../helpers/process.ts";
import { TEST_SECRET } from "../helpers/server.ts";
import { waitFor } from "../helpers/wait.ts";
import { freePort } from "../../src/db/cluster.ts";
import { KEYS } from "../../src/config/keys.ts";
import denoJson from "../../deno.json" with { type: "json" };

Deno.test("--help lists every flag and the reference; --version prints the version", async () => {
  const help = await runSvc(["--help"]);
  assert.equal(help.code, 0, help.stderr);
  for (const k of KEYS) assert.ok(help.stdout.includes(`--${k.key}`), `--help lacks --${k.key}`);
  assert.match(help.stdout, /--version/);
  assert.match(help.stdout, /--print-setup-sql/);
  assert.match(help.stdout, /docs\/configuration\.md/);
  // Every key has an effect today: none is marked planned.
  assert.doesNotMatch(help.stdout, /planned/);
  const version = await runSvc(["--version"]);
  assert.equal(version.code, 0);
  assert.equal(version.stdout.trim(), `svc ${denoJson.version}`);
});

Deno.test("--print-setup-sql: the anonymous role and a NOINHERIT authenticator", async () => {
  const out = await runSvc(["--print-setup-sql", "--pg.query.anonymous_role=web_anon"]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /create role "web_anon" nologin/);
  assert.match(out.stdout, /login noinherit/);
  assert.match(out.stdout, /grant "web_anon" to "svc_authenticator"/);
});

Deno.test("--print-setup-sql runs in a real database, its session-role example granting sequences too", async () => {
  const out = await runSvc([
    "--print-setup-sql",
    "--pg.user=setup_auth",
    "--pg.query.anonymous_role=setup_anon",
  ]);
  assert.equal(out.code, 0, out.stderr);
  // The example lines uncommented, as a user adapts them (another name than the demo's app_user).
  const sql = out.stdout.split("\n").map((l) =>
    /^-- (create role|grant|alter default privileges)\b/.test(l) ? l.slice(3) : l
  ).join("\n").replaceAll("app_user", "setup_user");
  assert.match(sql, /^grant usage on all sequences in schema public to setup_user;$/m);
  assert.match(
    sql,
    /^alter default privileges in schema public grant .* on sequences to setup_user;$/m,
  );
  const db = "setup_sql";
  await emptyDb(
    db,
    "create table before_setup (id serial primary key, v text);" +
      "create table identity_before (id int generated always as identity primary key, v text);",
  );
  await psql(sql, db);
  await psql("create table after_setup (id serial primary key, v text);", db);
  // The session role writes rows whose keys come from sequences, in tables made before and after.
  const rows = await psql(
    `set role setup_user;
     insert into before_setup (v) values ('a');
     insert into identity_before (v) values ('b');
     insert into after_setup (v) values ('c');
     select (select count(*) from before_setup) + (select count(*) from identity_before) +
       (select count(*) from after_setup) as n;`,
    db,
  );
  assert.match(rows, /\b3\b/);
  // The authenticator may switch to the anonymous role and, once granted, to the session role.
  const member = await psql(
    "select pg_has_role('setup_auth', 'setup_anon', 'MEMBER') and " +
      "pg_has_role('setup_auth', 'setup_user', 'MEMBER') as ok;",
    db,
  );
  assert.match(member, /\bt\b/);
});

Deno.test("--print-setup-sql grants on the exposed schemas (pg.schemas), not public", async () => {
  const out = await runSvc(["--print-setup-sql", "--pg.schemas=api,Other,user"]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /^grant usage on schema "api" to "~anonymous";$/m);
  assert.match(out.stdout, /^grant usage on schema "Other" to "~anonymous";$/m);
  // A reserved word is a schema name like another (quoted).
  assert.match(out.stdout, /^grant usage on schema "user" to "~anonymous";$/m);
  assert.match(out.stdout, /^-- grant usage on all sequences in schema "api" to app_user;$/m);
  assert.doesNotMatch(out.stdout, /schema public/);
  // A name with a line break would end a comment line: left out, with a note.
  const nl = await runSvc(["--print-setup-sql"], { SVC_PG__SCHEMAS: "api,evil\ndrop table x" });
  assert.equal(nl.code, 0, nl.stderr);
  assert.doesNotMatch(nl.stdout, /^drop table x/m);
  assert.match(nl.stdout, /1 schema name\(s\) of pg.schemas hold control characters/);
});

Deno.test("--print-setup-sql names the configured authenticator (pg.user, or pg.uri's user)", async () => {
  const byUser = await runSvc(["--print-setup-sql", "--pg.user=x"]);
  assert.equal(byUser.code, 0, byUser.stderr);
  assert.match(byUser.stdout, /create role "x" login noinherit/);
  assert.match(byUser.stdout, /to "x";/);
  assert.doesNotMatch(byUser.stdout, /svc_authenticator/);
  const byUri = await runSvc(["--print-setup-sql", "--pg.uri=postgres://api_login@db/app"]);
  assert.equal(byUri.code, 0, byUri.stderr);
  assert.match(byUri.stdout, /create role "api_login" login noinherit/);
});

Deno.test("--print-setup-sql checks the configuration as a start does: a misspelled key exits 2", async () => {
  // Printing the default roles for `--pg.usr=alice` would name the wrong authenticator.
  for (
    const [flag, hint] of [["--pg.usr=alice", /did you mean "pg\.user"/], [
      "--bogus=1",
      /"bogus"/,
    ]] as const
  ) {
    const out = await runSvc(["--print-setup-sql", flag]);
    assert.equal(out.code, 2, `${flag}: ${out.stdout}`);
    assert.match(out.stderr, /configuration error: unknown configuration key/);
    assert.match(out.stderr, hint);
    assert.equal(out.stdout, "", "no SQL printed");
  }
  const badValue = await runSvc(["--print-setup-sql", "--pg.pool_size=lots"]);
  assert.equal(badValue.code, 2, badValue.stdout);
  assert.match(badValue.stderr, /pg\.pool_size/);
});

Deno.test("a busy port exits 1 with one clear line", async () => {
  const port = freePort();
  const busy = Deno.listen({ hostname: "127.0.0.1", port });
  try {
    const out = await runSvc([
      "--http.host=127.0.0.1",
      `--http.port=${port}`,
      `--jwt.secret=${TEST_SECRET}`,
      `--secrets.dir=${await Deno.makeTempDir()}`,
      `--pg.uri=postgres://postgres@127.0.0.1:${freePort()}/postgres`,
    ]);
    assert.equal(out.code, 1, out.stderr);
    assert.match(out.stderr, new RegExp(`port ${port} is in use \\(set --http\\.port\\)`));
    assert.ok(!out.stderr.includes("    at "), "no stack trace");
  } finally {
    busy.close();
  }
});

Deno.test("container env (SVC_PORT=tcp://…) is ignored; an unknown key with __ stays an error", async () => {
  const uri = await chinookDb();
  const svc = await spawnSvc([`--pg.uri=${uri}`, "--logging.level=debug"], {
    SVC_PORT: "tcp://10.0.0.1:80",
    SVC_SERVICE_HOST: "10.0.0.1",
    SVC_PORT_80_TCP_ADDR: "10.0.0.1",
  });
  try {
    await svc.waitHealthy();
    const r = await fetch(`${svc.url}/svc?relation=genre&limit=1`);
    assert.equal(r.status, 200);
    await r.body?.cancel();
    // A 404 is logged as 404 (the status actually sent).
    const nf = await fetch(`${svc.url}/no/such/path`);
    assert.equal(nf.status, 404);
    await nf.body?.cancel();
    const logged = () => svc.output().split("\n").filter((l) => l.includes("/no/such/path"));
    await waitFor(() => logged().length > 0, { what: "the access line of the 404" });
    const lines = logged();
    assert.equal(lines.length, 1, svc.output());
    assert.match(lines[0], /"status":404/);
    assert.match(svc.output(), /SVC_PORT.*ignored|ignored.*SVC_PORT/);
    assert.match(svc.output(), /svc is serving \\?"?http:\/\/127\.0\.0\.1:\d+\/svc/);
  } finally {
    await svc.stop();
  }
  const bad = await runSvc([], { SVC_PG__NO_SUCH_KEY: "1" });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /unknown configuration key "pg\.no_such_key"/);
});

Deno.test("a misspelled SVC_ variable is warned about at start with its right spelling; svc's own are not", async () => {
  const uri = await chinookDb();
  const svc = await spawnSvc([`--pg.uri=${uri}`, "--http.workers=1"], {
    SVC_PG_URI: uri, // meant as SVC_PG__URI
    SVC_HTTP_TYPESCRIPT_ENABLE: "true",
    SVC_NO_SUCH_THING: "1",
    // Read on purpose by svc's tasks and tests, or injected by a container platform.
    SVC_DEV_DIR: "/tmp/svc-dev",
    SVC_RELOAD_REASON: "signal",
    SVC_REQUIRE_BROWSER: "0",
    SVC_PORT: "tcp://10.0.0.1:80",
    SVC_SERVICE_HOST: "10.0.0.1",
    SVC_PORT_80_TCP_ADDR: "10.0.0.1",
  });
  try {
    await svc.waitHealthy();
    type Line = { level: string; message: string; properties: Record<string, string> };
    const warned = () =>
      new Map(
        svc.output().split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Line)
          .filter((r) => r.level === "WARN" && /^environment variable/.test(r.message))
          .map((r) => [r.properties.name, r]),
      );
    await waitFor(() => warned().has("SVC_NO_SUCH_THING"), {
      what: "the warnings about SVC_ variables",
    });
    const w = warned();
    assert.equal(w.get("SVC_PG_URI")?.properties.suggestion, "SVC_PG__URI");
    assert.match(w.get("SVC_PG_URI")!.message, /is not configuration and is ignored: did you mean/);
    assert.equal(
      w.get("SVC_HTTP_TYPESCRIPT_ENABLE")?.properties.suggestion,
      "SVC_HTTP__TYPESCRIPT__ENABLE",
    );
    assert.match(w.get("SVC_NO_SUCH_THING")!.message, /SVC_<SECTION>__<KEY>/);
    // svc's own variables and the platform's are not warned about.
    for (
      const name of [
        "SVC_DEV_DIR",
        "SVC_RELOAD_REASON",
        "SVC_REQUIRE_BROWSER",
        "SVC_PORT",
        "SVC_SERVICE_HOST",
        "SVC_PORT_80_TCP_ADDR",
      ]
    ) assert.ok(!w.has(name), `${name} is warned about: ${w.get(name)?.message}`);
  } finally {
    await svc.stop();
  }
});

Deno.test("teardown", async () => {
  await stopDb();
});

Deno.test("jwt.secure=false: a session cookie without Secure, and a warning at startup", async () => {
  const uri = await chinookDb();
  const svc = await spawnSvc([`--pg.uri=${uri}`, "--jwt.secure=false", "--http.workers=1"]);
  try {
    await svc.waitHealthy();
    assert.match(svc.output(), /jwt\.secure is false/);
  } finally {
    await svc.stop();
  }
  const both = await runSvc([
    `--pg.uri=${uri}`,
    "--jwt.secure=false",
    "--jwt.same_site=None",
    `--jwt.secret=${TEST_SECRET}`,
  ]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /jwt\.secure=false cannot be combined with jwt\.same_site=None/);
});
