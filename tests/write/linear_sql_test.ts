/**
 * A bulk write's statements cost PostgreSQL linear time in its rows: each statement reads the
 * values other statements stored (transaction-local settings) once, as a jsonb array whose
 * elements are reached in constant time, and the read-back's `= ANY(keys)` is an init plan.
 * Found by a hostile probe, each quadratic before: a text[] subscript per child row (walking the
 * array), the whole setting parsed again per root row (mixed keyed and new root rows) and per row
 * a sequential scan met in the read-back — 20,000 parents with a child each took 27 s, a mixed
 * upsert of 20,000 root rows 42 s (now 0.3 s and 0.6 s, measured through the server). Checked on
 * the SQL (a timed test would be flaky), and run against PostgreSQL in execute_test.ts.
 */
import assert from "node:assert/strict";
import { parseQuery } from "../../src/compile/parse.ts";
import { planWrite } from "../../src/write/plan.ts";
import { compileWrite } from "../../src/write/compile.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { fakeSchema } from "./fake_schema.ts";
import { BULK_ROWS } from "../../src/write/statements.ts";

const schema = fakeSchema();
const q = (tree: unknown) => parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });

/**
 * Every `current_setting(…)` of `sql` is read inside an uncorrelated scalar sub-select (an init
 * plan), never subscripted as a text[].
 */
function settingsReadOnce(sql: string): void {
  for (const m of sql.matchAll(/current_setting\(/g)) {
    const before = sql.slice(Math.max(0, m.index! - 40), m.index!);
    assert.match(
      before,
      /\(SELECT (to_jsonb\()?$/,
      `a setting read per row: …${before}|${sql.slice(m.index!, m.index! + 60)}`,
    );
  }
  assert.doesNotMatch(sql, /::text\[\]\)?\[/, "no text[] subscript");
}

Deno.test("a nested insert: children read their parents' keys from an init plan (jsonb when bulk)", () => {
  const node = q({
    relation: "artist",
    select: ["artist_id", "name", "albums"],
    join: {
      albums: {
        relation: "album",
        on: { artist_id: "artist_id" },
        select: ["album_id", "title"],
      },
    },
  });
  const rows = (n: number) =>
    Array.from({ length: n }, (_, i) => ({ name: `a${i}`, albums: [{ title: "t" }] }));
  // A few parents: a text[] read by a joined sub-select, subscripted (cheapest for a few rows).
  const few = compileWrite(planWrite(node, rows(3)));
  assert.match(
    few.statements.find((s) => s.path.length === 1)!.sql,
    /CROSS JOIN \(SELECT current_setting/,
  );
  const w = compileWrite(planWrite(node, rows(BULK_ROWS)));
  const child = w.statements.find((s) => s.path.length === 1)!;
  assert.match(child.sql, /to_jsonb\(current_setting/);
  settingsReadOnce(child.sql);
  // The read-back: the keys' `= ANY` over an init plan.
  const back = compileRead(node, { rootKeys: w.rootKeys }).rows.sql;
  assert.match(
    back,
    /= ANY\(\(SELECT current_setting\([^)]*\)::text\[\]::integer\[\]\)::integer\[\]\)/,
  );
});

Deno.test("a root of keyed and new rows: its keys are gathered reading each setting once", () => {
  const node = q({ relation: "artist", write_mode: "upsert", select: ["artist_id", "name"] });
  const w = compileWrite(planWrite(node, [{ artist_id: 1, name: "kept" }, { name: "new" }]));
  const gather = w.statements[w.statements.length - 1];
  assert.equal(gather.counts, "none", "the statement gathering the root keys");
  assert.match(gather.sql, /current_setting/);
  settingsReadOnce(gather.sql);
});
