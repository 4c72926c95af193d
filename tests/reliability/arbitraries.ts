/**
 * fast-check generators of hostile requests against the reliability target: query trees (valid,
 * mutated, garbage; POST and batches), GET query strings, write payloads, well-known calls,
 * cookie headers and declared-route calls. The tree generator follows the one of
 * tests/compile/property_test.ts (schema-driven trees, then random mutations), reduced to what
 * an HTTP client can send.
 */
import fc from "fast-check";
import type { Relation, Schema } from "../../src/db/schema.ts";
import type { Req } from "./invariants.ts";

type Json = unknown;

/** Strings that try to break out of an identifier or literal. */
export const NASTY: string[] = [
  `"`,
  `'`,
  `x"; drop table canary; --`,
  `x'); delete from canary; --`,
  `name" from canary --`,
  `/* */`,
  `--`,
  `;`,
  `\u0000`,
  `a\u0000b`,
  `\\`,
  `$1`,
  `$$`,
  `ｃａｎａｒｙ`, // fullwidth look-alike
  `cаnary`, // Cyrillic а
  `canary`,
  `public.canary`,
  `pg_catalog.pg_authid`,
  `\u202e`,
  `e\u0301`,
  `%27`,
  `\r\n`,
  `🦆`,
];

const nasty = fc.constantFrom(...NASTY);
/** A short random or nasty string. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  nasty,
  fc.string({ maxLength: 8 }),
  fc.string({ unit: "binary", maxLength: 8 }),
  fc.tuple(nasty, fc.string({ maxLength: 4 })).map(([a, b]) => a + b),
);

const OPS = [
  "=",
  "<>",
  "<",
  ">=",
  "like",
  "ilike",
  "~",
  "@>",
  "&&",
  "->",
  "->>",
  "+",
  "||",
  "in",
  "between",
  "is_null",
  "fts",
  "cast",
  "agg",
  "and",
  "or",
  "not",
  "arr",
  "get",
  ".",
];
const TYPES = ["int", "text", "numeric", "jsonb", "date", "text[]", "tsvector", "mood", "regclass"];

/** Type modifiers tried on cast targets: valid, out of range, malformed. */
const MODIFIERS = ["(1)", "(5)", "(3,1)", "(0)", "(7)", "(1001)", "(5,6)", "(1,2,3)", "()", "(x)"];

/**
 * Cast targets: a few usual ones, every name in `catalogTypes` (e.g. every pg_catalog type from
 * {@link catalogTypeNames}), and those with a modifier and/or `[]`.
 */
export function castTargets(catalogTypes: string[] = []): fc.Arbitrary<string> {
  const name = fc.constantFrom(...TYPES, ...catalogTypes);
  return fc.oneof(
    { weight: 3, arbitrary: name },
    {
      weight: 2,
      arbitrary: fc.tuple(name, fc.constantFrom(...MODIFIERS), fc.constantFrom("", "[]")).map((
        [n, m, a],
      ) => n + m + a),
    },
    { weight: 1, arbitrary: name.map((n) => `${n}[]`) },
  );
}

/** Generators over one schema; casts draw from `catalogTypes` too. */
export class Arbs {
  readonly rels: Relation[];
  readonly #types: fc.Arbitrary<string>;
  constructor(readonly schema: Schema, catalogTypes: string[] = []) {
    this.rels = [...schema.relations.values()].filter((r) => r.schema === "public");
    this.#types = castTargets(catalogTypes);
  }

  #rel(name: string): Relation | undefined {
    return this.schema.relations.get(`public.${name}`);
  }

  #literal(): fc.Arbitrary<Json> {
    return fc.oneof(
      fc.integer({ min: -5, max: 400000 }),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.boolean(),
      fc.constant(null),
      hostileString.map((s) => [s]),
      fc.constantFrom(["2020-01-01"], ["{a,b}"], ['{"a":1}'], ["rock"], ["%a%"]),
    );
  }

  #expr(cols: string[], depth: number): fc.Arbitrary<Json> {
    const leaf = fc.oneof(fc.constantFrom(...cols), this.#literal());
    if (depth <= 0) return leaf;
    const sub = this.#expr(cols, depth - 1);
    return fc.oneof(
      { weight: 3, arbitrary: leaf },
      {
        weight: 3,
        arbitrary: fc.tuple(fc.constantFrom("=", "<>", "<", ">=", "like", "ilike", "@>"), sub, sub)
          .map(([o, a, b]) => [o, a, b]),
      },
      { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...OPS), sub, sub).map((x) => x) },
      {
        weight: 1,
        arbitrary: fc.tuple(sub, this.#types).map(([a, t]) => ["cast", a, t]),
      },
      {
        weight: 1,
        arbitrary: fc.tuple(fc.constantFrom("and", "or"), fc.array(sub, { maxLength: 3 }))
          .map(([o, xs]) => [o, ...xs]),
      },
      { weight: 1, arbitrary: sub.map((a) => ["is_null", a]) },
    );
  }

  #bool(cols: string[], depth: number): fc.Arbitrary<Json> {
    const v = fc.oneof(fc.constantFrom(...cols), this.#literal());
    const base = fc.oneof(
      fc.tuple(fc.constantFrom("=", "<>", "<", ">=", "like", "ilike", "@>"), v, v)
        .map(([o, a, b]) => [o, a, b]),
      fc.tuple(fc.constantFrom("is_null", "is_not_null"), v).map((x) => x),
      fc.tuple(v, fc.array(v, { minLength: 1, maxLength: 3 })).map(([a, xs]) => ["in", a, ...xs]),
      fc.tuple(v, v, v).map(([a, l, h]) => ["between", l, a, h]),
      fc.tuple(fc.constantFrom(...OPS), this.#expr(cols, 1), this.#expr(cols, 1)).map((x) => x),
    );
    if (depth <= 0) return base;
    const sub = this.#bool(cols, depth - 1);
    return fc.oneof(
      { weight: 3, arbitrary: base },
      {
        weight: 1,
        arbitrary: fc.tuple(fc.constantFrom("and", "or"), fc.array(sub, { maxLength: 3 }))
          .map(([o, xs]) => [o, ...xs]),
      },
      { weight: 1, arbitrary: sub.map((a) => ["not", a]) },
    );
  }

  /** A relation tree rooted at `r` with outgoing/incoming joins up to two levels. */
  tree(r: Relation, depth = 0): fc.Arbitrary<Record<string, Json>> {
    const cols = r.columns.map((c) => c.name);
    const edges = [
      ...r.foreignKeys.map((fk) => ({
        target: fk.references.relation,
        on: Object.fromEntries(fk.references.columns.map((c, i) => [c, fk.columns[i]])),
      })),
      ...r.referencedBy.map((fk) => ({
        target: fk.relation,
        on: Object.fromEntries(fk.columns.map((c, i) => [c, fk.references.columns[i]])),
      })),
    ].filter((e) => this.#rel(e.target));
    const joins = depth >= 2 || edges.length === 0
      ? fc.constant({})
      : fc.array(fc.constantFrom(...edges), { maxLength: 2 }).chain((list) =>
        list.length === 0 ? fc.constant({}) : fc.tuple(
          ...list.map((e, i) =>
            this.tree(this.#rel(e.target)!, depth + 1).map((t) =>
              [`j${i}`, { ...t, on: e.on }] as const
            )
          ),
        ).map((pairs) => Object.fromEntries(pairs))
      );
    return fc.record({
      where: this.#bool(cols, 2),
      select: fc.oneof(
        fc.constantFrom("own", "full"),
        fc.uniqueArray(fc.constantFrom(...cols), { maxLength: 3 }),
        fc.dictionary(hostileString, this.#expr(cols, 1), { maxKeys: 2 }),
      ),
      order_by: fc.array(
        fc.oneof(
          fc.constantFrom(...cols),
          fc.tuple(fc.constantFrom("asc", "desc"), fc.constantFrom(...cols)).map((x) => x),
        ),
        { maxLength: 2 },
      ),
      limit: fc.nat(20),
      offset: fc.nat(3),
      join: joins,
    }, { requiredKeys: [] }).map((t) => ({ relation: r.name, ...t }));
  }

  /** Valid-ish relation trees of any public relation. */
  validTree(): fc.Arbitrary<Record<string, Json>> {
    return fc.constantFrom(...this.rels).chain((r) => this.tree(r));
  }

  /** Valid trees with 1–3 random mutations (replace/delete/add/wrap a node). */
  mutatedTree(): fc.Arbitrary<Json> {
    const mutation = fc.record({
      at: fc.nat(),
      kind: fc.constantFrom("replace", "delete", "add", "wrap"),
      value: fc.oneof(fc.jsonValue({ maxDepth: 2 }), hostileString, fc.constant("canary")),
      key: fc.oneof(
        hostileString,
        fc.constantFrom("where", "select", "join", "on", "relation", "__proto__", "schema"),
      ),
    });
    return fc.tuple(this.validTree(), fc.array(mutation, { minLength: 1, maxLength: 3 })).map(
      ([t, ms]) => ms.reduce((acc: Json, m) => mutate(acc, m), t as Json),
    );
  }

  /** Garbage and mostly-shaped trees. */
  garbageTree(): fc.Arbitrary<Json> {
    return fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record({
        relation: fc.oneof(fc.constantFrom(...this.rels.map((r) => r.name)), hostileString),
        where: fc.jsonValue({ maxDepth: 4 }),
        select: fc.jsonValue({ maxDepth: 3 }),
        join: fc.jsonValue({ maxDepth: 3 }),
        order_by: fc.jsonValue({ maxDepth: 3 }),
      }, { requiredKeys: ["relation"] }),
    );
  }

  /** A POST /svc read: a tree, a ComplexQuery envelope or a batch, anonymous or as app_user. */
  postRead(userCookie: string): fc.Arbitrary<Req> {
    const tree = fc.oneof(
      { weight: 2, arbitrary: this.validTree() as fc.Arbitrary<Json> },
      { weight: 3, arbitrary: this.mutatedTree() },
      { weight: 1, arbitrary: this.garbageTree() },
    );
    const body = fc.oneof(
      { weight: 4, arbitrary: tree },
      {
        weight: 1,
        arbitrary: fc.tuple(tree, fc.boolean(), fc.boolean()).map(([q, count, sql]) => ({
          query: q,
          count,
          sql,
        })),
      },
      { weight: 1, arbitrary: fc.array(tree, { minLength: 1, maxLength: 3 }) },
    );
    return fc.tuple(body, fc.boolean()).map(([b, user]) => ({
      method: "POST",
      path: "/svc",
      headers: { "content-type": "application/json", ...(user ? { cookie: userCookie } : {}) },
      body: JSON.stringify(b),
    }));
  }

  /**
   * A cast of a column, a string or null to any cast target (every pg_catalog type, with
   * modifiers and `[]`), in a select or a comparison, anonymous or as app_user.
   */
  cast(userCookie: string): fc.Arbitrary<Req> {
    const value = (cols: string[]) =>
      fc.oneof(
        fc.constantFrom(...cols),
        hostileString.map((s) => [s]),
        fc.constantFrom(["1"], ["{1,2}"], ["(1,x)"], ["2020-01-01"], ["a & b"], ["$.a"], null),
      );
    return fc.constantFrom(...this.rels).chain((r) => {
      const cols = r.columns.map((c) => c.name);
      return fc.tuple(value(cols), this.#types, fc.boolean(), fc.boolean()).map((
        [v, t, inWhere, user],
      ) => ({
        method: "POST",
        path: "/svc",
        headers: { "content-type": "application/json", ...(user ? { cookie: userCookie } : {}) },
        body: JSON.stringify({
          relation: r.name,
          ...(inWhere
            ? { where: ["=", cols[0], ["cast", v, t]] }
            : { select: { v: ["cast", v, t] } }),
          limit: 2,
        }),
      }));
    });
  }

  /** GET /svc with a random query string (known keys, hostile values, random keys). */
  getQuery(): fc.Arbitrary<Req> {
    const names = this.rels.map((r) => r.name);
    const cols = [...new Set(this.rels.flatMap((r) => r.columns.map((c) => c.name)))];
    const value = fc.oneof(
      hostileString,
      fc.constantFrom(...names, ...cols),
      fc.constantFrom(...cols).map((c) => `eq(${c},1)`),
      fc.tuple(fc.constantFrom("eq", "like", "in", "fts", "and", "gt", "nope"), hostileString)
        .map(([f, s]) => `${f}(${s})`),
      fc.integer().map(String),
    );
    const key = fc.oneof(
      fc.constantFrom(
        "relation",
        "select",
        "where",
        "order_by",
        "limit",
        "offset",
        "distinct_on",
        "schema",
        "function",
        "join.a.relation",
        "join.a.on.artist_id",
        "join.a.select",
        "arguments.q",
        "alias",
      ),
      hostileString,
    );
    const junk = fc.tuple(
      fc.constantFrom(...names),
      fc.array(fc.tuple(key, value), { maxLength: 5 }),
    ).map(([rel, pairs]) => {
      const qs = new URLSearchParams([["relation", rel]]);
      for (const [k, v] of pairs) if (k !== "relation") qs.append(k, v);
      return { method: "GET", path: `/svc?${qs}` };
    });
    // Mostly valid strings over one relation's own columns, so that what svc compiles from a
    // query string reaches PostgreSQL (where, order_by, select, limit, offset, distinct_on).
    const fitting = fc.constantFrom(...this.rels.filter((r) => r.columns.length > 0)).chain((r) => {
      const col = fc.constantFrom(...r.columns.map((c) => c.name));
      const lit = fc.oneof(
        fc.integer({ min: -3, max: 5000 }).map(String),
        fc.constantFrom("null", "true", "'rock'", "'%a%'", "'2020-01-01'", "1.5"),
        hostileString.map((h) => `'${h.replaceAll("'", "''")}'`),
      );
      const cond: fc.Arbitrary<string> = fc.oneof(
        fc.tuple(fc.constantFrom("eq", "neq", "lt", "lte", "gt", "gte", "like", "ilike"), col, lit)
          .map(([f, c, v]) => `${f}(${c},${v})`),
        fc.tuple(
          fc.constantFrom("in", "not_in"),
          col,
          fc.array(lit, { minLength: 1, maxLength: 3 }),
        )
          .map(([f, c, vs]) => `${f}(${c},${vs.join(",")})`),
        fc.tuple(fc.constantFrom("is_null", "is_not_null"), col).map(([f, c]) => `${f}(${c})`),
        fc.tuple(col, lit, lit).map(([c, a, b]) => `between(${c},${a},${b})`),
      );
      const where = fc.oneof(
        cond,
        fc.tuple(fc.constantFrom("and", "or"), cond, cond).map(([f, a, b]) => `${f}(${a},${b})`),
        cond.map((c) => `not(${c})`),
      );
      const order = fc.tuple(
        fc.constantFrom("", "-"),
        col,
        fc.constantFrom("", ".asc", ".desc", ".nullsfirst", ".desc.nullslast"),
      ).map(([m, c, sfx]) => `${m}${c}${sfx}`);
      return fc.record({
        select: fc.option(fc.uniqueArray(col, { minLength: 1, maxLength: 3 }), { nil: undefined }),
        where: fc.option(where, { nil: undefined }),
        order_by: fc.option(fc.array(order, { minLength: 1, maxLength: 2 }), { nil: undefined }),
        limit: fc.option(fc.integer({ min: 0, max: 50 }), { nil: undefined }),
        offset: fc.option(fc.integer({ min: 0, max: 5 }), { nil: undefined }),
      }).map((q) => {
        const qs = new URLSearchParams([["relation", r.name]]);
        if (q.select) qs.set("select", q.select.join(","));
        if (q.where) qs.set("where", q.where);
        if (q.order_by) qs.set("order_by", q.order_by.join(","));
        if (q.limit !== undefined) qs.set("limit", String(q.limit));
        if (q.offset !== undefined) qs.set("offset", String(q.offset));
        return { method: "GET", path: `/svc?${qs}` };
      });
    });
    return fc.oneof(junk, fitting);
  }

  /** Write payloads (nested rows from the schema's columns plus junk), as app_user. */
  write(userCookie: string): fc.Arbitrary<Req> {
    const writable = this.rels.filter((r) => r.insertable);
    const row = (r: Relation) =>
      fc.dictionary(
        fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...r.columns.map((c) => c.name)) },
          { weight: 1, arbitrary: hostileString },
        ),
        fc.oneof(fc.jsonValue({ maxDepth: 1 }), hostileString),
        { maxKeys: 5 },
      );
    // Rows that mostly fit: a hostile string in a text column of a simple table.
    const named = writable.filter((r) =>
      r.columnMap.get("name")?.category === "S" &&
      r.columns.every((c) => c.name === "name" || c.hasDefault || c.nullable)
    );
    const fitting = (r: Relation) =>
      named.includes(r)
        ? fc.record({ name: hostileString.map((s) => s.replaceAll("\u0000", "")) })
        : row(r);
    return fc.constantFrom(...writable).chain((r) =>
      fc.tuple(
        fc.oneof(
          { weight: 3, arbitrary: fc.constant({ relation: r.name }) },
          { weight: 1, arbitrary: this.tree(r, 1) },
          { weight: 1, arbitrary: this.mutatedTree() },
        ),
        fc.array(fc.oneof(row(r), fitting(r)), { minLength: 1, maxLength: 3 }),
        fc.constantFrom(undefined, undefined, "insert", "merge", "merge-new", "upsert", "x'"),
        fc.boolean(),
        fc.boolean(),
      ).map(([query, data, mode, stats, batch]) => {
        const q = query && typeof query === "object" && !Array.isArray(query)
          ? { ...query, ...(mode ? { write_mode: mode } : {}) }
          : query;
        return {
          method: "POST",
          path: "/svc",
          headers: { "content-type": "application/json", cookie: userCookie },
          body: JSON.stringify(batch ? [{ query: q, data, stats }] : { query: q, data, stats }),
        };
      })
    );
  }

  /** Well-known calls by POST and GET with random or hostile parameters. */
  wellknown(names: string[]): fc.Arbitrary<Req> {
    const name = fc.oneof(fc.constantFrom(...names), hostileString);
    const params = fc.dictionary(
      fc.oneof(fc.constantFrom("artist_id", "genre", "customer_id", "limit"), hostileString),
      fc.oneof(fc.jsonValue({ maxDepth: 2 }), hostileString),
      { maxKeys: 3 },
    );
    return fc.tuple(name, params, fc.boolean()).map(([n, p, get]) => {
      if (get) {
        const qs = new URLSearchParams([["wellknown", n]]);
        for (const [k, v] of Object.entries(p)) {
          qs.append(`params.${k}`, typeof v === "string" ? v : JSON.stringify(v));
        }
        return { method: "GET", path: `/svc?${qs}` };
      }
      return {
        method: "POST",
        path: "/svc",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ wellknown: n, params: p }),
      };
    });
  }
}

/** Cookie headers: valid, tampered, duplicated, huge, random. */
export function cookieHeader(validToken: string): fc.Arbitrary<Req> {
  const tampered = fc.tuple(
    fc.nat(validToken.length - 1),
    fc.string({ minLength: 1, maxLength: 1 }),
  ).map(([i, c]) => validToken.slice(0, i) + c + validToken.slice(i + 1));
  const value = fc.oneof(
    fc.constant(validToken),
    tampered,
    hostileString,
    fc.string({ maxLength: 200 }),
    fc.nat(6000).map((n) => "a".repeat(n)),
    fc.constantFrom(`"${validToken}"`, `${validToken};`, `${validToken}.x`, "e30.e30.", "..."),
  );
  const pair = fc.oneof(
    value.map((v) => `accesstoken=${v}`),
    fc.tuple(hostileString, value).map(([k, v]) => `${k}=${v}`),
    hostileString,
  );
  return fc.tuple(fc.array(pair, { minLength: 1, maxLength: 4 }), fc.constantFrom("; ", ";", ","))
    .map(([pairs, sep]) => ({
      method: "GET",
      path: "/svc?relation=genre&limit=2",
      headers: { cookie: stripControls(pairs.join(sep)) },
    }))
    .filter((r) => isHeaderValue(r.headers.cookie));
}

/** `s` without C0 control characters and DEL (fetch refuses them in header values). */
export function stripControls(s: string): string {
  return [...s].filter((c) => c.charCodeAt(0) > 0x1f && c !== "\u007f").join("");
}

/** Whether fetch will accept `v` as a header value. */
export function isHeaderValue(v: string): boolean {
  try {
    new Headers({ x: v });
    return true;
  } catch {
    return false;
  }
}

const ROUTES = [
  { method: "GET", path: (p: string) => `/add/${p}` },
  { method: "POST", path: (p: string) => `/items/${p}` },
  { method: "GET", path: () => `/series` },
  { method: "GET", path: (p: string) => `/pairs/${p}` },
  { method: "GET", path: (p: string) => `/echo/${p}` },
  { method: "POST", path: (p: string) => `/echo/${p}` },
  { method: "PUT", path: (p: string) => `/echo/${p}` },
  { method: "GET", path: () => `/shape` },
  { method: "POST", path: () => `/nothing` },
  { method: "GET", path: () => `/private/hit` },
  { method: "DELETE", path: (p: string) => `/add/${p}` },
  { method: "GET", path: (p: string) => `/${p}` },
];

/** Calls of the declared routes with hostile path params, query strings, headers and bodies. */
export function routeCall(userCookie: string): fc.Arbitrary<Req> {
  const qsKey = fc.oneof(
    fc.constantFrom("a", "b", "n", "name", "tags", "kind", "q"),
    hostileString,
  );
  const qsValue = fc.oneof(
    hostileString,
    fc.integer({ min: -5, max: 1000 }).map(String),
    fc.constantFrom("text", "x", "2147483648"),
  );
  const body = fc.oneof(
    fc.constant(undefined),
    fc.dictionary(
      fc.oneof(fc.constantFrom("name", "tags", "data", "at", "b", "n"), hostileString),
      fc.oneof(fc.jsonValue({ maxDepth: 2 }), hostileString),
      { maxKeys: 4 },
    ).map((o) => JSON.stringify(o)),
    fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v)),
    hostileString,
  );
  return fc.tuple(
    fc.constantFrom(...ROUTES),
    fc.oneof(hostileString, fc.integer({ min: -5, max: 1000 }).map(String), fc.constant("1e9")),
    fc.array(fc.tuple(qsKey, qsValue), { maxLength: 3 }),
    body,
    fc.constantFrom("application/json", "text/plain", "application/x-www-form-urlencoded"),
    fc.boolean(),
    fc.option(hostileString),
  ).map(([route, p, qs, b, ct, user, hdr]) => {
    const headers: Record<string, string> = { "content-type": ct };
    if (user) headers.cookie = userCookie;
    const clean = stripControls(hdr ?? "");
    if (clean && isHeaderValue(clean)) headers["x-fuzz"] = clean;
    const query = qs.length ? `?${new URLSearchParams(qs)}` : "";
    return {
      method: route.method,
      path: route.path(encodeURIComponent(p)) + query,
      headers,
      body: route.method === "GET" ? undefined : b,
    };
  });
}

/** All paths to nodes of a JSON value. */
function paths(v: Json, at: (string | number)[] = [], out: (string | number)[][] = []) {
  out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...at, i], out));
  else if (v && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) paths(x, [...at, k], out);
  }
  return out;
}

function mutate(
  tree: Json,
  m: { at: number; kind: string; value: Json; key: string },
): Json {
  const root = structuredClone(tree);
  const all = paths(root);
  const path = all[m.at % all.length];
  if (path.length === 0) return m.kind === "replace" ? m.value : m.kind === "wrap" ? [root] : root;
  let parent = root as Record<string | number, Json>;
  for (const k of path.slice(0, -1)) parent = parent[k] as Record<string | number, Json>;
  const last = path[path.length - 1];
  const here = parent[last];
  if (m.kind === "replace") parent[last] = m.value;
  else if (m.kind === "delete") {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last];
  } else if (m.kind === "wrap") parent[last] = [here];
  else if (Array.isArray(here)) here.push(m.value);
  else if (here && typeof here === "object") {
    Object.defineProperty(here, m.key, {
      value: m.value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else parent[last] = [here, m.value];
  return root;
}
