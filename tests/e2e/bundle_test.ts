/**
 * The module graph is self-contained (no unresolvable dynamic imports): it bundles offline into
 * one file that starts and serves, the playground's files included. (`deno compile` itself needs
 * Deno's denort download.)
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { freePort } from "../../src/db/cluster.ts";
import { TEST_SECRET } from "../helpers/server.ts";

Deno.test("main.ts bundles into one file that serves", async () => {
  const dir = await Deno.makeTempDir({ prefix: "svc-bundle-" });
  const out = `${dir}/svc.js`;
  const main = new URL("../../main.ts", import.meta.url).pathname;
  const b = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--platform", "deno", "-o", out, main],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(b.success, new TextDecoder().decode(b.stderr));
  const uri = await chinookDb();
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--unstable-net", // SO_REUSEPORT for the workers (deno.json sets it for the repository)
      out,
      "--http.workers=2", // main.ts is its own worker module: the bundle carries the workers
      `--pg.uri=${uri}`,
      "--http.host=127.0.0.1",
      `--http.port=${port}`,
      `--jwt.secret=${TEST_SECRET}`,
      `--secrets.dir=${dir}`,
      "--pg.query.wellknown_path=/nonexistent",
      "--logging.level=error",
      "--http.playground.enable=true",
    ],
    cwd: dir, // nothing of the repository is needed at run time
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    let ok = false;
    for (let i = 0; i < 200 && !ok; i++) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/svc?relation=genre&limit=1`);
        ok = r.status === 200 && (await r.json())[0].name === "Rock";
      } catch { /* starting */ }
      if (!ok) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(ok, "the bundled server answers a query");
    const health = await (await fetch(`http://127.0.0.1:${port}/svc/health`)).json();
    assert.equal(health.workers, 2, "served by two workers from the one bundled file");
    // The playground's files are carried by the bundle, inlined into its page.
    const page = await (await fetch(`http://127.0.0.1:${port}/svc/playground`)).text();
    for (const file of ["playground.js", "playground.css"]) {
      const text = await Deno.readTextFile(
        new URL(`../../src/http/playground/${file}`, import.meta.url),
      );
      assert.ok(page.includes(text), `the bundled page inlines ${file}`);
    }
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await child.stderr.cancel();
    await Deno.remove(dir, { recursive: true });
    await stopDb();
  }
});
