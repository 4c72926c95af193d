/**
 * Routes in the real server process: startup warnings (PUBLIC-executable routes, conflicts),
 * SIGUSR1 adding a route declared by `comment on function` without a restart, and a route
 * configured on /svc refused at startup with the key named.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { runSvc, spawnSvc } from "../helpers/process.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));
const uri = await chinookDb("routes_reload", fixture);

Deno.test("startup warns; SIGUSR1 adds a route declared by comment, without restart", async () => {
  const svc = await spawnSvc([`--pg.uri=${uri}`, "--pg.query.wellknown_path=/nonexistent"]);
  try {
    await svc.waitHealthy();
    const out = svc.output();
    assert.match(out, /route rt\.public_only\(\) is executable by PUBLIC/);
    assert.match(out, /rt\.second_dup\(\).*conflicts with.*rt\.first_dup\(\).*deactivated/);
    const before = await fetch(`${svc.url}/reloaded/1`);
    assert.equal(before.status, 404);
    await before.body?.cancel();
    await psql(
      `create function rt.reloaded(n int) returns int stable language sql as $$ select n * 2 $$;
       comment on function rt.reloaded(int) is 'added later. route:: path: /reloaded/{n}';
       grant execute on function rt.reloaded(int) to "~anonymous";`,
      "routes_reload",
    );
    svc.kill("SIGUSR1");
    const end = Date.now() + 10000;
    let answer: unknown = null;
    while (Date.now() < end) {
      const r = await fetch(`${svc.url}/reloaded/21`);
      if (r.status === 200) {
        answer = await r.json();
        break;
      }
      await r.body?.cancel();
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(answer, 42);
  } finally {
    assert.equal((await svc.stop()).code, 0);
  }
});

Deno.test("a route configured on /svc is a configuration error naming the key", async () => {
  const r = await runSvc([`--pg.uri=${uri}`, "--route.rt.multi.path=/svc/x"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /route\.rt\.multi\.path/);
});

Deno.test("teardown", async () => {
  await stopDb();
});
