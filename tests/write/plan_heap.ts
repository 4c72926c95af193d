/**
 * Prints what planning a bulk write keeps on the heap per payload row (run with
 * `--v8-flags=--expose-gc`; plan_memory_test.ts reads it): a flat insert of one-column rows, and
 * a three-level nested insert. Not a test itself.
 */
import { parseQuery } from "../../src/compile/parse.ts";
import { planWrite } from "../../src/write/plan.ts";
import { fakeSchema } from "./fake_schema.ts";

const gc = (globalThis as unknown as { gc: () => void }).gc;
const heap = () => {
  gc();
  gc();
  return Deno.memoryUsage().heapUsed;
};
const schema = fakeSchema();
const q = (tree: unknown) => parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });

/** Heap bytes the plan of `data` through `tree` keeps, per planned row. */
function perRow(tree: unknown, data: unknown[], rows: number): number {
  const node = q(tree);
  const before = heap();
  const plan = planWrite(node, data);
  const after = heap();
  if (plan.nodes.reduce((n, p) => n + p.rows.length, 0) !== rows) throw new Error("row count");
  return (after - before) / rows;
}

const flat = Array.from({ length: 200_000 }, (_, i) => ({ name: `n${i % 10}` }));
const nested = Array.from({ length: 4_000 }, (_, i) => ({
  name: `a${i}`,
  albums: Array.from({ length: 5 }, (_, j) => ({
    title: `t${j}`,
    tracks: Array.from({ length: 5 }, () => ({ name: "x", milliseconds: 1000 })),
  })),
}));
console.log(JSON.stringify({
  flat: perRow({ relation: "artist", select: ["artist_id", "name"] }, flat, 200_000),
  nested: perRow(
    {
      relation: "artist",
      select: ["artist_id", "name", "albums"],
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          select: ["album_id", "title", "tracks"],
          join: {
            tracks: {
              relation: "track",
              on: { album_id: "album_id" },
              select: ["track_id", "name", "milliseconds"],
            },
          },
        },
      },
    },
    nested,
    4_000 + 20_000 + 100_000,
  ),
}));
