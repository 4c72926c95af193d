/**
 * Parameters of well-known queries: the declared types, the check of a caller's JSON value
 * against them (before any SQL runs), defaults, and the decoding of `params.<name>` values of the
 * GET form (docs/query.md "Well-known queries" and "The GET form", `params.<name>`).
 *
 * @module
 */
import { isExactNumber, parseJsonExact } from "../formats/json.ts";
import type { RelationNode } from "../compile/ast.ts";
import { SvcError } from "../svc_error.ts";

/** A declared parameter of a well-known query. */
export interface ParamDef {
  /** One of {@link PARAM_TYPES}. Checked against the caller's JSON value; never sets the SQL cast. */
  type: string;
  /** True when the definition has no `default`: the caller must supply the param. */
  required: boolean;
  /** Value used when the caller omits the param (`null` = SQL NULL); `undefined` when required. */
  default: unknown;
}

/** A registered (valid, uniquely named, compiled) well-known query. */
export interface WellKnown {
  /** The name callers use: `{wellknown: <name>}` or `?wellknown=<name>`. */
  name: string;
  /** The file that defines it. */
  file: string;
  /** Declared params, in declaration order. */
  params: Record<string, ParamDef>;
  /** The query, compiled once at load; `["$param", …]` references are `{kind: "param"}` exprs. */
  node: RelationNode;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-](\d{2})(?::?(\d{2}))?)?$/i;

/** Whether year/month/day form a real calendar date. */
function validDate(y: number, m: number, d: number): boolean {
  if (m < 1 || m > 12 || d < 1) return false;
  const days = [
    31,
    (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28,
    31,
    30,
    31,
    30,
    31,
    31,
    30,
    31,
    30,
    31,
  ];
  return d <= days[m - 1];
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !isExactNumber(v);
}

/** Whether a number kept as its exact text (src/formats/json.ts) is an integer. */
function exactInteger(v: unknown): boolean {
  return isExactNumber(v) && /^-?\d+$/.test(v.rawJSON);
}

/**
 * Checks of every supported parameter type, by name. `date` is `YYYY-MM-DD`; `timestamp` is an
 * ISO 8601 date and time (`T` or a space between them, optional seconds, fraction and offset);
 * `uuid` is the canonical 8-4-4-4-12 hexadecimal form; `any` accepts every JSON value.
 */
const CHECKS: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === "string",
  integer: (v) => (typeof v === "number" && Number.isInteger(v)) || exactInteger(v),
  number: (v) => (typeof v === "number" && Number.isFinite(v)) || isExactNumber(v),
  boolean: (v) => typeof v === "boolean",
  object: isPlainObject,
  array: (v) => Array.isArray(v),
  uuid: (v) => typeof v === "string" && UUID.test(v),
  date: (v) => {
    const m = typeof v === "string" ? DATE.exec(v) : null;
    return m !== null && validDate(Number(m[1]), Number(m[2]), Number(m[3]));
  },
  timestamp: (v) => {
    const m = typeof v === "string" ? TIMESTAMP.exec(v) : null;
    if (m === null || !validDate(Number(m[1]), Number(m[2]), Number(m[3]))) return false;
    const [h, min, s] = [Number(m[4]), Number(m[5]), Number(m[6] ?? 0)];
    if (h > 23 || min > 59 || s > 60) return false;
    if (m[8] !== undefined && (Number(m[8]) > 23 || Number(m[9] ?? 0) > 59)) return false;
    return true;
  },
  any: () => true,
};

/** Every supported parameter type name. */
export const PARAM_TYPES: readonly string[] = Object.freeze(Object.keys(CHECKS));

/** Whether `type` is a supported parameter type. */
export function isParamType(type: string): boolean {
  return Object.hasOwn(CHECKS, type);
}

/**
 * Whether a JSON value matches a parameter type. `null` matches only `any`; the caller decides
 * whether null is acceptable for a param (see {@link resolveParams}). Unknown types match
 * nothing.
 */
export function matchesType(type: string, value: unknown): boolean {
  if (!isParamType(type)) return false;
  if (value === null) return type === "any";
  return CHECKS[type](value);
}

/** The JSON kind of a value, for error messages: null, boolean, integer, number, string, array, object. */
export function jsonKind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  if (isExactNumber(value)) return exactInteger(value) ? "integer" : "number";
  return typeof value;
}

/**
 * Applies defaults to and type-checks the params a caller supplied for `wk` (an object of
 * name → JSON value; `undefined`/`null` mean none), before any SQL runs. Returns a value for
 * every declared param (null = SQL NULL), ready for `compileRead(wk.node, { params })`.
 *
 * - `supplied` must be an object (or absent: `undefined`/`null` mean no params); anything else,
 *   and names that are not declared, are QUERY_INVALID (`details.params` lists unknown names);
 * - an omitted param without a default is WELL_KNOWN_PARAM_REQUIRED;
 * - a value not matching the declared type is WELL_KNOWN_PARAM_TYPE_MISMATCH with
 *   `details: {param, expected, got}` (`got` is the JSON kind of the value). An explicit `null`
 *   is accepted for a param whose default is `null` (it means SQL NULL) and for type `any`.
 *
 * `pointer` is the JSON pointer of the `{wellknown, params}` object in the request body (default
 * the root); QUERY_INVALID errors point at `<pointer>/params`. Defaults are deep-copied, so
 * callers may mutate the result.
 */
export function resolveParams(
  wk: Pick<WellKnown, "name" | "params">,
  supplied: unknown,
  pointer = "",
): Record<string, unknown> {
  const { name: queryName, params: defs } = wk;
  if (supplied === undefined || supplied === null) supplied = {};
  if (!isPlainObject(supplied)) {
    throw new SvcError(
      "QUERY_INVALID",
      `params of well-known query "${queryName}" must be an object, got ${jsonKind(supplied)}`,
      { details: { pointer: `${pointer}/params` } },
    );
  }
  const unknown = Object.keys(supplied).filter((k) => !Object.hasOwn(defs, k));
  if (unknown.length > 0) {
    const declared = Object.keys(defs);
    throw new SvcError(
      "QUERY_INVALID",
      `unknown param${unknown.length > 1 ? "s" : ""} ${unknown.map((n) => `"${n}"`).join(", ")} ` +
        `for well-known query "${queryName}"`,
      {
        details: { pointer: `${pointer}/params`, params: unknown },
        hint: declared.length > 0
          ? `declared params: ${declared.join(", ")}`
          : `"${queryName}" takes no params`,
      },
    );
  }
  const out: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(defs)) {
    const value = supplied[name];
    if (value === undefined) {
      if (def.required) {
        throw new SvcError(
          "WELL_KNOWN_PARAM_REQUIRED",
          `param "${name}" of well-known query "${queryName}" is required`,
          { details: { param: name, expected: def.type } },
        );
      }
      // An exact number is immutable (and structuredClone would make it a plain object).
      out[name] = isExactNumber(def.default) ? def.default : structuredClone(def.default);
      continue;
    }
    const nullable = def.type === "any" || (!def.required && def.default === null);
    if (value === null ? !nullable : !matchesType(def.type, value)) {
      const got = jsonKind(value);
      throw new SvcError(
        "WELL_KNOWN_PARAM_TYPE_MISMATCH",
        `param "${name}" of well-known query "${queryName}": expected ${def.type}, got ${got}` +
          (got === "string" && typeof value === "string" ? ` ${JSON.stringify(short(value))}` : ""),
        { details: { param: name, expected: def.type, got } },
      );
    }
    out[name] = value;
  }
  return out;
}

function short(s: string): string {
  return s.length > 40 ? `${s.slice(0, 40)}…` : s;
}

/**
 * Decodes the value of a `params.<name>` parameter of the GET form. `raw` is the value after
 * percent-decoding (as `URLSearchParams` yields it); it is re-parsed as JSON when it parses
 * (number, boolean, null, array, object, or a double-quoted string, which thus stays a string:
 * `"123"` gives the string `123`), and is otherwise the plain string. A number too large to be
 * finite (`1e400`) stays the plain string.
 */
export function decodeGetParam(raw: string): unknown {
  let value: unknown;
  try {
    value = parseJsonExact(raw);
  } catch {
    return raw;
  }
  if (typeof value === "number" && !Number.isFinite(value)) return raw;
  return value;
}
