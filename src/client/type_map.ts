/**
 * PostgreSQL → TypeScript type mapping for the generated client. Result types follow what
 * PostgreSQL's JSON functions emit (numbers for every numeric type, strings for dates, money and
 * text, JSON values for json/jsonb); write types also accept strings for bigint and numeric so
 * that exact values can be sent.
 */
import type { Column, Schema } from "../db/schema.ts";

const NUMBER = new Set([
  "smallint",
  "integer",
  "int",
  "int2",
  "int4",
  "real",
  "double precision",
  "float4",
  "float8",
  "oid",
]);
const EXACT = new Set(["bigint", "int8", "numeric", "decimal"]);
const BOOLEAN = new Set(["boolean", "bool"]);
const JSON_TYPES = new Set(["json", "jsonb"]);

/** Strips a type modifier and quotes: `character varying(160)` → `character varying`. */
function baseName(type: string): string {
  return type.replace(/\(.*\)/, "").replaceAll('"', "").trim();
}

/** A string literal in TypeScript source. */
export function lit(s: string): string {
  return JSON.stringify(s);
}

/** Whether a name can be written as a bare property key. */
function bareKey(s: string): boolean {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(s);
}

/** A property key in TypeScript source. */
export function key(s: string): string {
  return bareKey(s) ? s : lit(s);
}

/**
 * The TypeScript type of a PostgreSQL type (without nullability). `write` widens bigint and
 * numeric to `number | string`.
 */
export function tsType(
  schema: Schema,
  type: string,
  write = false,
  compositeOid: number | null = null,
  depth = 0,
): string {
  if (type.endsWith("[]")) {
    const el = tsType(schema, type.slice(0, -2), write, null, depth);
    return `(${el})[]`;
  }
  const b = baseName(type);
  if (NUMBER.has(b)) return "number";
  if (EXACT.has(b)) return write ? "number | string" : "number";
  if (BOOLEAN.has(b)) return "boolean";
  if (JSON_TYPES.has(b)) return "Json";
  const en = schema.enums.find((e) => b === `${e.schema}.${e.name}` || b === e.name);
  if (en) return en.labels.map(lit).join(" | ") || "never";
  const comp = compositeOf(schema, b, compositeOid);
  if (comp && depth < 4) {
    const fields = comp.fields.map((f) =>
      `${key(f.name)}: ${columnType(schema, f, write, depth + 1)}`
    );
    return `{ ${fields.join("; ")} }`;
  }
  if (comp || b === "record") return "{ [key: string]: Json }";
  if (b === "void") return "null";
  return "string";
}

/**
 * How the generated client sends a function argument of a PostgreSQL type so that `/svc` reads it
 * as a value, never as a name (docs/query.md "Expressions"; META of the generated file):
 * - `0`: a string as a string literal `["…"]`, a finite number or a boolean as it is;
 * - `"j"` (json, jsonb): the value's JSON text as a string literal;
 * - `["a", e]` (an array type): a PostgreSQL array literal of its elements sent as `e`;
 * - `["c", [[field, e], …]]` (a composite type): a record literal of its fields in their order.
 *
 * The server binds a function argument's literal as the argument's declared type, so each text is
 * read by that type's input function.
 */
export type ArgEncoding = 0 | "j" | ["a", ArgEncoding] | ["c", [string, ArgEncoding][]];

/** The {@link ArgEncoding} of a PostgreSQL type, following {@link tsType}'s reading of it. */
export function argEncoding(
  schema: Schema,
  type: string,
  compositeOid: number | null = null,
  depth = 0,
): ArgEncoding {
  if (type.endsWith("[]")) return ["a", argEncoding(schema, type.slice(0, -2), null, depth)];
  const b = baseName(type);
  if (JSON_TYPES.has(b)) return "j";
  const comp = compositeOf(schema, b, compositeOid);
  if (comp && depth < 8) {
    return [
      "c",
      comp.fields.map((f) => [f.name, argEncoding(schema, f.type, f.compositeOid, depth + 1)]),
    ];
  }
  return 0;
}

/** The composite type a type name (or OID) names, as {@link tsType} finds it. */
function compositeOf(schema: Schema, b: string, compositeOid: number | null) {
  const short = b.includes(".") ? b.slice(b.lastIndexOf(".") + 1) : b;
  return compositeOid !== null
    ? schema.composites.get(compositeOid)
    : [...schema.composites.values()].find((c) =>
      b === `${c.schema}.${c.name}` || (c.name === short && !b.includes("."))
    );
}

/** The type of a column's value, `| null` when nullable. */
export function columnType(schema: Schema, c: Column, write = false, depth = 0): string {
  const t = tsType(schema, c.type, write, c.compositeOid, depth);
  return c.nullable ? `${t} | null` : t;
}
