/**
 * Every JSON example of docs/query.md is a request that works: posted to a real server over the
 * Chinook demo (as app_user, who may write), each answers 200.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer } from "../helpers/server.ts";
import { token } from "../helpers/server.ts";

const doc = await Deno.readTextFile(new URL("../../docs/query.md", import.meta.url));
const blocks = [...doc.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => m[1]);
const sqlBlocks = [...doc.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]);
const uri = await chinookDb("docs");
await psql(
  sqlBlocks.join("\n") + `\ngrant execute on all functions in schema public to app_user;`,
  "docs",
);
const wk = new URL("../../wellknown", import.meta.url).pathname;
const srv = await startServer(uri, ["--dev", `--pg.query.wellknown_path=${wk}`]);

Deno.test("every JSON example in docs/query.md answers 200", async () => {
  assert.ok(blocks.length >= 8);
  const t = now();
  const h = cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
  for (const b of blocks) {
    const res = await srv.post("/svc", b, h);
    const text = await res.text();
    assert.equal(res.status, 200, `${b}\n→ ${text}`);
  }
});

Deno.test("every GET example in docs/query.md answers 200", async () => {
  const urls = [...doc.matchAll(/curl -s '(localhost:8080\/svc\?[^']+)'/g)].map((m) => m[1]);
  assert.ok(urls.length >= 1);
  for (const u of urls) {
    const res = await srv.get(u.replace("localhost:8080", ""));
    const text = await res.text();
    assert.equal(res.status, 200, `${u}\n→ ${text}`);
  }
});

Deno.test("teardown", async () => {
  await srv.stop();
  await stopDb();
});
