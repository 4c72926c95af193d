/**
 * JSON text parsed without losing a number: a number whose value a double cannot hold (an id
 * beyond 2^53, a numeric with more than ~16 significant digits) is kept as its exact text, a raw
 * JSON value (`JSON.rawJSON`), instead of becoming a nearby double — svc binds every value as
 * text, so `9007199254740993` reaches PostgreSQL as written (docs/endpoint.md, "Numbers"), and
 * `JSON.stringify` writes it back verbatim. Every other value is what `JSON.parse` gives.
 *
 * @module
 */

/** A number kept as its exact JSON text (a frozen `JSON.rawJSON` object). */
export interface ExactNumber {
  readonly rawJSON: string;
}

interface RawJson {
  rawJSON(text: string): ExactNumber;
  isRawJSON(v: unknown): boolean;
}
const RAW = JSON as unknown as JSON & RawJson;

/** A digit run of 16 significant digits (a dot may split it): only then may a double fall short. */
const LONG_NUMBER = /\d(?:\.?\d){15}/;

/** Whether `v` is a number kept as its exact text. */
export function isExactNumber(v: unknown): v is ExactNumber {
  return typeof v === "object" && v !== null && RAW.isRawJSON(v);
}

/**
 * A numeric text's sign, significant digits (no leading or trailing zeros) and exponent, in
 * linear time (no backtracking regular expression: a body of a 200 KB number must not cost
 * seconds). Null when `text` is not `-?digits[.digits][e±digits]`.
 */
export function decimalParts(text: string): { sign: string; digits: string; exp: number } | null {
  const m = /^(-?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m || (m[2] === "" && (m[3] ?? "") === "")) return null;
  const all = m[2] + (m[3] ?? "");
  let start = 0;
  while (start < all.length && all.charCodeAt(start) === 0x30) start++;
  let end = all.length;
  while (end > start && all.charCodeAt(end - 1) === 0x30) end--;
  const exp = Number(m[4] ?? 0) - (m[3] ?? "").length + (all.length - end);
  return { sign: m[1], digits: all.slice(start, end), exp };
}

/**
 * The integer a numeric text stands for (`9007199254740993`, `9007199254740993.0`, `9.0e15`), or
 * null when it has a fraction or more than `maxDigits` digits.
 */
export function integerOf(text: string, maxDigits = 40): bigint | null {
  const p = decimalParts(text);
  if (!p || p.exp < 0) return p && p.digits === "" ? 0n : null;
  if (p.digits === "") return 0n;
  if (p.digits.length + p.exp > maxDigits) return null;
  return BigInt(`${p.sign}${p.digits}${"0".repeat(p.exp)}`);
}

/**
 * A numeric text in plain decimal notation, as PostgreSQL's `numeric` prints it (`1.5e3` →
 * `1500`), or the text as it is when that would be longer than `maxLength` (an exponent of
 * thousands must not become thousands of characters).
 */
export function plainDecimal(text: string, maxLength = 1000): string {
  const p = decimalParts(text);
  if (!p || p.digits === "") return p ? "0" : text;
  const { sign, digits, exp } = p;
  const point = digits.length + exp; // digits before the decimal point
  if (Math.max(point, digits.length, -exp) > maxLength) return text;
  if (exp >= 0) return sign + digits + "0".repeat(exp);
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** The canonical digits and exponent of a JSON number's text (`1.50e1` and `15` alike). */
function canonical(text: string): string {
  const p = decimalParts(text);
  if (!p) return text;
  return p.digits === "" ? "0" : `${p.sign}${p.digits}e${p.exp}`;
}

function keepExact(this: unknown, _key: string, v: unknown, context?: { source?: string }) {
  if (typeof v !== "number" || context?.source === undefined) return v;
  const source = context.source;
  return canonical(source) === canonical(String(v)) ? v : RAW.rawJSON(source);
}

/**
 * The number a numeric text (`-?digits[.digits][e±digits]`, leading zeros allowed) stands for: a
 * double when one holds it exactly, else an ExactNumber of its text.
 */
export function exactNumber(text: string): number | ExactNumber {
  const v = Number(text);
  if (Number.isFinite(v) && canonical(text) === canonical(String(v))) return v;
  return RAW.rawJSON(text.replace(/^(-?)0+(?=\d)/, "$1"));
}

/**
 * `JSON.parse(text)`, except that a number a double cannot hold exactly is an ExactNumber. Text
 * without 16 digits in a row (every usual body) is parsed by `JSON.parse` alone.
 */
export function parseJsonExact(text: string): unknown {
  if (!LONG_NUMBER.test(text)) return JSON.parse(text);
  try {
    return JSON.parse(text, keepExact as (this: unknown, key: string, value: unknown) => unknown);
  } catch (e) {
    // A reviver walks the value recursively: nested too deep for the stack, the text is parsed
    // without it (iteratively), so that the caller's depth limit names the problem.
    if (e instanceof RangeError) return JSON.parse(text);
    throw e;
  }
}
