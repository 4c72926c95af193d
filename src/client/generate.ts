/**
 * GET /svc/database.ts: generates the TypeScript client from the Schema model (as a role sees
 * it) and the well-known registry. Deterministic: names are sorted, the header names the svc
 * version and a hash of the schema-derived part, so the same schema gives the same bytes.
 */
import type { Expr, RelationNode } from "../compile/ast.ts";
import type { Column, ForeignKey, Func, Relation, Schema } from "../db/schema.ts";
import { qualified } from "../db/schema.ts";
import type { ParamDef } from "../wellknown/registry.ts";
import { wellKnownUsable } from "../wellknown/usable.ts";
import { View, type Visible } from "./visible.ts";
import { CLIENT_SOURCE } from "./client_source.ts";
import { argEncoding, columnType, key, lit, tsType } from "./type_map.ts";
import denoJson from "../../deno.json" with { type: "json" };

/** A well-known query as the generator needs it. */
export interface WellKnownDef {
  name: string;
  params: Record<string, ParamDef>;
  node: RelationNode;
}

/** What to generate for. */
export interface GenerateOptions {
  /**
   * What the role the file is for may use, asked of PostgreSQL (./visible.ts): the same view as
   * database.json's; null = everything.
   */
  visible: Visible | null;
  /** Schemas to include; null = every schema. */
  schemas: string[] | null;
  /**
   * Functions `/svc` refuses as a query root (src/query/envelope_functions.ts): not described in
   * `Functions`, so `func()` offers only what the server calls. None when absent.
   */
  hidden?: ReadonlySet<number>;
}

/** The generated file and its hash (used as ETag). */
export interface Generated {
  text: string;
  hash: string;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Key of a relation in the generated file: bare name in `public`, else `schema.name`. */
function relKey(schema: string, name: string): string {
  return schema === "public" ? name : `${schema}.${name}`;
}

interface JoinDef {
  alias: string;
  target: string;
  card: "many" | "one" | "maybe";
  fk: string[];
  on: Record<string, string>;
}

/**
 * Joins offered from a relation: one per foreign key to or from a relation of the file that the
 * view shows (both relations and all its columns).
 */
function joinsOf(view: View, r: Relation, visible: Map<string, Relation>): JoinDef[] {
  const out: (JoinDef & { base: string; dir: string })[] = [];
  const vis = (s: string, n: string) => visible.get(`${s}.${n}`);
  for (const fk of view.foreignKeys(r)) {
    const t = vis(fk.references.schema, fk.references.relation);
    if (!t) continue;
    const nullable = fk.columns.some((c) => r.columnMap.get(c)?.nullable ?? true);
    out.push({
      alias: "",
      base: t.name,
      dir: "via",
      target: relKey(t.schema, t.name),
      card: nullable ? "maybe" : "one",
      fk: fk.columns,
      on: Object.fromEntries(fk.references.columns.map((c, i) => [c, fk.columns[i]])),
    });
  }
  for (const fk of view.referencedBy(r)) {
    const c = vis(fk.schema, fk.relation);
    if (!c) continue;
    out.push({
      alias: "",
      base: c.name,
      dir: "by",
      target: relKey(c.schema, c.name),
      card: "many",
      fk: fk.columns,
      on: onIncoming(fk),
    });
  }
  const counts = new Map<string, number>();
  for (const j of out) counts.set(j.base, (counts.get(j.base) ?? 0) + 1);
  for (const j of out) {
    j.alias = counts.get(j.base)! > 1 ? `${j.base}_${j.dir}_${j.fk.join("_")}` : j.base;
  }
  return out.sort((a, b) => cmp(a.alias, b.alias));
}

function onIncoming(fk: ForeignKey): Record<string, string> {
  return Object.fromEntries(fk.columns.map((c, i) => [c, fk.references.columns[i]]));
}

function union(names: string[]): string {
  return names.length ? names.map(lit).join(" | ") : "never";
}

/** The entry type (row, write row, mandatory, computed fields, joins) of a column set. */
function entry(
  schema: Schema,
  columns: Column[],
  computed: { name: string; type: string; set: boolean }[],
  joins: JoinDef[],
  indent: string,
): string {
  const i2 = indent + "  ";
  const doc = (c: Column) => c.comment ? `/** ${c.comment.replaceAll("*/", "* /")} */ ` : "";
  const row = columns.map((c) => `${i2}  ${doc(c)}${key(c.name)}: ${columnType(schema, c)};`);
  const writable = columns.filter((c) => !c.generated);
  const w = writable.map((c) => `${i2}  ${key(c.name)}: ${columnType(schema, c, true)};`);
  const req = writable.filter((c) => c.mandatory).map((c) => c.name);
  const cf = [...computed].sort((a, b) => cmp(a.name, b.name)).map((f) => {
    const t = tsType(schema, f.type);
    return `${i2}  ${key(f.name)}: ${f.set ? `(${t})[]` : `${t} | null`};`;
  });
  const j = joins.map((d) =>
    `${i2}  ${key(d.alias)}: { t: ${lit(d.target)}; c: ${lit(d.card)}; f: ${union(d.fk)} };`
  );
  const block = (name: string, lines: string[]) =>
    lines.length ? `${i2}${name}: {\n${lines.join("\n")}\n${i2}};` : `${i2}${name}: {};`;
  return [
    "{",
    block("row", row),
    block("w", w),
    `${i2}req: ${union(req)};`,
    block("cf", cf),
    block("j", j),
    `${indent}}`,
  ].join("\n");
}

/** The TypeScript type of a resolved expression (for well-known result types). */
function exprType(schema: Schema, e: Expr): string {
  switch (e.kind) {
    case "column":
      return columnType(schema, e.column);
    case "computed":
      return e.set ? `(${tsType(schema, e.type)})[]` : `${tsType(schema, e.type)} | null`;
    case "joined":
      return `${tsType(schema, e.column.type, false, e.column.compositeOid)} | null`;
    case "literal":
      return e.value === null ? "null" : typeof e.value;
    case "agg":
      if (e.fn === "count") return "number";
      if (e.fn === "bool_and" || e.fn === "bool_or") return "boolean | null";
      if (e.fn === "sum" || e.fn === "avg") return "number | null";
      if (e.expr && e.fn !== "array_agg") return `${exprType(schema, e.expr)} | null`;
      return "Json";
    case "op":
      if (["+", "-", "*", "/"].includes(e.op)) return "number | null";
      if (e.op === "||") return "string | null";
      if (e.op === "->>") return "string | null";
      if (e.op === "->" || e.op === "arr") return "Json";
      return "boolean | null";
    default:
      return "Json";
  }
}

/** The result row type of a compiled query node. */
function nodeType(schema: Schema, node: RelationNode, indent: string): string {
  const lines = node.select.filter((s) => s.mode !== "set").map((s) => {
    let t: string;
    if (s.value.kind === "join") {
      const j = s.value.join;
      const inner = nodeType(schema, j.node, indent + "  ");
      t = j.direction === "incoming" ? `(${inner})[]` : j.nullable ? `${inner} | null` : inner;
    } else {
      t = exprType(schema, s.value.expr);
    }
    return `${indent}  ${key(s.name)}: ${t};`;
  });
  return lines.length ? `{\n${lines.join("\n")}\n${indent}}` : "{}";
}

const PARAM_TYPES: Record<string, string> = {
  string: "string",
  integer: "number",
  number: "number",
  boolean: "boolean",
  object: "{ [key: string]: Json }",
  array: "Json[]",
  uuid: "string",
  date: "string",
  timestamp: "string",
  any: "Json",
};

function paramsType(params: Record<string, ParamDef>): string {
  const names = Object.keys(params).sort(cmp);
  const parts = names.map((n) => {
    const p = params[n];
    let t = PARAM_TYPES[p.type] ?? "Json";
    if (!p.required && p.default === null && p.type !== "any") t += " | null";
    return `${key(n)}${p.required ? "" : "?"}: ${t}`;
  });
  return parts.length ? `{ ${parts.join("; ")} }` : "{}";
}

/**
 * The columns of a function's rows, as the compiler sees them (of a relation's rows, those the
 * view shows); null when not queryable.
 */
function functionColumns(view: View, f: Func): Column[] | null {
  const rel = f.returns.relation &&
    view.schema.relations.get(qualified(f.returns.relation.schema, f.returns.relation.name));
  if (rel) return view.columns(rel);
  if (f.returns.columns) return f.returns.columns;
  const t = f.returns.type;
  if (t === "void" || t === "trigger" || t === "record" || t.startsWith("any")) return null;
  return [{
    name: f.name,
    type: t,
    typeOid: f.returns.typeOid,
    category: "",
    elementType: null,
    compositeOid: null,
    nullable: true,
    hasDefault: false,
    identity: null,
    generated: false,
    mandatory: false,
    comment: null,
  }];
}

/** Generates database.ts for a role and schema selection. */
export async function generateClient(
  schema: Schema,
  wellknown: WellKnownDef[],
  opts: GenerateOptions,
): Promise<Generated> {
  const inSchemas = (s: string) =>
    s !== "pg_catalog" && (opts.schemas === null || opts.schemas.includes(s));
  const view = new View(schema, opts.visible, opts.hidden);
  const visible = new Map<string, Relation>();
  for (const [k, r] of schema.relations) {
    if (!inSchemas(r.schema) || !view.relation(r)) continue;
    visible.set(k, r);
  }
  const rels = [...visible.values()].sort((a, b) =>
    cmp(relKey(a.schema, a.name), relKey(b.schema, b.name))
  );
  const out: string[] = [];
  const meta: string[] = [];
  out.push("/** Relations (tables, views) by name; other schemas as `schema.name`. */");
  out.push("export interface Relations {");
  for (const r of rels) {
    const k = relKey(r.schema, r.name);
    const joins = joinsOf(view, r, visible);
    const cf = view.computedFields(r);
    const doc = r.comment ? `  /** ${r.comment.replaceAll("*/", "* /")} */\n` : "";
    out.push(`${doc}  ${lit(k)}: ${entry(schema, view.columns(r), cf, joins, "  ")};`);
    const js = joins.map((j) => `${lit(j.alias)}: [${lit(j.target)}, ${JSON.stringify(j.on)}]`);
    meta.push(`    ${lit(k)}: [${lit(r.schema)}, ${lit(r.name)}, { ${js.join(", ")} }],`);
  }
  out.push("}", "");

  const fmeta: string[] = [];
  out.push("/** Functions whose rows can be read, by name; other schemas as `schema.name`. */");
  out.push("export interface Functions {");
  const fns = [...schema.functions.values()].flat()
    .filter((f) => inSchemas(f.schema))
    .filter((f) => view.queryable(f))
    .sort((a, b) => cmp(relKey(a.schema, a.name), relKey(b.schema, b.name)));
  const seen = new Set<string>();
  for (const f of fns) {
    const k = relKey(f.schema, f.name);
    if (seen.has(k)) continue; // overloads: the first (sorted) one is typed
    const cols = functionColumns(view, f);
    if (!cols) continue;
    seen.add(k);
    const args = f.inArgs.filter((a) => a.name).map((a) =>
      `${key(a.name!)}${a.hasDefault ? "?" : ""}: ${tsType(schema, a.type, true)} | null`
    );
    const relRef = f.returns.relation;
    const rk = relRef && visible.has(`${relRef.schema}.${relRef.name}`)
      ? relKey(relRef.schema, relRef.name)
      : null;
    const e = rk ? `Relations[${lit(rk)}]` : entry(schema, cols, [], [], "    ");
    out.push(`  ${lit(k)}: {\n    args: { ${args.join("; ")} };\n    e: ${e};\n  };`);
    // How each argument is sent, when not as it is (strings as literals): see ArgEncoding.
    const enc = f.inArgs.flatMap((a) => {
      const how = a.name ? argEncoding(schema, a.type) : 0;
      return how === 0 ? [] : [`${lit(a.name!)}: ${JSON.stringify(how)}`];
    });
    fmeta.push(
      `    ${lit(k)}: [${lit(f.schema)}, ${lit(f.name)}, ${rk === null ? "null" : lit(rk)}${
        enc.length ? `, { ${enc.join(", ")} }` : ""
      }],`,
    );
  }
  out.push("}", "");

  out.push("/** Well-known queries: parameters and result rows. */");
  out.push("export interface WellKnowns {");
  // Only what the role may run: one over relations it cannot read would describe their columns.
  const runnable = wellknown.filter((w) => wellKnownUsable(schema, w.node, view));
  for (const w of runnable.sort((a, b) => cmp(a.name, b.name))) {
    out.push(
      `  ${lit(w.name)}: {\n    params: ${paramsType(w.params)};\n    row: ${
        nodeType(schema, w.node, "    ")
      };\n  };`,
    );
  }
  out.push("}", "");
  out.push("const META: Meta = {", "  r: {", ...meta, "  },", "  f: {", ...fmeta, "  },", "};");
  const derived = out.join("\n") + "\n";
  const hash = await sha256(CLIENT_SOURCE + derived);
  const header = [
    `// database.ts generated by svc ${denoJson.version}; schema ${hash.slice(0, 16)}.`,
    "// Do not edit: fetch it again from GET /svc/database.ts after a schema change.",
    "// deno-lint-ignore-file",
    "// deno-fmt-ignore-file",
    "/* eslint-disable */",
  ].join("\n");
  return { text: `${header}\n${CLIENT_SOURCE}\n${derived}`, hash };
}

async function sha256(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
