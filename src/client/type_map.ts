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
  const short = b.includes(".") ? b.slice(b.lastIndexOf(".") + 1) : b;
  const en = schema.enums.find((e) => b === `${e.schema}.${e.name}` || b === e.name);
  if (en) return en.labels.map(lit).join(" | ") || "never";
  const comp = compositeOid !== null
    ? schema.composites.get(compositeOid)
    : [...schema.composites.values()].find((c) =>
      b === `${c.schema}.${c.name}` || (c.name === short && !b.includes("."))
    );
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

/** The type of a column's value, `| null` when nullable. */
export function columnType(schema: Schema, c: Column, write = false, depth = 0): string {
  const t = tsType(schema, c.type, write, c.compositeOid, depth);
  return c.nullable ? `${t} | null` : t;
}
