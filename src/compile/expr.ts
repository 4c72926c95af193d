/**
 * Expressions of the query tree (docs/query.md "Expressions"): names, literals, operators, casts, `.`,
 * `agg` and `$param`, resolved against a Scope.
 */
import { isExactNumber } from "../formats/json.ts";
import { type Column, hasSchemaUsage } from "../db/schema.ts";
import { invalid, SvcError } from "../svc_error.ts";
import { didYouMean } from "../util/suggest.ts";
import type { Expr, JoinNode } from "./ast.ts";
import {
  type Ctx,
  ptr,
  type Scope,
  sourceColumns,
  sourceRelation,
  unknownColumn,
} from "./parse_common.ts";
import { columnCandidates, scopeCandidates } from "./candidates.ts";

/** Maximum nesting of expression arrays (protects the parser's and PostgreSQL's stacks). */
const MAX_EXPR_DEPTH = 64;

/** Arity of the plain operators: [min, max] argument count (operator excluded). */
const OPS: Record<string, [number, number]> = {
  and: [1, Infinity],
  or: [1, Infinity],
  not: [1, 1],
  "=": [2, 2],
  "<>": [2, 2],
  "<": [2, 2],
  "<=": [2, 2],
  ">": [2, 2],
  ">=": [2, 2],
  is_distinct_from: [2, 2],
  is_not_distinct_from: [2, 2],
  like: [2, 2],
  ilike: [2, 2],
  not_like: [2, 2],
  not_ilike: [2, 2],
  "~": [2, 2],
  "~*": [2, 2],
  in: [2, Infinity],
  not_in: [2, Infinity],
  between: [3, 3],
  is_null: [1, 1],
  is_not_null: [1, 1],
  "@>": [2, 2],
  "<@": [2, 2],
  "&&": [2, 2],
  "->": [2, 2],
  "->>": [2, 2],
  fts: [2, 3],
  "+": [2, 2],
  "-": [2, 2],
  "*": [2, 2],
  "/": [2, 2],
  "||": [2, 2],
};
/** Operators whose result is boolean. */
const BOOLEAN_OPS = new Set(
  Object.keys(OPS).filter((o) => !["->", "->>", "+", "-", "*", "/", "||"].includes(o)),
);
const AGG_FUNCTIONS = new Set([
  "count",
  "sum",
  "avg",
  "min",
  "max",
  "bool_and",
  "bool_or",
  "array_agg",
]);
/** SQL-standard spellings accepted by a cast but absent from pg_type's names. */
const TYPE_ALIASES: Record<string, string> = {
  int: "integer",
  char: "character",
  decimal: "numeric",
  float: "double precision",
  dec: "numeric",
};

/**
 * Bytes of literals a query's select, order_by and distinct_on may hold together: those are
 * computed into every row, and a hostile probe's 1 MB literal in an order_by made PostgreSQL sort
 * 1 MB keys, 8.3 GB of temporary files for a table of 8,715 rows (a `where`'s literals are
 * only compared: not capped).
 */
export const ROW_LITERALS_MAX = 4096;

function countRowLiteral(ctx: Ctx, bytes: number, pointer: string): void {
  ctx.rowLiterals = (ctx.rowLiterals ?? 0) + bytes;
  if (ctx.rowLiterals > ROW_LITERALS_MAX) {
    throw new SvcError(
      "QUERY_INVALID",
      `the literals of a query's select, order_by and distinct_on may hold ${ROW_LITERALS_MAX} ` +
        "characters together (they are computed into every row); compare long values in a where",
      { details: { pointer } },
    );
  }
}

/**
 * Resolves a bare name: column, then computed field. `otherwise`: the hint of an unknown name
 * when no known name is close (default: how a string literal is written).
 */
export function resolveName(
  scope: Scope,
  name: string,
  pointer: string,
  otherwise = `; a string literal is written ${JSON.stringify([name])}`,
): Expr {
  const column = scope.columns.get(name);
  if (column) return { kind: "column", scope: scope.alias, column };
  const cf = scope.computed.get(name);
  if (cf) {
    return {
      kind: "computed",
      scope: scope.alias,
      schema: cf.schema,
      fn: cf.name,
      type: cf.type,
      set: cf.set,
    };
  }
  if (scope.joins.has(name)) {
    throw invalid(pointer, `joined alias '${name}' is not a value here; use '.' or 'agg'`);
  }
  throw unknownColumn(
    pointer,
    name,
    scopeCandidates(scope, { computed: true, joins: true }),
    (hint) => `unknown column '${name}'${hint || otherwise}`,
  );
}

/** Parses one expression node. */
export function parseExpr(
  ctx: Ctx,
  scope: Scope,
  v: unknown,
  pointer: string,
  depth: number,
): Expr {
  if (depth > MAX_EXPR_DEPTH) throw invalid(pointer, "expression nested too deeply");
  if (v === null || typeof v === "boolean") return { kind: "literal", value: v };
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw invalid(pointer, "numbers must be finite");
    return { kind: "literal", value: v };
  }
  if (isExactNumber(v)) {
    if (ctx.perRow) countRowLiteral(ctx, v.rawJSON.length, pointer);
    return { kind: "literal", value: v };
  }
  if (typeof v === "string") return resolveName(scope, v, pointer);
  if (!Array.isArray(v)) throw invalid(pointer, "an expression is a name, literal or array");
  if (v.length === 0) throw invalid(pointer, "empty expression array");
  const [op, ...args] = v;
  if (typeof op !== "string") {
    throw invalid(ptr(pointer, 0), "an expression array starts with an operator");
  }
  if (args.length === 0) {
    if (ctx.perRow) countRowLiteral(ctx, op.length, pointer);
    return { kind: "literal", value: op };
  }
  return parseOp(ctx, scope, op, args, pointer, depth + 1);
}

function parseOp(
  ctx: Ctx,
  scope: Scope,
  op: string,
  args: unknown[],
  pointer: string,
  depth: number,
): Expr {
  const sub = (i: number) => parseExpr(ctx, scope, args[i], ptr(pointer, i + 1), depth);
  switch (op) {
    case "arr":
      return { kind: "array", items: args.map((_, i) => sub(i)) };
    case "cast":
      arity(op, args, 2, 2, pointer);
      return { kind: "cast", expr: sub(0), type: checkType(ctx, args[1], ptr(pointer, 2)) };
    case ".":
      arity(op, args, 2, 2, pointer);
      return parseDot(ctx, scope, args, pointer, depth);
    case "agg":
      return parseAgg(ctx, scope, args, pointer, depth);
    case "$param":
      return parseParam(ctx, args, pointer);
  }
  const range = Object.hasOwn(OPS, op) ? OPS[op] : undefined;
  if (!range) {
    const hint = didYouMean(op, [...Object.keys(OPS), "arr", "cast", ".", "agg", "$param"]);
    throw invalid(ptr(pointer, 0), `unknown operator '${op}'${hint}`);
  }
  arity(op, args, range[0], range[1], pointer);
  const exprs = args.map((_, i) => sub(i));
  if (op === "fts" && exprs.length === 3) checkTsConfig(ctx, exprs[2], ptr(pointer, 3));
  if (op === "and" || op === "or" || op === "not") {
    exprs.forEach((e, i) => assertBoolean(e, ptr(pointer, i + 1)));
  }
  return { kind: "op", op, args: exprs };
}

/**
 * Object-identifier types (regconfig, regclass…) read digits as a raw OID, which reaches
 * PostgreSQL internals; literals for them must be names.
 */
export function checkRegLiteral(e: Expr, pointer: string): void {
  if (e.kind !== "literal" || e.value === null) return;
  if (typeof e.value !== "string" || /^\s*[-+]?\d+\s*$/.test(e.value)) {
    throw invalid(pointer, "expected a name (e.g. a text search configuration)");
  }
}

/**
 * An fts configuration literal must name an existing text search configuration (it is bound and
 * cast to regconfig; a name PostgreSQL does not know would otherwise fail as 42704).
 */
function checkTsConfig(ctx: Ctx, e: Expr, pointer: string): void {
  checkRegLiteral(e, pointer);
  const known = ctx.schema.tsConfigs;
  if (!known || e.kind !== "literal" || typeof e.value !== "string") return;
  const name = e.value.trim();
  if (!known.has(name) && !known.has(name.toLowerCase())) {
    throw invalid(pointer, `unknown text search configuration '${e.value}'`);
  }
}

function arity(op: string, args: unknown[], min: number, max: number, pointer: string): void {
  if (args.length < min || args.length > max) {
    const want = min === max ? `${min}` : max === Infinity ? `at least ${min}` : `${min}–${max}`;
    throw invalid(pointer, `'${op}' takes ${want} argument(s), got ${args.length}`);
  }
}

/** Rejects expressions that are certainly not boolean where a condition is expected. */
export function assertBoolean(e: Expr, pointer: string): void {
  let ok = true;
  switch (e.kind) {
    case "literal":
      ok = e.value === null || typeof e.value === "boolean";
      break;
    case "array":
      ok = false;
      break;
    case "op":
      ok = BOOLEAN_OPS.has(e.op);
      break;
    case "agg":
      ok = e.fn === "bool_and" || e.fn === "bool_or";
      break;
    case "column":
    case "joined":
      ok = e.column.category === "B" || e.column.category === "";
      break;
  }
  if (!ok) throw invalid(pointer, "expected a boolean condition");
}

function parseDot(
  ctx: Ctx,
  scope: Scope,
  args: unknown[],
  pointer: string,
  depth: number,
): Expr {
  const [base, field] = args;
  if (typeof field !== "string") throw invalid(ptr(pointer, 2), "expected a column or field name");
  if (typeof base === "string") {
    const join = scope.joins.get(base);
    if (join) {
      if (join.direction !== "outgoing") {
        throw invalid(ptr(pointer, 1), `'${base}' is an array join; use 'agg' to reach into it`);
      }
      const column = sourceColumns(join.node.source).find((c) => c.name === field);
      if (!column) {
        throw unknownColumn(
          ptr(pointer, 2),
          field,
          columnCandidates(join.node.source),
          (hint) => `unknown column '${field}' of '${base}'${hint}`,
        );
      }
      return { kind: "joined", join, column };
    }
    if (!scope.columns.has(base) && base === scope.name && scope.columns.has(field)) {
      return { kind: "column", scope: scope.alias, column: scope.columns.get(field)! };
    }
  }
  const expr = parseExpr(ctx, scope, base, ptr(pointer, 1), depth);
  const composite = compositeOf(ctx, expr);
  if (!composite) throw invalid(ptr(pointer, 1), "'.' needs a joined alias or a composite value");
  const fcol = composite.fields.find((c) => c.name === field);
  if (!fcol) throw unknownColumn(ptr(pointer, 2), field, [], () => `unknown field '${field}'`);
  const out: Expr = { kind: "field", expr, field, type: fcol.type };
  ctx.fieldColumns.set(out, fcol);
  return out;
}

function compositeOf(ctx: Ctx, e: Expr) {
  let col: Column | undefined;
  if (e.kind === "column" || e.kind === "joined") col = e.column;
  else if (e.kind === "field") col = ctx.fieldColumns.get(e);
  if (!col || col.compositeOid === null) return undefined;
  return ctx.schema.composites.get(col.compositeOid);
}

function parseAgg(
  ctx: Ctx,
  scope: Scope,
  args: unknown[],
  pointer: string,
  depth: number,
): Expr {
  arity("agg", args, 2, 3, pointer);
  const [fn, target, filter] = args;
  if (typeof fn !== "string" || !AGG_FUNCTIONS.has(fn)) {
    throw invalid(ptr(pointer, 1), `aggregate must be one of ${[...AGG_FUNCTIONS].join(", ")}`);
  }
  const tp = ptr(pointer, 2);
  if (!Array.isArray(target) || target.length < 1 || target.length > 2) {
    throw invalid(tp, "agg takes [alias] or [alias, expression]");
  }
  const alias = target[0];
  if (typeof alias !== "string") throw invalid(ptr(tp, 0), "expected a joined alias");
  const join = scope.joins.get(alias);
  if (!join) {
    const aliases = [...scope.joins.keys()].map((name) => ({ name }));
    throw unknownColumn(ptr(tp, 0), alias, aliases, (h) => `unknown joined alias '${alias}'${h}`);
  }
  if (join.direction !== "incoming") {
    throw invalid(ptr(tp, 0), `'${alias}' is not an incoming (array) join`);
  }
  const inner = childScope(ctx, join);
  const expr = target.length === 2 ? parseExpr(ctx, inner, target[1], ptr(tp, 1), depth) : null;
  if (expr === null && fn !== "count") throw invalid(tp, `'${fn}' needs an expression`);
  let where: Expr | null = null;
  if (args.length === 3) {
    where = parseExpr(ctx, inner, filter, ptr(pointer, 3), depth);
    assertBoolean(where, ptr(pointer, 3));
  }
  return { kind: "agg", fn, join, expr, filter: where };
}

/** The scope of a joined relation (for `agg` expressions and filters). */
function childScope(ctx: Ctx, join: JoinNode): Scope {
  const node = join.node;
  return {
    alias: node.sqlAlias,
    name: node.name,
    source: node.source,
    columns: new Map(sourceColumns(node.source).map((c) => [c.name, c])),
    computed: sourceRelation(ctx.schema, node.source)?.computedFields ?? new Map(),
    joins: new Map(node.joins.map((j) => [j.key, j])),
  };
}

function parseParam(ctx: Ctx, args: unknown[], pointer: string): Expr {
  arity("$param", args, 1, 2, pointer);
  const params = ctx.opts.params;
  if (!params) throw invalid(pointer, "$param is only allowed in a well-known query");
  const name = args[0];
  if (typeof name !== "string" || !Object.hasOwn(params, name)) {
    throw invalid(ptr(pointer, 1), `unknown parameter '${String(name)}'`);
  }
  const declared = params[name]?.cast;
  const castRaw = args.length === 2 ? args[1] : declared ?? "jsonb";
  return { kind: "param", name, cast: checkType(ctx, castRaw, ptr(pointer, 2)) };
}

/**
 * The types that take a modifier (PostgreSQL's own, by every accepted spelling): how the cast is
 * spelled with its arguments, and each argument's range. Any other type with a modifier is
 * refused; `numeric`'s scale goes from 0 to its precision.
 */
/** Bytes a row's padded casts (`char(n)`, `bit(n)`) may take together in one query. */
const PADDED_TOTAL = 10_000;

/**
 * Type modifiers: the SQL spelling, each argument's range, and for a type that pads its values
 * to its length, the bytes one unit of it takes.
 */
const MODIFIED: Record<
  string,
  { sql: (a: number[]) => string; ranges: [number, number][]; padded?: number }
> = (() => {
  const length = (name: string, max: number) => ({
    sql: (a: number[]) => `${name}(${a[0]})`,
    ranges: [[1, max]] as [number, number][],
  });
  const precision = (sql: (p: number) => string) => ({
    sql: (a: number[]) => sql(a[0]),
    ranges: [[0, 6]] as [number, number][],
  });
  // char(n) and bit(n) pad every value to n: a few request bytes must not become megabytes a
  // value in PostgreSQL (a sort on `char(10485760)` wrote 10 MB of temp file a row), so their
  // n is capped well below PostgreSQL's own limit. varchar(n) and varbit(n) only truncate.
  const PADDED = 10_000;
  const varchar = length("character varying", 10485760);
  const bpchar = { ...length("character", PADDED), padded: 1 };
  const varbit = length("bit varying", 83886080);
  const numeric = {
    sql: (a: number[]) => `numeric(${a.join(",")})`,
    ranges: [[1, 1000], [0, 1000]] as [number, number][],
  };
  const time = precision((p) => `time(${p})`);
  const timetz = precision((p) => `time(${p}) with time zone`);
  const timestamp = precision((p) => `timestamp(${p})`);
  const timestamptz = precision((p) => `timestamp(${p}) with time zone`);
  return {
    varchar,
    "character varying": varchar,
    bpchar,
    char: bpchar,
    character: bpchar,
    numeric,
    decimal: numeric,
    dec: numeric,
    bit: { ...length("bit", PADDED * 8), padded: 1 / 8 },
    varbit,
    "bit varying": varbit,
    time,
    "time without time zone": time,
    timetz,
    "time with time zone": timetz,
    timestamp,
    "timestamp without time zone": timestamp,
    timestamptz,
    "timestamp with time zone": timestamptz,
    interval: precision((p) => `interval(${p})`),
  };
})();

/** The cast-target error: one message shape for every refused, hidden or unknown target. */
export function unknownType(v: string, pointer: string, why = ""): SvcError {
  return new SvcError("QUERY_UNKNOWN_TYPE", `unknown type '${v}'${why}`, { details: { pointer } });
}

/**
 * Checks a cast target (an optional type modifier and `[]` suffixes allowed) and returns it in a
 * form that is safe to put in SQL. A target is a data type of pg_catalog, a type of another
 * schema the role may use (base, domain, enum, range, composite), or the row type of a relation
 * the role may SELECT; arrays of those. A modifier is allowed only on the types of MODIFIED, with
 * its arguments in range. Every refused, hidden or unknown target gets the same
 * QUERY_UNKNOWN_TYPE answer, so a cast cannot tell whether something exists.
 */
export function checkType(ctx: Ctx, v: unknown, pointer: string): string {
  if (typeof v !== "string") throw invalid(pointer, "expected a type name");
  const m = /^(.+?)\s*(?:\(([^()]*)\))?\s*((?:\[\])*)$/s.exec(v.trim());
  if (!m) throw unknownType(v, pointer);
  if (m[2] !== undefined) return modified(ctx, v, m[1], m[2], pointer) + m[3];
  const base = ctx.schema.castTargets
    ? resolveCastTarget(ctx, m[1])
    : resolveTypeName(ctx.schema.typeNames, m[1]);
  if (base === null) throw unknownType(v, pointer);
  return base + m[3];
}

/** A type with a modifier, e.g. `numeric(10,2)`, spelled for SQL; else QUERY_UNKNOWN_TYPE. */
function modified(ctx: Ctx, v: string, name: string, args: string, pointer: string): string {
  const key = name.toLowerCase().replace(/^pg_catalog\./, "").replaceAll(/\s+/g, " ");
  const spec = Object.hasOwn(MODIFIED, key) ? MODIFIED[key] : undefined;
  if (spec === undefined) {
    throw unknownType(
      v,
      pointer,
      ": a type modifier is allowed only on varchar, char, numeric, bit, varbit, time, timetz, " +
        "timestamp, timestamptz and interval",
    );
  }
  const parts = args.split(",").map((a) => a.trim());
  const n = spec.ranges.length;
  if (parts.length > n || parts.some((a) => !/^\d{1,9}$/.test(a))) {
    throw unknownType(
      v,
      pointer,
      `: ${key} takes ${n === 1 ? "one integer" : "one or two integers"}`,
    );
  }
  const values = parts.map(Number);
  // numeric's scale is at most its precision.
  const ranges = spec.ranges.map(([lo, hi], i) => [lo, i === 1 ? Math.min(hi, values[0]) : hi]);
  values.forEach((x, i) => {
    const [lo, hi] = ranges[i];
    if (x < lo || x > hi) {
      const what = n === 1 ? "its modifier" : i === 0 ? "its precision" : "its scale";
      throw unknownType(v, pointer, `: ${what} must be between ${lo} and ${hi}`);
    }
  });
  // Padded casts repeated (in an `arr`, a `||`) add up: their total per query is capped too.
  if (spec.padded !== undefined) {
    ctx.padded = (ctx.padded ?? 0) + Math.ceil(values[0] * spec.padded);
    if (ctx.padded > PADDED_TOTAL) {
      throw unknownType(
        v,
        pointer,
        `: char(n) and bit(n) casts pad each value, and a query's may take ${PADDED_TOTAL} bytes ` +
          "a row together",
      );
    }
  }
  return spec.sql(values);
}

/** The SQL spelling of a cast target from Schema.castTargets, or null (unknown or refused). */
function resolveCastTarget(ctx: Ctx, name: string): string | null {
  const targets = ctx.schema.castTargets!;
  const lower = name.toLowerCase();
  const alias = Object.hasOwn(TYPE_ALIASES, lower) ? TYPE_ALIASES[lower] : undefined;
  const key = [name, lower, alias].find((n) => n !== undefined && targets.has(n));
  if (key === undefined) return null;
  const t = targets.get(key)!;
  const role = ctx.opts.role;
  if (t.schema !== "pg_catalog" && role !== undefined) {
    if (!hasSchemaUsage(ctx.schema, role, t.schema)) return null;
  }
  if (t.relation !== undefined && role !== undefined) {
    // A row type describes its relation's columns: only for a role that may SELECT it.
    const allowed = ctx.opts.rowTypes;
    if (allowed === undefined) ctx.pendingRowTypes.add(t.relation);
    else if (!allowed.has(t.relation)) return null;
  }
  return t.sql;
}

function resolveTypeName(names: Set<string>, name: string): string | null {
  const lower = name.toLowerCase();
  const alias = Object.hasOwn(TYPE_ALIASES, lower) ? TYPE_ALIASES[lower] : undefined;
  const candidates = [name, lower, alias].filter((n) => n !== undefined);
  const found = candidates.find((n) => names.has(n));
  if (found === undefined) return null;
  if (/^[a-z_][a-z0-9_]*( [a-z_][a-z0-9_]*)*$/.test(found)) return found;
  const dot = found.indexOf(".");
  if (dot > 0 && !found.startsWith('"')) {
    return `${quote(found.slice(0, dot))}.${quote(found.slice(dot + 1))}`;
  }
  return quote(found);
}

function quote(s: string): string {
  return `"${s.replaceAll('"', '""')}"`;
}
