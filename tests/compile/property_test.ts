/**
 * Property-based tests of the compiler: thousands of generated, mutated and garbage trees over
 * the Chinook (+ fixture) schema. parseQuery + compileRead may only throw SvcError, and every
 * tree that compiles must run on PostgreSQL without a syntax or name error (data errors such as
 * invalid input or division by zero, and type mismatches between operands, are acceptable).
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { FIXTURE_SQL } from "./fixture.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import type { CompiledRead, CompileOptions } from "../../src/compile/ast.ts";
import { SvcError } from "../../src/svc_error.ts";
import type { Column, Relation } from "../../src/db/schema.ts";

const uri = await chinookDb("props", FIXTURE_SQL);
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

type Json = unknown;
type Tree = Record<string, Json>;

/** SQLSTATEs a compiled query may legitimately raise at run time. */
function acceptable(code: string, message: string): boolean {
  // 42601 is also raised by input functions (tsvector…) for bad values; SQL text errors say "at".
  if (code === "42601") return !/^syntax error at|delimited identifier|unterminated/.test(message);
  return code.startsWith("22") || // data exceptions: bad input text, division by zero, overflow…
    ["42883", "42804", "42846", "21000", "57014", "42725"].includes(code) ||
    (code === "42704" && /text search configuration .* does not exist/.test(message));
  // 42883/42804/42846/42725: operand types that do not fit the operator (the caller's mistake);
  // 21000: a set-returning computed field compared as a scalar; 57014: statement timeout;
  // 42704: an fts configuration taken from a column value (checked only when it is a literal).
}

// ---------------------------------------------------------------------------------------------
// Generators

/** What expressions of one relation (or function) may reference. */
interface Scope {
  cols: string[];
  computed: string[];
  composites: [string, string[]][];
  outJoins: { key: string; cols: string[] }[];
  inJoins: { key: string; scope: Scope }[];
  /** Columns with a literal generator of a fitting type (for comparisons that run). */
  typed: { name: string; lit: fc.Arbitrary<Json> }[];
}

const RELATIONS = [
  "artist",
  "album",
  "track",
  "genre",
  "media_type",
  "invoice",
  "invoice_line",
  "customer",
  "employee",
  "playlist",
  "playlist_track",
  "doc",
];
const rel = (name: string): Relation => schema.relations.get(`public.${name}`)!;

function baseScope(r: Relation): Scope {
  const composites: [string, string[]][] = r.columns
    .filter((c) => c.compositeOid !== null)
    .map((c) => [c.name, schema.composites.get(c.compositeOid!)!.fields.map((f) => f.name)]);
  const typed = r.columns.flatMap((c) => {
    const lit = literalFor(c);
    return lit ? [{ name: c.name, lit }] : [];
  });
  return {
    cols: r.columns.map((c) => c.name),
    computed: [...r.computedFields.keys()],
    composites,
    outJoins: [],
    inJoins: [],
    typed,
  };
}

/** Literals of a type that fits the column, or null. */
function literalFor(c: Column): fc.Arbitrary<Json> | null {
  switch (c.category) {
    case "N":
      return fc.oneof(
        fc.integer({ min: -10, max: 400000 }),
        fc.double({ min: -10, max: 1000, noNaN: true }),
      );
    case "S":
      return fc.string({ maxLength: 3 }).map((s) => [s]);
    case "B":
      return fc.boolean();
    case "D":
      return fc.constantFrom(["2009-01-01"], ["2012-06-30 12:00"]);
    case "E":
      return fc.constantFrom(["sad"], ["ok"], ["happy"]);
    case "A":
      return fc.constantFrom(["arr", ["rock"]], ["{jazz}"]);
  }
  return null;
}

const literal: fc.Arbitrary<Json> = fc.oneof(
  fc.integer(),
  fc.integer({ min: -5, max: 5 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
  fc.string({ maxLength: 6 }).map((s) => [s]),
  fc.constantFrom(["2020-01-01"], ["{a,b}"], ['{"a":1}'], ["rock"], ["%a%"], ["(x,y,)"]),
);
const TYPES = [
  "int",
  "text",
  "numeric",
  "boolean",
  "jsonb",
  "date",
  "timestamptz",
  "text[]",
  "integer[]",
  "varchar(3)",
  "numeric(5,2)",
  "mood",
  "public.mood",
  "tsvector",
];
const BINARY = [
  "=",
  "<>",
  "<",
  "<=",
  ">",
  ">=",
  "is_distinct_from",
  "is_not_distinct_from",
  "like",
  "ilike",
  "not_like",
  "not_ilike",
  "~",
  "~*",
  "@>",
  "<@",
  "&&",
  "->",
  "->>",
  "+",
  "-",
  "*",
  "/",
  "||",
];
const COMPARE = ["=", "<>", "<", "<=", ">", ">=", "like", "ilike", "@>", "&&", "is_distinct_from"];
const AGGS = ["count", "sum", "avg", "min", "max", "bool_and", "bool_or", "array_agg"];

function leaf(scope: Scope): fc.Arbitrary<Json> {
  const options: fc.Arbitrary<Json>[] = [fc.constantFrom(...scope.cols), literal];
  if (scope.computed.length) options.push(fc.constantFrom(...scope.computed));
  for (const j of scope.outJoins) {
    options.push(fc.constantFrom(...j.cols).map((c) => [".", j.key, c]));
  }
  for (const [col, fields] of scope.composites) {
    options.push(fc.constantFrom(...fields).map((f) => [".", col, f]));
  }
  return fc.oneof(...options);
}

function valueExpr(scope: Scope, depth: number): fc.Arbitrary<Json> {
  if (depth <= 0) return leaf(scope);
  const sub = valueExpr(scope, depth - 1);
  const options: fc.Arbitrary<Json>[] = [
    leaf(scope),
    fc.tuple(fc.constantFrom(...BINARY), sub, sub).map(([o, a, b]) => [o, a, b]),
    fc.array(sub, { minLength: 1, maxLength: 3 }).map((xs) => ["arr", ...xs]),
    fc.tuple(sub, fc.constantFrom(...TYPES)).map(([a, t]) => ["cast", a, t]),
    boolExpr(scope, depth - 1),
  ];
  for (const j of scope.inJoins) {
    const inner = valueExpr(j.scope, 0);
    options.push(
      fc.tuple(fc.constantFrom(...AGGS), inner, fc.boolean(), fc.option(boolExpr(j.scope, 0)))
        .map(([fn, e, star, f]) => {
          const target = fn === "count" && star ? [j.key] : [j.key, e];
          return f === null ? ["agg", fn, target] : ["agg", fn, target, f];
        }),
    );
  }
  return fc.oneof(...options);
}

function boolExpr(scope: Scope, depth: number): fc.Arbitrary<Json> {
  const v = leaf(scope);
  const base: fc.Arbitrary<Json>[] = [
    fc.tuple(fc.constantFrom(...COMPARE), v, v).map(([o, a, b]) => [o, a, b]),
    ...(scope.typed.length ? [typedCompare(scope)] : []),
    fc.tuple(fc.constantFrom("is_null", "is_not_null"), v).map(([o, a]) => [o, a]),
    fc.tuple(fc.constantFrom("in", "not_in"), v, fc.array(v, { minLength: 1, maxLength: 3 }))
      .map(([o, a, xs]) => [o, a, ...xs]),
    fc.tuple(v, v, v).map(([l, a, h]) => ["between", l, a, h]),
    fc.tuple(v, fc.string({ maxLength: 8 }), fc.option(fc.constantFrom("english", "simple")))
      .map(([c, q, cfg]) => cfg === null ? ["fts", c, [q]] : ["fts", c, [q], [cfg]]),
  ];
  if (depth <= 0) return fc.oneof(...base);
  const sub = boolExpr(scope, depth - 1);
  const val = valueExpr(scope, depth - 1);
  return fc.oneof(
    ...base,
    fc.tuple(fc.constantFrom(...COMPARE), val, val).map(([o, a, b]) => [o, a, b]),
    fc.tuple(fc.constantFrom("and", "or"), fc.array(sub, { minLength: 1, maxLength: 3 }))
      .map(([o, xs]) => [o, ...xs]),
    sub.map((a) => ["not", a]),
  );
}

/** A comparison of a column with a literal of its type (most of these run without error). */
function typedCompare(scope: Scope): fc.Arbitrary<Json> {
  return fc.constantFrom(...scope.typed).chain((t) =>
    fc.oneof(
      fc.tuple(fc.constantFrom("=", "<>", "<", ">=", "is_distinct_from"), t.lit)
        .map(([op, v]) => [op, t.name, v]),
      fc.array(t.lit, { minLength: 1, maxLength: 3 }).map((vs) => ["in", t.name, ...vs]),
      fc.tuple(t.lit, t.lit).map(([lo, hi]) => ["between", lo, t.name, hi]),
    )
  );
}

function selectArb(scope: Scope, joinKeys: string[]): fc.Arbitrary<Json> {
  const names = [...scope.cols, ...scope.computed, ...joinKeys];
  const expr = valueExpr(scope, 1);
  return fc.oneof(
    fc.constantFrom("own", "full"),
    fc.uniqueArray(fc.constantFrom(...names), { maxLength: 4 }),
    fc.dictionary(
      fc.string({ minLength: 1, maxLength: 5 }),
      fc.oneof(
        expr,
        expr.map((e) => ["get", e]),
        fc.constantFrom(...scope.cols).map((c) => ["set", c]),
        ...(joinKeys.length ? [fc.constantFrom(...joinKeys)] : []),
      ),
      { maxKeys: 4 },
    ),
  );
}

function orderAndDistinct(scope: Scope): fc.Arbitrary<Tree> {
  const term = fc.oneof(
    leaf(scope),
    fc.tuple(fc.constantFrom("asc", "desc"), leaf(scope)).map(([d, e]) => [d, e]),
    fc.tuple(
      fc.constantFrom("asc", "desc"),
      leaf(scope),
      fc.constantFrom("nulls_first", "nulls_last"),
    )
      .map(([d, e, n]) => [d, e, n]),
  );
  return fc.tuple(fc.array(term, { maxLength: 3 }), fc.nat(3), fc.boolean()).map(
    ([order, k, mangle]) => {
      const out: Tree = {};
      if (order.length) out.order_by = order;
      const exprs = order.map((t) =>
        Array.isArray(t) && (t[0] === "asc" || t[0] === "desc") ? t[1] : t
      );
      if (k > 0 && exprs.length) {
        out.distinct_on = mangle ? exprs.slice(0, k).reverse() : exprs.slice(0, k);
      }
      return out;
    },
  );
}

interface FkEdge {
  target: string;
  on: Record<string, string>;
  incoming: boolean;
}

function edges(r: Relation): FkEdge[] {
  return [
    ...r.foreignKeys.map((fk) => ({
      target: fk.references.relation,
      on: Object.fromEntries(fk.references.columns.map((c, i) => [c, fk.columns[i]])),
      incoming: false,
    })),
    ...r.referencedBy.map((fk) => ({
      target: fk.relation,
      on: Object.fromEntries(fk.columns.map((c, i) => [c, fk.references.columns[i]])),
      incoming: true,
    })),
  ];
}

/** A (mostly valid) relation tree rooted at `r`, with joins up to `maxDepth` levels. */
function relationTree(
  r: Relation,
  depth: number,
  base: Tree = { relation: r.name },
): fc.Arbitrary<Tree> {
  const es = edges(r);
  const joinsArb: fc.Arbitrary<[string, FkEdge, Tree][]> = depth >= 2 || es.length === 0
    ? fc.constant([])
    : fc.array(fc.constantFrom(...es), { maxLength: 2 }).chain((list) =>
      list.length === 0 ? fc.constant([]) : fc.tuple(
        ...list.map((e, i) =>
          relationTree(rel(e.target), depth + 1).map((t): [string, FkEdge, Tree] => [
            `j${i}_${e.target}`,
            e,
            { ...t, on: e.on },
          ])
        ),
      )
    );
  return joinsArb.chain((joins) => {
    const scope = baseScope(r);
    for (const [key, e] of joins) {
      if (e.incoming) scope.inJoins.push({ key, scope: baseScope(rel(e.target)) });
      else scope.outJoins.push({ key, cols: rel(e.target).columns.map((c) => c.name) });
    }
    return fc.record({
      where: boolExpr(scope, 2),
      select: selectArb(scope, joins.map(([k]) => k)),
      limit: fc.nat(20),
      offset: fc.nat(3),
      order: orderAndDistinct(scope),
    }, { requiredKeys: [] }).map(({ order, ...rest }) => {
      const tree: Tree = { ...base, ...rest, ...(order ?? {}) };
      if (joins.length) tree.join = Object.fromEntries(joins.map(([k, , t]) => [k, t]));
      return tree;
    });
  });
}

const functionTrees: fc.Arbitrary<Tree> = fc.oneof(
  fc.string({ maxLength: 10 }).chain((q) =>
    relationTree(rel("doc"), 1, { function: "search_docs", arguments: { q: [q] } })
  ),
  fc.integer().chain((n) => {
    const scope: Scope = {
      cols: ["id", "name", "ms"],
      computed: [],
      composites: [],
      outJoins: [],
      inJoins: [],
      typed: [{ name: "ms", lit: fc.integer({ min: 0, max: 2000000 }) }],
    };
    return fc.record({ where: boolExpr(scope, 1), order: orderAndDistinct(scope) }, {
      requiredKeys: [],
    })
      .map(({ where, order }) => ({
        function: "long_tracks",
        arguments: [n],
        where,
        ...(order ?? {}),
      }));
  }),
  fc.constantFrom<Tree>(
    { function: "answer" },
    { function: "pick", arguments: { a: 3 } },
    { function: "pick", arguments: { b: ["x"] } },
    { function: "search_docs", arguments: [["rock"], ["simple"]] },
  ),
);

const validTrees: fc.Arbitrary<Tree> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...RELATIONS).chain((n) => relationTree(rel(n), 0)) },
  { weight: 1, arbitrary: functionTrees },
).map((t) => JSON.parse(JSON.stringify(t)));

/** All paths (arrays of keys) to nodes of a JSON value. */
function paths(
  v: Json,
  at: (string | number)[] = [],
  out: (string | number)[][] = [],
): (string | number)[][] {
  out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...at, i], out));
  else if (v && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) paths(x, [...at, k], out);
  }
  return out;
}

interface Mutation {
  seed: number;
  kind: "replace" | "delete" | "add" | "wrap" | "swap";
  value: Json;
  key: string;
}

const mutation: fc.Arbitrary<Mutation> = fc.record({
  seed: fc.nat(),
  kind: fc.constantFrom("replace", "delete", "add", "wrap", "swap"),
  value: fc.oneof(
    fc.jsonValue({ maxDepth: 2 }),
    fc.constantFrom("own", "full", "name", "artist_id", "nope"),
  ),
  key: fc.oneof(
    fc.string({ maxLength: 5 }),
    fc.constantFrom(
      "where",
      "select",
      "join",
      "on",
      "limit",
      "order_by",
      "distinct_on",
      "__proto__",
      "relation",
    ),
  ),
});

function mutate(tree: Json, m: Mutation): Json {
  const root = structuredClone(tree);
  const all = paths(root);
  const path = all[m.seed % all.length];
  if (path.length === 0) return m.kind === "wrap" ? [root] : m.kind === "replace" ? m.value : root;
  let parent = root as Record<string | number, Json>;
  for (const k of path.slice(0, -1)) parent = parent[k] as Record<string | number, Json>;
  const last = path[path.length - 1];
  const here = parent[last];
  switch (m.kind) {
    case "replace":
      parent[last] = m.value;
      break;
    case "delete":
      if (Array.isArray(parent)) parent.splice(last as number, 1);
      else delete parent[last];
      break;
    case "add":
      if (Array.isArray(here)) here.push(m.value);
      else if (here && typeof here === "object") {
        Object.defineProperty(here, m.key, {
          value: m.value,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      } else parent[last] = [here, m.value];
      break;
    case "wrap":
      parent[last] = [here];
      break;
    case "swap":
      parent[last] = typeof here === "string"
        ? [here]
        : Array.isArray(here) && here.length
        ? here[0]
        : "name";
      break;
  }
  return root;
}

const mutatedTrees: fc.Arbitrary<Json> = fc.tuple(
  validTrees,
  fc.array(mutation, { minLength: 1, maxLength: 3 }),
)
  .map(([t, ms]) => ms.reduce(mutate, t as Json));

const garbage: fc.Arbitrary<Json> = fc.oneof(
  fc.jsonValue(),
  fc.anything(),
  fc.record({
    relation: fc.oneof(fc.constantFrom(...RELATIONS), fc.string()),
    where: fc.jsonValue({ maxDepth: 4 }),
    select: fc.jsonValue({ maxDepth: 3 }),
    join: fc.jsonValue({ maxDepth: 3 }),
    order_by: fc.jsonValue({ maxDepth: 3 }),
    distinct_on: fc.jsonValue({ maxDepth: 3 }),
    limit: fc.jsonValue({ maxDepth: 1 }),
  }, { requiredKeys: ["relation"] }),
);

// ---------------------------------------------------------------------------------------------
// Properties

const PARAMS = { p: {}, n: { cast: "integer" } };

/** Parses and compiles; returns null when the tree is rejected with a SvcError. */
function compile(tree: Json, variant: number): CompiledRead | null {
  const opts: CompileOptions = { count: variant % 2 === 0, params: { p: { a: 1 }, n: 5 } };
  try {
    const node = parseQuery(schema, tree, {
      maxDepth: 1 + (variant % 6),
      params: variant % 3 ? PARAMS : null,
    });
    if (variant % 7 === 0) {
      const key = node.source.kind === "relation" ? node.source.relation.primaryKey : [];
      if (key.length) opts.rootKeys = { columns: key, rows: [key.map(() => 1), key.map(() => 2)] };
    }
    return compileRead(node, opts);
  } catch (e) {
    if (e instanceof SvcError && e.code !== "INTERNAL") return null;
    throw e;
  }
}

function checkStatementShape(c: CompiledRead): void {
  for (const st of [c.rows, ...(c.count ? [c.count] : [])]) {
    // Placeholders outside quoted identifiers (an output key such as "$3" is a column name).
    const text = st.sql.replace(/"(?:[^"]|"")*"/g, '""');
    const max = Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
    assert.equal(max, st.params.length);
    for (const p of st.params) assert.ok(p === null || typeof p === "string");
  }
}

Deno.test("property: parseQuery + compileRead only ever throw SvcError", () => {
  const anyTree = fc.oneof(
    { weight: 2, arbitrary: validTrees as fc.Arbitrary<Json> },
    { weight: 3, arbitrary: mutatedTrees },
    { weight: 1, arbitrary: garbage },
  );
  let compiled = 0;
  fc.assert(
    fc.property(anyTree, fc.nat(1000), (tree, variant) => {
      const c = compile(tree, variant);
      if (c) {
        compiled++;
        checkStatementShape(c);
      }
    }),
    { numRuns: 6000 },
  );
  assert.ok(compiled > 500, `only ${compiled} trees compiled`);
});

/** Runs a compiled read (limited) in a read-only transaction; returns the SQLSTATE or null. */
async function execute(
  c: CompiledRead,
): Promise<{ code: string; message: string; sql: string } | null> {
  const stmts = [
    { sql: `SELECT "q"."j" FROM (${c.rows.sql}) AS "q" LIMIT 3`, params: c.rows.params },
    ...(c.count ? [c.count] : []),
  ];
  for (const st of stmts) {
    try {
      await sql.begin("read only", async (tx) => {
        await tx.unsafe("set local statement_timeout = '1s'");
        const rows = await tx.unsafe(st.sql, st.params as never[]);
        for (const r of rows) if ("j" in r) assert.equal(typeof r.j, "object");
      });
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (typeof code !== "string" || !/^[0-9A-Z]{5}$/.test(code)) throw e;
      if (!acceptable(code, (e as Error).message)) {
        return { code, message: (e as Error).message, sql: st.sql };
      }
    }
  }
  return null;
}

Deno.test("property: every compiled tree runs without syntax or name errors", async () => {
  let ran = 0;
  let succeeded = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.oneof({ weight: 4, arbitrary: validTrees as fc.Arbitrary<Json> }, {
        weight: 1,
        arbitrary: mutatedTrees,
      }),
      fc.nat(1000),
      async (tree, variant) => {
        const c = compile(tree, variant);
        if (!c) return;
        ran++;
        const bad = await execute(c);
        if (bad) throw new Error(`${bad.code} ${bad.message}\n${JSON.stringify(tree)}\n${bad.sql}`);
        succeeded++;
      },
    ),
    { numRuns: 1500 },
  );
  assert.ok(ran > 300, `only ${ran} trees ran`);
  assert.ok(succeeded > 0);
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
