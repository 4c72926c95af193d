/**
 * Plan templates (src/write/template.ts): a write planned from a template gives exactly what the
 * full planner gives — statements, parameters, root keys, stats, errors and check failures —
 * for payloads of one shape with other values (valid or not, failing at other pointers), for
 * shape changes, and for writes that never use a template (keys given, updates, deletes).
 */
import assert from "node:assert/strict";
import { parseQuery } from "../../src/compile/parse.ts";
import type { RelationNode } from "../../src/compile/ast.ts";
import { SvcError } from "../../src/svc_error.ts";
import { planWrite } from "../../src/write/plan.ts";
import { type CompiledWrite, compileWrite } from "../../src/write/compile.ts";
import {
  cachedTemplates,
  planAndCompileWrite,
  TEMPLATE_MAX_VALUES,
} from "../../src/write/template.ts";
import { fakeSchema } from "./fake_schema.ts";

const schema = fakeSchema();
const q = (tree: unknown): RelationNode =>
  parseQuery(schema, tree, { maxDepth: 6, pointer: "/query" });

/** Everything a compiled write (or its failure) shows: compared between both paths. */
function outcome(f: () => CompiledWrite): unknown {
  let w: CompiledWrite;
  try {
    w = f();
  } catch (e) {
    if (!(e instanceof SvcError)) throw e;
    return { error: e.code, message: e.message, details: e.details };
  }
  const marker = /svc-write-check-[0-9a-f]{8}/.exec(w.statements.map((s) => s.sql).join(" "))
    ?.[0];
  const errors = [];
  if (marker) {
    for (let c = 0; c < 8; c++) {
      for (const r of [0, 1, 2, 5]) {
        try {
          const e = w.error(new Error(`${marker}:${c}:${r}`));
          errors.push(e instanceof SvcError ? [e.code, e.message, e.details] : String(e));
        } catch (e) {
          errors.push(`throws ${(e as Error).name}`); // no such check
        }
      }
    }
  }
  const results = w.statements.map(() => [{ i: 2, u: 1, d: 0 }]);
  return {
    statements: w.statements.map((s) => ({ ...s })),
    rootKeys: w.rootKeys,
    stats: w.stats(results),
    errors,
  };
}

function full(node: RelationNode, data: unknown, pointer = "/data", readBack = true) {
  return compileWrite(planWrite(node, data, pointer, { readBack }), { readBack });
}

function same(node: RelationNode, data: unknown, pointer = "/data", readBack = true): unknown {
  const viaTemplate = outcome(() => planAndCompileWrite(node, data, pointer, { readBack }));
  const planned = outcome(() => full(node, data, pointer, readBack));
  assert.deepEqual(viaTemplate, planned, JSON.stringify(data));
  return planned;
}

const invoiceLike = () =>
  q({
    relation: "album",
    select: ["album_id", "title", "artist_id", "tracks"],
    join: {
      tracks: {
        relation: "track",
        on: { album_id: "album_id" },
        select: ["track_id", "album_id", "name", "milliseconds", "unit_price", "tags", "meta"],
      },
    },
  });

const album = (title: unknown, ms: unknown[], price: unknown = "0.99") => ({
  title,
  artist_id: 7,
  tracks: ms.map((m, i) => ({ name: `t${i}`, milliseconds: m, unit_price: price })),
});

Deno.test("a nested insert of a known shape is made from its template, values in place", () => {
  const node = invoiceLike();
  const first = same(node, [album("A", [1, 2, 3])]) as { statements: { params: unknown[] }[] };
  assert.equal(cachedTemplates(node), 1);
  const second = same(node, [album('B "quoted" \u2028', [4, -0, 5], 4.5e21)]) as {
    statements: { params: unknown[] }[];
  };
  assert.equal(cachedTemplates(node), 1);
  assert.notDeepEqual(first.statements[0].params, second.statements[0].params);
  assert.match(String(second.statements[1].params[0]), /4500000000000000000000/);
  // Another shape: another template.
  same(node, [album("C", [1, 2])]);
  assert.equal(cachedTemplates(node), 2);
});

Deno.test("a template's values are checked: the same error and pointer as the planner's", () => {
  const node = invoiceLike();
  same(node, [album("A", [1, 2, 3])]);
  assert.equal(cachedTemplates(node), 1);
  for (
    const bad of [
      [album({ t: 5 }, [1, 2, 3])],
      [album(null, [1, 2, 3])],
      [album("A", [1, "x", 3])],
      [album("A", [1, 2, 3.5])],
      [album("A", [1, 2, { o: 1 }])],
      [album("A", [1, [2], 2 ** 40])],
      [{ ...album("A", [1, 2, 3]), artist_id: "seven" }],
    ]
  ) {
    const out = same(node, bad) as { error?: string; details?: { pointer: string } };
    assert.equal(out.error, "QUERY_INVALID", JSON.stringify(out));
  }
  const two = same(node, [album("A", [1, "x", "y"])]) as { details: { pointer: string } };
  assert.equal(two.details.pointer, "/data/0/tracks/1/milliseconds");
  // Still served by the template after failures.
  same(node, [album("D", [7, 8, 9])]);
  assert.equal(cachedTemplates(node), 1);
});

Deno.test("writes that depend on values are planned in full every time", () => {
  const node = q({
    relation: "artist",
    write_mode: "merge",
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
  });
  // Keys given: updates, deletes of omitted children, static root keys.
  same(node, [{ artist_id: 1, name: "a", albums: [{ album_id: 2, title: "x", tracks: [] }] }]);
  same(node, [{ artist_id: 3, name: "b", albums: [{ album_id: 4, title: "y", tracks: [] }] }]);
  // Two rows with one key and different values: the duplicate check still runs.
  same(node, [{
    artist_id: 1,
    albums: [{ album_id: 2, title: "x" }, { album_id: 2, title: "y" }],
  }]);
  assert.equal(cachedTemplates(node), 0);
  // A null key is no key: inserted, and templated; the same shape with a key is not.
  same(node, [{ artist_id: null, name: "c", albums: [{ album_id: null, title: "z" }] }]);
  assert.equal(cachedTemplates(node), 1);
  same(node, [{ artist_id: 9, name: "c", albums: [{ album_id: null, title: "z" }] }]);
  same(node, [{ artist_id: null, name: "c", albums: [{ album_id: 5, title: "z" }] }]);
  assert.equal(cachedTemplates(node), 1);
});

Deno.test("links through a readonly outgoing join take the linked key from the payload", () => {
  const node = q({
    relation: "track",
    select: ["track_id", "name", "milliseconds", "genre"],
    join: { genre: { relation: "genre", on: { genre_id: "genre_id" }, write_mode: "readonly" } },
  });
  same(node, [{ name: "t", milliseconds: 1, genre: { genre_id: 4, name: "x" } }]);
  same(node, [{ name: "u", milliseconds: 2, genre: { genre_id: 6, name: "y" } }]);
  same(node, [{ name: "u", milliseconds: 2, genre: { genre_id: "6x", name: "y" } }]);
  same(node, [{ name: "u", milliseconds: 2, genre: null }]);
  same(node, [{ name: "u", milliseconds: 2, genre: { genre_id: null, name: "y" } }]);
  assert.ok(cachedTemplates(node) >= 1);
});

Deno.test("a template is per data pointer and read-back choice; large payloads get none", () => {
  const node = invoiceLike();
  same(node, [album("A", [1])], "/0/data");
  same(node, [album("A", [1])], "/1/data");
  same(node, [album("A", [1])], "/1/data", false);
  same(node, [album(3, [1])], "/1/data", false);
  assert.equal(cachedTemplates(node), 3);
  const many = Array.from({ length: TEMPLATE_MAX_VALUES }, (_, i) => i + 1);
  same(node, [album("big", many)]);
  same(node, [album("big", many)]);
  assert.equal(cachedTemplates(node), 3);
});

/** A seeded pseudo-random generator (mulberry32). */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

Deno.test("differential: random payloads and modes, template path equals the planner", () => {
  const rand = rng(25);
  const pick = <T>(a: T[]): T => a[Math.floor(rand() * a.length)];
  const modes = ["insert", "merge", "merge-new"];
  const trees = modes.flatMap((albums) =>
    modes.map((tracks) =>
      q({
        relation: "artist",
        select: ["artist_id", "name", "albums"],
        join: {
          albums: {
            relation: "album",
            on: { artist_id: "artist_id" },
            write_mode: albums,
            select: {
              album_id: "album_id",
              title: "title",
              tracks: "tracks",
              artist: ["get", "artist"],
              again: ["get", "title"],
            },
            join: {
              tracks: {
                relation: "track",
                on: { album_id: "album_id" },
                write_mode: tracks,
                select: ["track_id", "name", "milliseconds", "unit_price", "created", "tags"],
              },
              artist: { relation: "artist", on: { artist_id: "artist_id" } },
            },
          },
        },
      })
    )
  );
  // A value of each kind, valid or not for some column; null only where the skeleton says so.
  const values = [
    "x",
    "",
    "12",
    "1.5",
    3,
    -7,
    2.5,
    1e21,
    2 ** 33,
    true,
    [1],
    { a: 1 },
    "2026-01-01",
  ];
  type Skeleton = { key: string; kind: "null" | "value" | "rows"; rows?: Skeleton[][] }[];
  const row = (cols: string[], keyCol: string, join?: [string, () => Skeleton[]]): Skeleton => {
    const s: Skeleton = [];
    if (rand() < 0.3) s.push({ key: keyCol, kind: rand() < 0.5 ? "null" : "value" });
    for (const c of cols) {
      if (rand() < 0.85) s.push({ key: c, kind: rand() < 0.1 ? "null" : "value" });
    }
    if (join && rand() < 0.8) s.push({ key: join[0], kind: "rows", rows: [join[1]()] });
    if (rand() < 0.02) s.push({ key: "nope", kind: "value" });
    return s;
  };
  const many = (n: number, f: () => Skeleton) => Array.from({ length: n }, f);
  const trackRow = () => row(["name", "milliseconds", "unit_price", "created", "tags"], "track_id");
  const albumRow = () =>
    row(["title", "again", "artist"], "album_id", [
      "tracks",
      () => many(Math.floor(rand() * 3), trackRow),
    ]);
  const artistRow = () =>
    row(["name"], "artist_id", ["albums", () => many(Math.floor(rand() * 3), albumRow)]);
  const fill = (s: Skeleton, keyish: boolean): Record<string, unknown> => {
    const o: Record<string, unknown> = {};
    for (const f of s) {
      if (f.kind === "null") o[f.key] = null;
      else if (f.kind === "rows") o[f.key] = f.rows![0].map((r) => fill(r, keyish));
      else if (f.key.endsWith("_id") && rand() < 0.8) o[f.key] = Math.floor(rand() * 3) + 1;
      else if (f.key === "milliseconds" && rand() < 0.7) o[f.key] = Math.floor(rand() * 1e6);
      else if (f.key === "name" || f.key === "title") {
        o[f.key] = rand() < 0.8 ? `n${rand()}` : pick(values);
      } else o[f.key] = pick(values);
    }
    return o;
  };
  let templated = 0;
  for (let i = 0; i < 600; i++) {
    const node = pick(trees);
    const skeleton = many(1 + Math.floor(rand() * 2), artistRow);
    for (let k = 0; k < 3; k++) same(node, skeleton.map((s) => fill(s, true)));
  }
  for (const t of trees) templated += cachedTemplates(t);
  assert.ok(templated > 20, `only ${templated} templates`);
});
