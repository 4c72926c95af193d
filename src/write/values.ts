/**
 * Column values of a write: pre-validation of payload values against the introspected column
 * types (so that obvious mismatches become a QUERY_INVALID naming the column instead of a
 * database error).
 * Pure: no I/O.
 */
import { type ExactNumber, integerOf, isExactNumber } from "../formats/json.ts";
import type { Column } from "../db/schema.ts";
import { invalid } from "../svc_error.ts";

/** A JSON value as found in a write payload. */
export type JsonValue = null | boolean | number | string | JsonValue[] | {
  [key: string]: JsonValue;
};

const INT_RANGE: Record<string, [number, number]> = {
  smallint: [-32768, 32767],
  integer: [-2147483648, 2147483647],
  bigint: [Number.MIN_SAFE_INTEGER * 1024, Number.MAX_SAFE_INTEGER * 1024],
};
const NUMERIC_TEXT = /^\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i;
const INTEGER_TEXT = /^\s*[+-]?\d+\s*$/;
const SPECIAL_FLOAT = /^\s*([+-]?infinity|nan)\s*$/i;

/**
 * Where a value is in the request: its JSON pointer, or what makes it on demand (a function, or an
 * object whose `pointer` is made when read, as a plan row's): only a failed check needs it.
 */
export type PointerOf = string | (() => string) | { readonly pointer: string };

/** Whether `v` is a plain JSON object (not null, not an array). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !isExactNumber(v);
}

/** Whether `v` is made only of JSON values (what `JSON.parse` can produce). */
export function isJson(v: unknown, depth = 0): v is JsonValue {
  if (depth > 512) return false;
  if (v === null || typeof v === "string" || typeof v === "boolean") return true;
  if (isExactNumber(v)) return true;
  if (typeof v === "number") return Number.isFinite(v);
  if (Array.isArray(v)) return v.every((x) => isJson(x, depth + 1));
  if (isObject(v)) return Object.keys(v).every((k) => isJson(v[k], depth + 1));
  return false;
}

/**
 * Checks a payload value for `col` of relation `table` (`schema.name`); throws QUERY_INVALID with
 * `pointer` (made only on failure; followed by `/key` when `key` is given)
 * for an obvious mismatch: a value that is not JSON, null for a NOT NULL column, an
 * object or array for a scalar column, a string that is no number for a numeric column, a
 * fraction or out-of-range number for an integer column, a number for a date/time column.
 * Anything subtler (an unknown enum label, a malformed date, a too-long string) is left to the
 * database, whose 22xxx error the HTTP layer maps to 400.
 */
export function checkValue(
  table: string,
  col: Column,
  v: unknown,
  pointer: PointerOf,
  key?: string,
): void {
  // No closure per call: this runs for every payload value.
  if (!isJson(v)) failed(table, col, v, pointer, key, "a JSON value");
  if (v === null) {
    if (!col.nullable) {
      throw invalid(at(pointer, key), `column "${col.name}" of ${table} cannot be null`);
    }
    return;
  }
  const type = col.type;
  if (type === "json" || type === "jsonb") return;
  if (col.category === "A") {
    if (Array.isArray(v) || typeof v === "string") return;
    failed(table, col, v, pointer, key, "an array");
  }
  if (col.category === "C") {
    if (isObject(v) || typeof v === "string") return;
    failed(table, col, v, pointer, key, "an object");
  }
  if (isExactNumber(v)) return checkExact(table, col, v, pointer, key);
  if (typeof v === "object") failed(table, col, v, pointer, key, "a scalar");
  switch (col.category) {
    case "N": {
      const range = INT_RANGE[type];
      if (typeof v === "number") {
        if (range && (!Number.isInteger(v) || v < range[0] || v > range[1])) {
          failed(table, col, v, pointer, key, `an integer between ${range[0]} and ${range[1]}`);
        }
        return;
      }
      if (typeof v === "string") {
        if (range ? INTEGER_TEXT.test(v) : NUMERIC_TEXT.test(v) || SPECIAL_FLOAT.test(v)) return;
      }
      return failed(table, col, v, pointer, key, range ? "an integer" : "a number");
    }
    case "B":
      if (typeof v === "boolean" || typeof v === "string") return;
      return failed(table, col, v, pointer, key, "a boolean");
    case "D":
    case "T":
    case "E":
      if (typeof v === "string") return;
      return failed(table, col, v, pointer, key, "a string");
    default:
      return;
  }
}

/** Bounds of PostgreSQL's integer types, exactly. */
const INT_BOUNDS: Record<string, [bigint, bigint]> = {
  smallint: [-32768n, 32767n],
  integer: [-2147483648n, 2147483647n],
  bigint: [-9223372036854775808n, 9223372036854775807n],
};

/**
 * checkValue of a number kept as its exact text (src/formats/json.ts): a number for a numeric
 * column (an integer type: an integer in its range, compared exactly), else what a number is.
 */
function checkExact(
  table: string,
  col: Column,
  v: ExactNumber,
  pointer: PointerOf,
  key: string | undefined,
): void {
  const text = v.rawJSON;
  switch (col.category) {
    case "N": {
      const bounds = INT_BOUNDS[col.type];
      if (!bounds) return;
      const n = integerOf(text);
      if (n !== null && n >= bounds[0] && n <= bounds[1]) return;
      return failed(
        table,
        col,
        v,
        pointer,
        key,
        `an integer between ${bounds[0]} and ${bounds[1]}`,
      );
    }
    case "B":
      return failed(table, col, v, pointer, key, "a boolean");
    case "D":
    case "T":
    case "E":
      return failed(table, col, v, pointer, key, "a string");
    default:
      return;
  }
}

/** The pointer of a failed value: `pointer` (or what it returns, or its `pointer`), then `/key` when given. */
function at(pointer: PointerOf, key: string | undefined): string {
  const p = typeof pointer === "string"
    ? pointer
    : typeof pointer === "function"
    ? pointer()
    : pointer.pointer;
  return key === undefined ? p : `${p}/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`;
}

function failed(
  table: string,
  col: Column,
  v: unknown,
  pointer: PointerOf,
  key: string | undefined,
  what: string,
): never {
  throw invalid(
    at(pointer, key),
    `column "${col.name}" of ${table} (${col.type}) expects ${what}, got ${describe(v)}`,
  );
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (isExactNumber(v)) return `the number ${v.rawJSON}`;
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return "an object";
  if (typeof v === "string") {
    return `the string ${JSON.stringify(v.length > 40 ? v.slice(0, 40) + "…" : v)}`;
  }
  if (typeof v === "number") return `the number ${v}`;
  return `${typeof v} ${String(v)}`;
}
