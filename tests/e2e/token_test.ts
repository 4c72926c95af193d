import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, startServer, TEST_SECRET } from "../helpers/server.ts";

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

Deno.test("teardown", async () => {
  await stopDb();
});
