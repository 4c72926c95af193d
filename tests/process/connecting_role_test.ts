/**
 * svc warns at start-up when it connects as a role that grants and row-level security do not
 * bound (SUPERUSER, BYPASSRLS), as docs/security.md tells not to; not for a plain role, and not in
 * dev mode (whose private cluster is a superuser's). Found by a new user.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";

const uri = await chinookDb("connecting_role");
await psql(
  `do $$ begin if not exists (select from pg_roles where rolname = 'plain_login') then
    create role plain_login login noinherit; end if; end $$;
  grant "~anonymous" to plain_login;`,
  "connecting_role",
);

async function startupLog(u: string, flags: string[] = []): Promise<string> {
  const svc = await spawnSvc([`--pg.uri=${u}`, "--http.workers=1", ...flags]);
  try {
    await svc.waitHealthy();
    return svc.output();
  } finally {
    await svc.stop();
  }
}

Deno.test("a superuser connection is warned about at start-up; a plain role's is not", async () => {
  const su = await startupLog(uri);
  assert.match(su, /svc connects as .*postgres.*SUPERUSER/);
  const plain = new URL(uri);
  plain.username = "plain_login";
  assert.doesNotMatch(await startupLog(plain.toString()), /svc connects as/);
  assert.doesNotMatch(await startupLog(uri, ["--dev"]), /svc connects as/);
});

Deno.test({
  name: "connecting role: stop",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: stopDb,
});
