/**
 * The GET /svc form (docs/query.md "The GET form"): query-string parameters turned into the
 * same JSON tree a POST body carries, so both forms compile identically. Well-known references
 * (`wellknown`, `params.<name>`) are returned separately for the caller to resolve.
 *
 * Beyond the documented keys, `arguments.<name>=<value>` passes a named function argument
 * (values as in `where`: numbers, true/false/null, 'quoted' or bare text, all literals).
 */
import { exactNumber, parseJsonExact } from "../formats/json.ts";
import { type ErrorCode, SvcError } from "../svc_error.ts";
import { nestedDeeperThan } from "./body.ts";
import { closest } from "../util/suggest.ts";

/** The decoded GET form. */
export interface GetQuery {
  /** The Relation tree, or `{wellknown, params}` for a well-known query. */
  tree: Record<string, unknown>;
  /** Name of the well-known query, when one is referenced. */
  wellknown?: string;
  /** Well-known parameters (`params.<name>`), JSON-decoded when the text parses as JSON. */
  params?: Record<string, unknown>;
}

const COMPLEX = new Set([
  "query",
  "count",
  "stats",
  "query_plan",
  "sql",
  "rollback",
  "returns",
  "data",
]);
const SCALARS = new Set(["relation", "schema", "function", "alias"]);
const FUNCTIONS: Record<string, string> = {
  eq: "=",
  neq: "<>",
  lt: "<",
  lte: "<=",
  gt: ">",
  gte: ">=",
  like: "like",
  ilike: "ilike",
  in: "in",
  not_in: "not_in",
  between: "between",
  is_null: "is_null",
  is_not_null: "is_not_null",
  and: "and",
  or: "or",
  not: "not",
  contains: "@>",
  contained: "<@",
  overlaps: "&&",
  fts: "fts",
};

/**
 * An error of the tree a query string stood for, said in the GET form's terms: `details.parameter`
 * names the parameter holding the offending part (the tree's `details.pointer` kept beside it),
 * and a string literal is shown as the GET form writes it (`'x'`, not `["x"]`).
 */
export function inGetTerms(e: unknown): unknown {
  if (!(e instanceof SvcError)) return e;
  const details = e.details as { pointer?: unknown; parameter?: unknown } | undefined;
  if (typeof details?.pointer !== "string" || details.parameter !== undefined) return e;
  const parts = details.pointer.split("/").slice(1).map((p) =>
    p.replaceAll("~1", "/").replaceAll("~0", "~")
  );
  const name: string[] = [];
  let i = 0;
  while (parts[i] === "join" && i + 1 < parts.length) name.push(parts[i++], parts[i++]);
  if (i < parts.length) {
    const field = parts[i];
    name.push(field);
    if ((field === "on" || field === "arguments" || field === "params") && i + 1 < parts.length) {
      name.push(parts[i + 1]);
    }
  }
  const message = e.message.replace(
    /; a string literal is written \[("(?:[^"\\]|\\.)*")\]$/,
    (_, json: string) =>
      `; a string literal is written '${JSON.parse(json).replaceAll("'", "''")}'`,
  );
  const err = new SvcError(e.code as ErrorCode, message, {
    status: e.status,
    details: { ...details, parameter: name.join(".") },
    ...(e.hint !== undefined ? { hint: e.hint } : {}),
  });
  err.devReason = e.devReason;
  return err;
}

/** The names a relation's parameters may have, in the GET form. */
const PARAMETER_NAMES = [
  ...SCALARS,
  "limit",
  "offset",
  "select",
  "order_by",
  "distinct_on",
  "where",
  "join",
  "on",
  "arguments",
];

/**
 * 400 for an unknown parameter `key` (split as `path`), with "did you mean" when its name at `at`
 * is a typo of a parameter name: the key with that name replaced.
 */
function unknownParameter(key: string, path: string[], at: number): SvcError {
  const near = closest(path[at], PARAMETER_NAMES);
  const hint = near === null
    ? ""
    : `; did you mean '${[...path.slice(0, at), near, ...path.slice(at + 1)].join(".")}'?`;
  return getError(key, `unknown parameter '${key}'${hint}`);
}

function getError(parameter: string, message: string): SvcError {
  return new SvcError("QUERY_INVALID", message, { details: { parameter } });
}

const LONE_PERCENT = /%(?![0-9A-Fa-f]{2})/g;

/**
 * Refuses a query string whose percent-encoded bytes are not UTF-8 (400 QUERY_INVALID,
 * `details.parameter` the offending key), where URLSearchParams would put U+FFFD in their place: a
 * POST body is strict UTF-8, so is the GET form. A `%` not followed by two hex digits stays the
 * character it is, as URLSearchParams reads it (`like(title,'A%')` typed in a browser).
 */
export function checkQueryString(search: string): void {
  const text = search.startsWith("?") ? search.slice(1) : search;
  if (!text.includes("%")) return;
  for (const pair of text.split("&")) {
    if (!pair.includes("%")) continue;
    const eq = pair.indexOf("=");
    for (const part of eq < 0 ? [pair] : [pair.slice(0, eq), pair.slice(eq + 1)]) {
      try {
        decodeURIComponent(part.replace(LONE_PERCENT, "%25"));
      } catch {
        let key = eq < 0 ? pair : pair.slice(0, eq);
        try {
          key = decodeURIComponent(key.replace(LONE_PERCENT, "%25"));
        } catch { /* the key itself is the broken part: shown as sent */ }
        throw getError(key, `'${key}': percent-encoded bytes that are not UTF-8`);
      }
    }
  }
}

/** `http.max_json_depth`'s default: the depth a GET tree may have when the caller names none. */
const DEFAULT_MAX_DEPTH = 64;

/**
 * Decodes the GET query string into the POST tree. Throws QUERY_COMPLEX_NOT_ALLOWED_ON_GET for
 * ComplexQuery parameters and QUERY_INVALID (details.parameter) for anything else unknown. The
 * tree obeys the body's nesting rule (`maxDepth`, `http.max_json_depth`): a parameter whose
 * value would sit deeper (joins nested in joins, calls nested in `where`) is QUERY_INVALID with
 * `details.limit`, found while it is read, so a hostile query string costs neither stack nor
 * quadratic work.
 */
export function parseGetQuery(url: URLSearchParams, maxDepth = DEFAULT_MAX_DEPTH): GetQuery {
  const seen = new Set<string>();
  for (const key of url.keys()) {
    if (COMPLEX.has(key) || key.startsWith("query.")) {
      throw new SvcError(
        "QUERY_COMPLEX_NOT_ALLOWED_ON_GET",
        `'${key}' (a ComplexQuery parameter) is not allowed on GET`,
        { details: { parameter: key } },
      );
    }
    if (seen.has(key)) throw getError(key, `parameter '${key}' given more than once`);
    seen.add(key);
  }
  if (url.has("wellknown")) return wellKnown(url);
  const tree: Record<string, unknown> = {};
  for (const [key, value] of url) {
    if (key.startsWith("params.")) throw getError(key, "params.<name> needs wellknown");
    setField(tree, key.split("."), value, key, maxDepth);
  }
  return { tree };
}

function tooDeep(key: string, maxDepth: number): SvcError {
  return new SvcError(
    "QUERY_INVALID",
    `'${key}' is nested deeper than ${maxDepth} levels (http.max_json_depth)`,
    { details: { parameter: key, limit: "http.max_json_depth" } },
  );
}

function wellKnown(url: URLSearchParams): GetQuery {
  const name = url.get("wellknown")!;
  const params: Record<string, unknown> = {};
  for (const [key, value] of url) {
    if (key === "wellknown") continue;
    const p = key.startsWith("params.") ? key.slice(7) : null;
    if (p === null || p === "" || p.includes(".")) {
      throw getError(key, `unexpected parameter '${key}' with wellknown`);
    }
    define(params, p, decodeParam(value));
  }
  return { tree: { wellknown: name, params }, wellknown: name, params };
}

/** A `params.<name>` value: JSON when it parses as JSON, else the plain string. */
export function decodeParam(value: string): unknown {
  try {
    return parseJsonExact(value);
  } catch {
    return value;
  }
}

/**
 * Sets one dotted key (already split) into a relation object of the tree: `join.<alias>.` steps
 * down one joined relation (two levels of the tree, as in a body: `join`, then the alias), then the
 * field. `maxDepth`: the deepest the tree may nest (the root relation is level 1).
 */
function setField(
  root: Record<string, unknown>,
  path: string[],
  value: string,
  key: string,
  maxDepth: number,
): void {
  let rel = root;
  let depth = 1;
  let i = 0;
  while (path[i] === "join" && path.length - i >= 3) {
    const alias = path[i + 1];
    if (alias === "") throw getError(key, "empty join alias");
    depth += 2;
    if (depth > maxDepth) throw tooDeep(key, maxDepth);
    rel = child(child(rel, "join"), alias);
    i += 2;
  }
  const head = path[i];
  const rest = path.length - i - 1;
  let v: unknown;
  if ((head === "on" || head === "arguments") && rest >= 1) {
    depth += 1; // the `on` / `arguments` object
    if (depth > maxDepth) throw tooDeep(key, maxDepth);
    const obj = child(rel, head);
    v = head === "on" ? value : argumentValue(value, key);
    define(obj, path.slice(i + 1).join("."), v);
  } else {
    if (rest !== 0) throw unknownParameter(key, path, i);
    if (SCALARS.has(head)) v = value;
    else if (head === "limit" || head === "offset") v = integer(value, key);
    else if (head === "select") v = selectValue(value);
    else if (head === "order_by") v = list(value).map(orderTerm);
    else if (head === "distinct_on") v = list(value).map(nameExpr);
    else if (head === "where") v = parseWhere(value, key, maxDepth - depth);
    else throw unknownParameter(key, path, i);
    rel[head] = v;
  }
  if (nestedDeeperThan(v, maxDepth - depth)) throw tooDeep(key, maxDepth);
}

/** Sets an own property (also for names like `__proto__`). */
function define(obj: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The object at `obj[key]`, created when missing. */
function child(obj: Record<string, unknown>, key: string): Record<string, unknown> {
  if (!Object.hasOwn(obj, key)) define(obj, key, {});
  const v = obj[key];
  if (typeof v !== "object" || v === null) throw getError(key, `'${key}' is not an object`);
  return v as Record<string, unknown>;
}

function integer(value: string, key: string): number {
  if (!/^\d{1,15}$/.test(value)) throw getError(key, `'${key}' must be an integer ≥ 0`);
  return Number(value);
}

function list(value: string): string[] {
  return value.split(",").map((s) => s.trim()).filter((s) => s !== "");
}

function selectValue(value: string): unknown {
  const v = value.trim();
  if (v === "own" || v === "full") return v;
  return list(v);
}

/** A name in order_by/distinct_on: `a.b` reaches into a joined relation. */
function nameExpr(name: string): unknown {
  const dot = name.indexOf(".");
  return dot > 0 ? [".", name.slice(0, dot), name.slice(dot + 1)] : name;
}

/** `name`, `-name`, `name.desc.nullslast` … → an order term of the POST tree. */
function orderTerm(term: string): unknown {
  let desc = term.startsWith("-");
  let rest = desc ? term.slice(1) : term;
  let nulls: string | null = null;
  for (;;) {
    const m = /\.(asc|desc|nullsfirst|nullslast)$/.exec(rest);
    if (!m) break;
    if (m[1] === "asc" || m[1] === "desc") desc = m[1] === "desc";
    else nulls = m[1] === "nullsfirst" ? "nulls_first" : "nulls_last";
    rest = rest.slice(0, m.index);
  }
  const expr = nameExpr(rest);
  if (nulls) return [desc ? "desc" : "asc", expr, nulls];
  return desc ? ["desc", expr] : expr;
}

function argumentValue(value: string, key: string): unknown {
  const v = value.trim();
  if (/^'.*'$/s.test(v) || /^-?\d/.test(v) || ["true", "false", "null"].includes(v)) {
    const p = new WhereParser(v, key);
    const out = p.atom();
    p.end();
    return out;
  }
  return [value];
}

// ---------------------------------------------------------------------------------------------
// where: call expressions

/**
 * Parses `and(gte(price,10),like(name,'A%'))` into the POST expression tree; calls nested deeper
 * than `maxDepth` are QUERY_INVALID (`details.limit`), found before the parser recurses further.
 */
export function parseWhere(text: string, key = "where", maxDepth = DEFAULT_MAX_DEPTH): unknown {
  const p = new WhereParser(text, key, maxDepth);
  const e = p.expr();
  p.end();
  return e;
}

const CALL = /[A-Za-z_][A-Za-z0-9_]*\s*\(/y;
const NUMBER = /-?\d+(\.\d+)?([eE][+-]?\d+)?(?![A-Za-z0-9_.])/y;
const NAME = /[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?/y;
const SPACE = /\s/;

/** Matches `re` (sticky) at `pos` of `text`, without slicing the text. */
function at(re: RegExp, text: string, pos: number): RegExpExecArray | null {
  re.lastIndex = pos;
  return re.exec(text);
}

class WhereParser {
  pos = 0;
  /** Calls open around the current position. */
  depth = 0;
  constructor(
    readonly text: string,
    readonly key: string,
    readonly maxDepth = DEFAULT_MAX_DEPTH,
  ) {}

  fail(message: string): never {
    throw new SvcError("QUERY_INVALID", `${this.key}: ${message} at position ${this.pos}`, {
      details: { parameter: this.key, position: this.pos },
    });
  }

  skip(): void {
    while (this.pos < this.text.length && SPACE.test(this.text[this.pos])) this.pos++;
  }

  end(): void {
    this.skip();
    if (this.pos < this.text.length) this.fail("unexpected text");
  }

  expr(): unknown {
    this.skip();
    const m = at(CALL, this.text, this.pos);
    if (!m) return this.atom();
    const name = m[0].slice(0, m[0].indexOf("(")).trim();
    const op = Object.hasOwn(FUNCTIONS, name) ? FUNCTIONS[name] : undefined;
    if (!op) this.fail(`unknown function '${name}'`);
    if (++this.depth > this.maxDepth) throw tooDeep(this.key, this.maxDepth);
    this.pos += m[0].length;
    const args: unknown[] = [];
    this.skip();
    if (this.text[this.pos] === ")") this.pos++;
    else {
      for (;;) {
        args.push(this.expr());
        this.skip();
        const c = this.text[this.pos++];
        if (c === ")") break;
        if (c !== ",") this.fail("expected ',' or ')'");
      }
    }
    this.depth--;
    return [op, ...args];
  }

  atom(): unknown {
    this.skip();
    const c = this.text[this.pos];
    let m: RegExpExecArray | null;
    if (c === "'") return [this.quoted("'")];
    if (c === '"') return this.quoted('"');
    if ((m = at(NUMBER, this.text, this.pos))) {
      this.pos += m[0].length;
      return exactNumber(m[0]);
    }
    if ((m = at(NAME, this.text, this.pos))) {
      this.pos += m[0].length;
      if (m[0] === "true") return true;
      if (m[0] === "false") return false;
      if (m[0] === "null") return null;
      return nameExpr(m[0]);
    }
    return this.fail("expected a value");
  }

  /** A quoted string (`'text'`) or identifier (`"name"`); the quote doubles to escape. */
  quoted(q: string): string {
    let out = "";
    this.pos++;
    for (;;) {
      const i = this.text.indexOf(q, this.pos);
      if (i < 0) this.fail("unterminated quote");
      out += this.text.slice(this.pos, i);
      this.pos = i + 1;
      if (this.text[this.pos] !== q) return out;
      out += q;
      this.pos++;
    }
  }
}
