import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, startServer, TEST_SECRET } from "../helpers/server.ts";
import { type SessionAlgorithm, Sessions } from "../../src/auth/session.ts";

const SCRIPT = new URL("../../scripts/token.ts", import.meta.url).pathname;

Deno.test("deno task token <role> mints a session the server accepts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "svc-token-" });
  await Deno.writeTextFile(`${dir}/jwt-secret`, TEST_SECRET);
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT, "app_user", `--secrets.dir=${dir}`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  assert.equal(out.code, 0, dec.decode(out.stderr));
  const tok = dec.decode(out.stdout).trim();
  assert.match(dec.decode(out.stderr), /curl/);
  const srv = await startServer(await chinookDb());
  try {
    // app_user may write; the anonymous role may not.
    const write = (headers?: HeadersInit) =>
      srv.post("/svc", {
        query: { relation: "genre", select: ["genre_id", "name"] },
        data: [{ name: "Token test" }],
      }, headers);
    const anon = await write();
    assert.equal(anon.status, 403, await anon.text());
    const res = await write(cookie(tok));
    assert.equal(res.status, 200, await res.text());
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs the token task with `args` (and `env` added to the test's own). */
async function token(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout).trim(), stderr: dec.decode(out.stderr) };
}

/** The claims of `tok` as the server verifies them with `secret` (null: it would refuse it). */
function verified(tok: string, secret = TEST_SECRET, algorithm: SessionAlgorithm = "HS256") {
  return new Sessions({
    secret: new TextEncoder().encode(secret),
    algorithm,
    maxAge: 1800,
    renewAfter: 0.5,
    maxSessionAge: 604800,
    cookieName: "accesstoken",
    sameSite: "Lax",
  }).verify(tok);
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "svc-token-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("token: a secrets.dir without jwt-secret exits 2 naming the file, and creates nothing", async () => {
  await withDir(async (dir) => {
    const out = await token(["app_user", `--secrets.dir=${dir}`]);
    assert.equal(out.code, 2, out.stderr);
    assert.equal(out.stdout, "", "no token printed");
    assert.ok(out.stderr.includes(`${dir}/jwt-secret does not exist`), out.stderr);
    assert.deepEqual([...Deno.readDirSync(dir)], [], "no secret created");
  });
});

Deno.test("token: --secrets.dir <dir> (space form) is read like --secrets.dir=<dir>", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/jwt-secret`, TEST_SECRET);
    const out = await token(["app_user", "--secrets.dir", dir, "sub=alice"]);
    assert.equal(out.code, 0, out.stderr);
    const claims = await verified(out.stdout);
    assert.equal(claims?.role, "app_user");
    assert.equal(claims?.sub, "alice");
  });
});

Deno.test("token: jwt.secret, SVC_JWT__SECRET and --config are read as svc reads them", async () => {
  const flag = await token(["app_user", `--jwt.secret=${TEST_SECRET}`]);
  assert.equal(flag.code, 0, flag.stderr);
  assert.equal((await verified(flag.stdout))?.role, "app_user");
  const env = await token(["app_user"], { SVC_JWT__SECRET: TEST_SECRET });
  assert.equal(env.code, 0, env.stderr);
  assert.equal((await verified(env.stdout))?.role, "app_user");
  await withDir(async (dir) => {
    // A config file: its secrets.dir, its algorithm and lifetime, its port in the example.
    await Deno.writeTextFile(`${dir}/jwt-secret`, TEST_SECRET);
    const file = `${dir}/svc.toml`;
    await Deno.writeTextFile(
      file,
      `[secrets]\ndir = "${dir}"\n[jwt]\nalgorithm = "HS512"\nmax_age = 600\n[http]\nport = 8262\n`,
    );
    const out = await token(["app_user", "--config", file]);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(await verified(out.stdout), null, "not HS256");
    const claims = await verified(out.stdout, TEST_SECRET, "HS512");
    assert.equal(claims?.role, "app_user");
    assert.equal(claims!.exp - claims!.iat, 600);
    assert.match(out.stderr, /valid 10 minutes/);
    assert.match(out.stderr, /localhost:8262\//);
  });
  // A key svc would refuse stops the task the same way.
  const bad = await token(["app_user", "--secrets.dri=/nowhere"]);
  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /unknown configuration key "secrets\.dri".*did you mean "secrets\.dir"/);
});

Deno.test("token: claim=value is a string, claim:=json a JSON value", async () => {
  const out = await token([
    "app_user",
    `--jwt.secret=${TEST_SECRET}`,
    "sub=1",
    "user_id:=1",
    "admin:=true",
    'groups:=["a","b"]',
    "note=a:=b",
  ]);
  assert.equal(out.code, 0, out.stderr);
  const claims = await verified(out.stdout);
  assert.equal(claims?.sub, "1");
  assert.equal(claims?.user_id, 1);
  assert.equal(claims?.admin, true);
  assert.deepEqual(claims?.groups, ["a", "b"]);
  assert.equal(claims?.note, "a:=b");
  for (const [arg, said] of [["user_id:={", /not JSON/], ["user_id", /neither/]] as const) {
    const bad = await token(["app_user", `--jwt.secret=${TEST_SECRET}`, arg]);
    assert.equal(bad.code, 2, `${arg}: ${bad.stdout}`);
    assert.match(bad.stderr, said);
    assert.equal(bad.stdout, "");
  }
});

Deno.test("teardown", async () => {
  await stopDb();
});
