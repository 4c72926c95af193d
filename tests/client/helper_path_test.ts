/**
 * `typescript.helper_path` with a spawned server: written at startup, rewritten after SIGUSR1
 * following `alter table … add column`, and the type check sees the new column only then.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";
import { checkTypes } from "./check.ts";

const USES_NEW_COLUMN = `import { relation } from "./database.ts";
const q = relation("artist", { select: ["name", "country"] });
export async function countries(): Promise<(string | null)[]> {
  return (await q.get()).map((r) => r.country);
}
`;

Deno.test("helper_path is rewritten at reload and the type check sees the new column", async () => {
  const uri = await chinookDb("chinook_helper");
  const dir = await Deno.makeTempDir({ prefix: "svc-helper-" });
  const path = `${dir}/database.ts`;
  const svc = await spawnSvc([`--pg.uri=${uri}`, `--typescript.helper_path=${path}`]);
  try {
    await svc.waitHealthy();
    const first = await Deno.readTextFile(path);
    assert.ok(first.includes('"artist": {'));
    const before = await checkTypes(dir, USES_NEW_COLUMN, "uses.ts");
    assert.ok(!before.success, "the column does not exist yet");
    assert.ok(before.output.includes("country"), before.output);

    await psql("alter table artist add column country text", "chinook_helper");
    svc.kill("SIGUSR1");
    let text = first;
    const end = Date.now() + 20_000;
    while (text === first && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      text = await Deno.readTextFile(path);
    }
    assert.notEqual(text, first, "helper_path was not rewritten:\n" + svc.output());
    // No temporary files left behind (written through temp file + rename).
    const names = [];
    for await (const e of Deno.readDir(dir)) names.push(e.name);
    assert.deepEqual(names.filter((n) => n.endsWith(".tmp")), []);
    const after = await checkTypes(dir, USES_NEW_COLUMN, "uses.ts");
    assert.ok(after.success, after.output);
  } finally {
    await svc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("teardown", () => stopDb());
