/**
 * A spawned svc with the demo's routes and no templates directory warns at start-up (it used to
 * say nothing, and the first template route answered a bare 500); with the directory it does not.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { spawnSvc } from "../helpers/process.ts";

const repo = new URL("../../", import.meta.url).pathname;

Deno.test("routes declared, templates directory missing: a warning at start-up", async () => {
  const uri = await chinookDb("tpl_warning", await Deno.readTextFile(`${repo}demo/app.sql`));
  try {
    for (
      const [flags, warned] of [[[], true], [
        [`--http.templates.path=${repo}templates`],
        false,
      ]] as const
    ) {
      const svc = await spawnSvc([`--pg.uri=${uri}`, "--http.workers=1", ...flags]);
      try {
        await svc.waitHealthy();
      } finally {
        await svc.stop();
      }
      const lines = svc.output().split("\n").filter((l) => l.includes('"templates: '));
      if (warned) {
        assert.equal(lines.length, 1, svc.output());
        assert.match(lines[0], /http\.templates\.path \\"\/template\\" is not a directory/);
      } else {
        assert.deepEqual(lines, []);
      }
    }
  } finally {
    await stopDb();
  }
});
