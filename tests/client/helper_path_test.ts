/**
 * `typescript.helper_path` with a spawned server: written at startup, rewritten after SIGUSR1
 * following `alter table … add column`, and the type check sees the new column only then. With
 * one worker (dev mode's default) the process writes it itself; with several, the supervisor.
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

for (const workers of [1, 2]) {
  Deno.test(`helper_path is written and rewritten at reload, ${workers} worker(s)`, async () => {
    await helperPathCase(workers);
  });
}

async function helperPathCase(workers: number): Promise<void> {
  const db = `chinook_helper${workers}`;
  const uri = await chinookDb(db);
  const dir = await Deno.makeTempDir({ prefix: "svc-helper-" });
  const path = `${dir}/database.ts`;
  const svc = await spawnSvc([
    `--pg.uri=${uri}`,
    `--typescript.helper_path=${path}`,
    `--http.workers=${workers}`,
  ]);
  try {
    await svc.waitHealthy();
    const first = await Deno.readTextFile(path);
    assert.ok(first.includes('"artist": {'));
    const before = await checkTypes(dir, USES_NEW_COLUMN, "uses.ts");
    assert.ok(!before.success, "the column does not exist yet");
    assert.ok(before.output.includes("country"), before.output);

    await psql("alter table artist add column country text", db);
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
}

Deno.test("teardown", () => stopDb());
