/**
 * The query-tree parser: validates a JSON Relation tree (SPEC "Relation", DECISIONS.md §2)
 * against the Schema model and produces the resolved AST of ./ast.ts. Every failure is a
 * SvcError with a DECISIONS.md §1 code and `details.pointer`, the JSON pointer of the offending
 * node in the request.
 */
import type { Column, ComputedField, Func, FunctionArg, Relation, Schema } from "../db/schema.ts";
import { canExecute, canSelect, findFunctions, findRelation } from "../db/schema.ts";
import { invalid, SvcError } from "../errors.ts";
import type {
  Expr,
  JoinNode,
  OrderTerm,
  RelationNode,
  SelectItem,
  Source,
  WriteMode,
} from "./ast.ts";

/** Options of {@link parseQuery}. */
export interface ParseOptions {
  /** Maximum join nesting (`pg.query.max_depth`); the root is depth 0. */
  maxDepth: number;
  /** Parameters of a well-known query definition; `$param` is only allowed when given. */
  params?: Record<string, { cast?: string }> | null;
  /** JSON pointer of the tree inside the request body (prefix of every error pointer). */
  pointer?: string;
  /**
   * The request's role: when given, relations it may not SELECT and functions it may not
   * EXECUTE are reported as unknown (QUERY_UNKNOWN_RELATION), as if absent.
   */
  role?: string;
}

const ROOT_FIELDS = new Set([
  "relation",
  "schema",
  "function",
  "arguments",
  "alias",
  "where",
  "join",
  "select",
  "limit",
  "offset",
  "order_by",
  "distinct_on",
  "write_mode",
  "on_conflict",
]);
const JOIN_FIELDS = new Set([...ROOT_FIELDS, "on"]);
const WRITE_MODES = new Set<WriteMode>(["insert", "upsert", "merge", "merge-new", "readonly"]);
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
/** Return types a function-rooted query cannot read rows from. */
const PSEUDO_TYPES = new Set([
  "void",
  "trigger",
  "event_trigger",
  "internal",
  "cstring",
  "language_handler",
  "fdw_handler",
  "table_am_handler",
  "index_am_handler",
  "tsm_handler",
  "unknown",
  "record",
]);
/** SQL-standard spellings accepted by a cast but absent from pg_type's names. */
const TYPE_ALIASES: Record<string, string> = {
  int: "integer",
  decimal: "numeric",
  float: "double precision",
  dec: "numeric",
};

/** Escapes one JSON pointer segment (RFC 6901). */
export function ptr(base: string, key: string | number): string {
  return `${base}/${String(key).replaceAll("~", "~0").replaceAll("/", "~1")}`;
}

function unknownColumn(pointer: string, message: string): SvcError {
  return new SvcError("QUERY_UNKNOWN_COLUMN", message, { details: { pointer } });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Parser state shared by the whole tree. */
interface Ctx {
  schema: Schema;
  opts: ParseOptions;
  /** Next sqlAlias number. */
  next: number;
  /** The composite field (Column) behind each field expression, for nested `.` access. */
  fieldColumns: WeakMap<Expr, Column>;
}

/** What bare names and `.`/`agg` references resolve against. */
interface Scope {
  /** sqlAlias of the relation. */
  alias: string;
  /** The name the caller used for the relation (`alias` or relation name). */
  name: string;
  columns: Map<string, Column>;
  computed: Map<string, ComputedField>;
  /** Outgoing/incoming joins by key. */
  joins: Map<string, JoinNode>;
}

/**
 * Validates a JSON Relation tree against the schema and resolves it into a RelationNode.
 * Throws SvcError (QUERY_INVALID, QUERY_UNKNOWN_RELATION, QUERY_UNKNOWN_COLUMN, QUERY_BAD_JOIN,
 * QUERY_MAX_DEPTH_EXCEEDED, QUERY_DISTINCT_ON_NOT_PREFIX) with `details.pointer`.
 */
export function parseQuery(schema: Schema, tree: unknown, opts: ParseOptions): RelationNode {
  const ctx: Ctx = { schema, opts, next: 0, fieldColumns: new WeakMap() };
  return parseNode(ctx, tree, opts.pointer ?? "", 0, false);
}

function parseNode(
  ctx: Ctx,
  tree: unknown,
  pointer: string,
  depth: number,
  joined: boolean,
): RelationNode {
  if (!isObject(tree)) throw invalid(pointer, "a relation must be a JSON object");
  if ("wellknown" in tree) {
    throw invalid(ptr(pointer, "wellknown"), "a well-known query reference is not allowed here");
  }
  const allowed = joined ? JOIN_FIELDS : ROOT_FIELDS;
  for (const k of Object.keys(tree)) {
    if (!allowed.has(k)) throw invalid(ptr(pointer, k), `unknown relation field '${k}'`);
  }
  const sqlAlias = `t${ctx.next++}`;
  const resolved = parseSource(ctx, tree, pointer, sqlAlias);
  const node: RelationNode = {
    source: resolved.source,
    sqlAlias,
    name: optionalString(tree.alias, ptr(pointer, "alias")) ?? resolved.name,
    where: null,
    select: [],
    joins: [],
    limit: null,
    offset: null,
    orderBy: [],
    distinctOn: [],
    writeMode: joined ? "merge" : "insert",
    onConflict: null,
    pointer,
    depth,
  };
  const scope: Scope = {
    alias: sqlAlias,
    name: node.name,
    columns: new Map(sourceColumns(node.source).map((c) => [c.name, c])),
    computed: resolved.relation?.computedFields ?? new Map(),
    joins: new Map(),
  };
  if (tree.join !== undefined) parseJoins(ctx, tree.join, ptr(pointer, "join"), node, scope);
  parseClauses(ctx, tree, pointer, node, scope);
  return node;
}

/** Columns of a node's rows. */
export function sourceColumns(source: Source): Column[] {
  return source.kind === "relation" ? source.relation.columns : source.columns;
}

function optionalString(v: unknown, pointer: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v === "") throw invalid(pointer, "expected a non-empty string");
  return v;
}

/** The relation a source reads rows of (for FKs and computed fields), if any. */
function sourceRelation(schema: Schema, source: Source): Relation | null {
  if (source.kind === "relation") return source.relation;
  const r = source.func.returns.relation;
  return r ? schema.relations.get(`${r.schema}.${r.name}`) ?? null : null;
}

function parseSource(
  ctx: Ctx,
  tree: Record<string, unknown>,
  pointer: string,
  sqlAlias: string,
): { source: Source; name: string; relation: Relation | null } {
  const ns = optionalString(tree.schema, ptr(pointer, "schema"));
  const relName = optionalString(tree.relation, ptr(pointer, "relation"));
  const fnName = optionalString(tree.function, ptr(pointer, "function"));
  if (relName !== undefined && fnName !== undefined) {
    throw invalid(ptr(pointer, "function"), "give either relation or function, not both");
  }
  if (relName !== undefined) {
    if (tree.arguments !== undefined) {
      throw invalid(ptr(pointer, "arguments"), "arguments are only allowed with function");
    }
    const relation = findRelation(ctx.schema, relName, ns);
    const role = ctx.opts.role;
    if (!relation || (role !== undefined && !canSelect(ctx.schema, role, relation))) {
      throw new SvcError("QUERY_UNKNOWN_RELATION", `unknown relation '${relName}'`, {
        details: { pointer: ptr(pointer, "relation") },
      });
    }
    return { source: { kind: "relation", relation }, name: relName, relation };
  }
  if (fnName === undefined) throw invalid(pointer, "a relation needs 'relation' or 'function'");
  const source = parseFunctionSource(ctx, tree, pointer, sqlAlias, fnName, ns);
  return { source, name: fnName, relation: sourceRelation(ctx.schema, source) };
}

// ---------------------------------------------------------------------------------------------
// Function-rooted queries

function parseFunctionSource(
  ctx: Ctx,
  tree: Record<string, unknown>,
  pointer: string,
  sqlAlias: string,
  fnName: string,
  ns: string | undefined,
): Source {
  const role = ctx.opts.role;
  const candidates = findFunctions(ctx.schema, fnName, ns)
    .filter((f) => role === undefined || canExecute(ctx.schema, role, f));
  if (candidates.length === 0) {
    throw new SvcError("QUERY_UNKNOWN_RELATION", `unknown function '${fnName}'`, {
      details: { pointer: ptr(pointer, "function") },
    });
  }
  const argsPointer = ptr(pointer, "arguments");
  const raw = tree.arguments ?? [];
  let named: string[] | null;
  let values: unknown[];
  if (Array.isArray(raw)) {
    named = null;
    values = raw;
  } else if (isObject(raw)) {
    named = Object.keys(raw);
    values = Object.values(raw);
  } else {
    throw invalid(argsPointer, "arguments must be an array (positional) or an object (named)");
  }
  const matching = candidates.filter((f) => acceptsArgs(f, named, values.length));
  if (matching.length === 0) {
    throw invalid(argsPointer, `no function '${fnName}' accepts these arguments`);
  }
  if (matching.length > 1) {
    throw invalid(argsPointer, `call of '${fnName}' is ambiguous; use named arguments`);
  }
  const func = matching[0];
  const columns = functionColumns(func, ptr(pointer, "function"));
  const scope: Scope = {
    alias: sqlAlias,
    name: fnName,
    columns: new Map(),
    computed: new Map(),
    joins: new Map(),
  };
  const args = values.map((v, i) => {
    const p = ptr(argsPointer, named ? named[i] : i);
    const arg = { name: named ? named[i] : null, value: parseExpr(ctx, scope, v, p, 0) };
    const decl = argumentOf(func, arg, i);
    if (decl?.type.startsWith("reg")) checkRegLiteral(arg.value, p);
    return arg;
  });
  return { kind: "function", func, args, columns };
}

/** Whether `f` can be called with these named (or `count` positional) arguments. */
function acceptsArgs(f: Func, named: string[] | null, count: number): boolean {
  if (named === null) {
    if (count > f.inArgs.length) return false;
    return f.inArgs.slice(count).every((a) => a.hasDefault);
  }
  const names = new Set(named);
  if (!named.every((n) => f.inArgs.some((a) => a.name === n))) return false;
  return f.inArgs.every((a) => a.hasDefault || (a.name !== null && names.has(a.name)));
}

/** The columns of a function's rows; scalar results are one column named after the function. */
function functionColumns(func: Func, pointer: string): Column[] {
  if (func.returns.columns) return func.returns.columns;
  const type = func.returns.type;
  if (PSEUDO_TYPES.has(type) || type.startsWith("any")) {
    throw invalid(pointer, `function '${func.name}' returning ${type} cannot be queried`);
  }
  return [{
    name: func.name,
    type,
    typeOid: func.returns.typeOid,
    category: "",
    elementType: type.endsWith("[]") ? type.slice(0, -2) : null,
    compositeOid: null,
    nullable: true,
    hasDefault: false,
    identity: null,
    generated: false,
    mandatory: false,
    comment: null,
  }];
}

/** The declared input argument a call argument binds to. */
export function argumentOf(
  func: Func,
  arg: { name: string | null },
  index: number,
): FunctionArg | undefined {
  return arg.name === null ? func.inArgs[index] : func.inArgs.find((a) => a.name === arg.name);
}

// ---------------------------------------------------------------------------------------------
// Joins

function parseJoins(
  ctx: Ctx,
  join: unknown,
  pointer: string,
  node: RelationNode,
  scope: Scope,
): void {
  if (!isObject(join)) throw invalid(pointer, "join must be an object of alias → relation");
  for (const [key, sub] of Object.entries(join)) {
    const p = ptr(pointer, key);
    const depth = node.depth + 1;
    if (depth > ctx.opts.maxDepth) {
      throw new SvcError(
        "QUERY_MAX_DEPTH_EXCEEDED",
        `join nesting deeper than ${ctx.opts.maxDepth}`,
        { details: { pointer: p } },
      );
    }
    const child = parseNode(ctx, sub, p, depth, true);
    const on = (sub as Record<string, unknown>).on;
    const jn = matchJoin(ctx, on, ptr(p, "on"), { node, scope }, child, key);
    scope.joins.set(key, jn);
    node.joins.push(jn);
  }
}

function matchJoin(
  ctx: Ctx,
  on: unknown,
  pointer: string,
  parent: { node: RelationNode; scope: Scope },
  child: RelationNode,
  key: string,
): JoinNode {
  if (!isObject(on) || Object.keys(on).length === 0) {
    throw invalid(pointer, "a joined relation needs 'on': {joined column: parent column}");
  }
  const childCols = new Map(sourceColumns(child.source).map((c) => [c.name, c]));
  const pairs: [string, string][] = [];
  for (const [c, pc] of Object.entries(on)) {
    if (typeof pc !== "string") throw invalid(ptr(pointer, c), "expected a parent column name");
    if (!childCols.has(c)) throw unknownColumn(ptr(pointer, c), `unknown column '${c}'`);
    if (!parent.scope.columns.has(pc)) {
      throw unknownColumn(ptr(pointer, c), `unknown column '${pc}'`);
    }
    pairs.push([c, pc]);
  }
  const parentRel = sourceRelation(ctx.schema, parent.node.source);
  const childRel = sourceRelation(ctx.schema, child.source);
  if (parentRel && childRel) {
    for (const fk of childRel.foreignKeys) {
      if (!sameRelation(fk.references, parentRel)) continue;
      const fkPairs = fk.columns.map((c, i) => [c, fk.references.columns[i]] as [string, string]);
      if (samePairs(pairs, fkPairs)) {
        return { key, node: child, on: pairs, direction: "incoming", fk, nullable: false };
      }
    }
    for (const fk of parentRel.foreignKeys) {
      if (!sameRelation(fk.references, childRel)) continue;
      const fkPairs = fk.columns.map((c, i) => [fk.references.columns[i], c] as [string, string]);
      if (samePairs(pairs, fkPairs)) {
        const nullable = fk.columns.some((c) => parent.scope.columns.get(c)?.nullable ?? true);
        return { key, node: child, on: pairs, direction: "outgoing", fk, nullable };
      }
    }
  }
  throw new SvcError("QUERY_BAD_JOIN", `'on' of join '${key}' matches no foreign key`, {
    details: { pointer },
  });
}

function sameRelation(a: { schema: string; relation: string }, b: Relation): boolean {
  return a.schema === b.schema && a.relation === b.name;
}

function samePairs(a: [string, string][], b: [string, string][]): boolean {
  return a.length === b.length && a.every(([x, y]) => b.some(([u, v]) => u === x && v === y));
}

// ---------------------------------------------------------------------------------------------
// Clauses

function parseClauses(
  ctx: Ctx,
  tree: Record<string, unknown>,
  pointer: string,
  node: RelationNode,
  scope: Scope,
): void {
  if (tree.where !== undefined) {
    const p = ptr(pointer, "where");
    node.where = parseExpr(ctx, scope, tree.where, p, 0);
    assertBoolean(node.where, p);
  }
  node.select = parseSelect(ctx, scope, tree.select, ptr(pointer, "select"));
  node.limit = parseCount(tree.limit, ptr(pointer, "limit"));
  node.offset = parseCount(tree.offset, ptr(pointer, "offset"));
  if (tree.order_by !== undefined) {
    node.orderBy = parseOrderBy(ctx, scope, tree.order_by, ptr(pointer, "order_by"));
  }
  if (tree.distinct_on !== undefined) {
    node.distinctOn = parseDistinctOn(ctx, scope, tree, pointer, node.orderBy);
  }
  if (tree.write_mode !== undefined) {
    const m = tree.write_mode;
    if (typeof m !== "string" || !WRITE_MODES.has(m as WriteMode)) {
      throw invalid(ptr(pointer, "write_mode"), "write_mode must be one of " + [...WRITE_MODES]);
    }
    node.writeMode = m as WriteMode;
  }
  if (tree.on_conflict !== undefined) {
    node.onConflict = parseOnConflict(scope, tree.on_conflict, ptr(pointer, "on_conflict"));
  }
}

function parseCount(v: unknown, pointer: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw invalid(pointer, "expected an integer ≥ 0");
  }
  return v;
}

function parseOnConflict(scope: Scope, v: unknown, pointer: string): string[] {
  if (!Array.isArray(v) || v.length === 0) {
    throw invalid(pointer, "on_conflict must be a non-empty array of column names");
  }
  const seen = new Set<string>();
  v.forEach((c, i) => {
    if (typeof c !== "string") throw invalid(ptr(pointer, i), "expected a column name");
    if (!scope.columns.has(c)) throw unknownColumn(ptr(pointer, i), `unknown column '${c}'`);
    if (seen.has(c)) throw invalid(ptr(pointer, i), `duplicate column '${c}'`);
    seen.add(c);
  });
  return [...seen];
}

function parseOrderBy(ctx: Ctx, scope: Scope, v: unknown, pointer: string): OrderTerm[] {
  if (!Array.isArray(v)) throw invalid(pointer, "order_by must be an array of terms");
  return v.map((t, i) => parseOrderTerm(ctx, scope, t, ptr(pointer, i)));
}

function parseOrderTerm(ctx: Ctx, scope: Scope, t: unknown, pointer: string): OrderTerm {
  if (Array.isArray(t) && t.length >= 2 && (t[0] === "asc" || t[0] === "desc")) {
    if (t.length > 3) throw invalid(pointer, "an order term is [asc|desc, expr, nulls?]");
    let nulls: OrderTerm["nulls"] = null;
    if (t.length === 3) {
      if (t[2] !== "nulls_first" && t[2] !== "nulls_last") {
        throw invalid(ptr(pointer, 2), "expected 'nulls_first' or 'nulls_last'");
      }
      nulls = t[2] === "nulls_first" ? "first" : "last";
    }
    return { expr: parseExpr(ctx, scope, t[1], ptr(pointer, 1), 0), dir: t[0], nulls };
  }
  return { expr: parseExpr(ctx, scope, t, pointer, 0), dir: "asc", nulls: null };
}

/** The expression of a raw order term (for the distinct_on prefix check). */
function rawOrderExpr(t: unknown): unknown {
  return Array.isArray(t) && t.length >= 2 && (t[0] === "asc" || t[0] === "desc") ? t[1] : t;
}

function parseDistinctOn(
  ctx: Ctx,
  scope: Scope,
  tree: Record<string, unknown>,
  pointer: string,
  orderBy: OrderTerm[],
): Expr[] {
  const p = ptr(pointer, "distinct_on");
  const v = tree.distinct_on;
  if (!Array.isArray(v)) throw invalid(p, "distinct_on must be an array of expressions");
  const order = Array.isArray(tree.order_by) ? tree.order_by : [];
  return v.map((e, i) => {
    parseExpr(ctx, scope, e, ptr(p, i), 0);
    if (i >= order.length || !sameJson(rawOrderExpr(order[i]), e)) {
      throw new SvcError(
        "QUERY_DISTINCT_ON_NOT_PREFIX",
        "distinct_on must be a leading prefix of order_by",
        { details: { pointer: ptr(p, i) } },
      );
    }
    // The very same Expr as the order term, so that both compile to the same SQL text.
    return orderBy[i].expr;
  });
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Select

function parseSelect(ctx: Ctx, scope: Scope, v: unknown, pointer: string): SelectItem[] {
  const items: SelectItem[] = [];
  if (v === undefined || v === "full") {
    items.push(...ownItems(scope), ...[...scope.joins.values()].map(joinItem));
  } else if (v === "own") {
    items.push(...ownItems(scope));
  } else if (Array.isArray(v)) {
    v.forEach((name, i) => {
      if (name === "own") items.push(...ownItems(scope));
      else if (typeof name === "string") items.push(nameItem(scope, name, ptr(pointer, i)));
      else throw invalid(ptr(pointer, i), "a select array holds names or 'own'");
    });
  } else if (isObject(v)) {
    for (const [name, e] of Object.entries(v)) {
      items.push(objectItem(ctx, scope, name, e, ptr(pointer, name)));
    }
  } else {
    throw invalid(pointer, "select must be 'full', 'own', an array or an object");
  }
  const seen = new Set<string>();
  for (const it of items) {
    if (seen.has(it.name)) throw invalid(pointer, `duplicate output name '${it.name}'`);
    seen.add(it.name);
  }
  return items;
}

function ownItems(scope: Scope): SelectItem[] {
  return [...scope.columns.values()].map((column) => ({
    name: column.name,
    value: { kind: "expr", expr: { kind: "column", scope: scope.alias, column } },
    mode: "both",
  }));
}

function joinItem(join: JoinNode): SelectItem {
  return { name: join.key, value: { kind: "join", join }, mode: "both" };
}

/** A bare name in select: a joined alias, a column or a computed field. */
function nameItem(scope: Scope, name: string, pointer: string): SelectItem {
  const join = scope.joins.get(name);
  if (join) return joinItem(join);
  return { name, value: { kind: "expr", expr: resolveName(scope, name, pointer) }, mode: "both" };
}

function objectItem(
  ctx: Ctx,
  scope: Scope,
  name: string,
  e: unknown,
  pointer: string,
): SelectItem {
  if (Array.isArray(e) && e.length === 2 && e[0] === "set") {
    const col = e[1];
    if (typeof col !== "string") throw invalid(ptr(pointer, 1), "set takes a column name");
    const column = scope.columns.get(col);
    if (!column) throw unknownColumn(ptr(pointer, 1), `unknown column '${col}'`);
    return {
      name,
      value: { kind: "expr", expr: { kind: "column", scope: scope.alias, column } },
      mode: "set",
    };
  }
  let mode: SelectItem["mode"] = "both";
  let p = pointer;
  if (Array.isArray(e) && e.length === 2 && e[0] === "get") {
    mode = "get";
    e = e[1];
    p = ptr(pointer, 1);
  }
  if (typeof e === "string" && scope.joins.has(e)) {
    return { name, value: { kind: "join", join: scope.joins.get(e)! }, mode };
  }
  const expr = parseExpr(ctx, scope, e, p, 0);
  return { name, value: { kind: "expr", expr }, mode };
}

// ---------------------------------------------------------------------------------------------
// Expressions

/** Resolves a bare name: column, then computed field. */
function resolveName(scope: Scope, name: string, pointer: string): Expr {
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
  throw unknownColumn(pointer, `unknown column '${name}'`);
}

function parseExpr(ctx: Ctx, scope: Scope, v: unknown, pointer: string, depth: number): Expr {
  if (depth > MAX_EXPR_DEPTH) throw invalid(pointer, "expression nested too deeply");
  if (v === null || typeof v === "boolean") return { kind: "literal", value: v };
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw invalid(pointer, "numbers must be finite");
    return { kind: "literal", value: v };
  }
  if (typeof v === "string") return resolveName(scope, v, pointer);
  if (!Array.isArray(v)) throw invalid(pointer, "an expression is a name, literal or array");
  if (v.length === 0) throw invalid(pointer, "empty expression array");
  const [op, ...args] = v;
  if (typeof op !== "string") {
    throw invalid(ptr(pointer, 0), "an expression array starts with an operator");
  }
  if (args.length === 0) return { kind: "literal", value: op };
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
  if (!range) throw invalid(ptr(pointer, 0), `unknown operator '${op}'`);
  arity(op, args, range[0], range[1], pointer);
  const exprs = args.map((_, i) => sub(i));
  if (op === "fts" && exprs.length === 3) checkRegLiteral(exprs[2], ptr(pointer, 3));
  if (op === "and" || op === "or" || op === "not") {
    exprs.forEach((e, i) => assertBoolean(e, ptr(pointer, i + 1)));
  }
  return { kind: "op", op, args: exprs };
}

/**
 * Object-identifier types (regconfig, regclass…) read digits as a raw OID, which reaches
 * PostgreSQL internals; literals for them must be names.
 */
function checkRegLiteral(e: Expr, pointer: string): void {
  if (e.kind !== "literal" || e.value === null) return;
  if (typeof e.value !== "string" || /^\s*[-+]?\d+\s*$/.test(e.value)) {
    throw invalid(pointer, "expected a name (e.g. a text search configuration)");
  }
}

function arity(op: string, args: unknown[], min: number, max: number, pointer: string): void {
  if (args.length < min || args.length > max) {
    const want = min === max ? `${min}` : max === Infinity ? `at least ${min}` : `${min}–${max}`;
    throw invalid(pointer, `'${op}' takes ${want} argument(s), got ${args.length}`);
  }
}

/** Rejects expressions that are certainly not boolean where a condition is expected. */
function assertBoolean(e: Expr, pointer: string): void {
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
      if (!column) throw unknownColumn(ptr(pointer, 2), `unknown column '${field}' of '${base}'`);
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
  if (!fcol) throw unknownColumn(ptr(pointer, 2), `unknown field '${field}'`);
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
  if (!join) throw unknownColumn(ptr(tp, 0), `unknown joined alias '${alias}'`);
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
 * Checks a cast target against the introspected types (an optional `(n[,m])` typmod and `[]`
 * suffixes allowed) and returns it in a form that is safe to put in SQL.
 */
function checkType(ctx: Ctx, v: unknown, pointer: string): string {
  if (typeof v !== "string") throw invalid(pointer, "expected a type name");
  const m = /^(.+?)\s*(\(\s*\d{1,9}\s*(?:,\s*\d{1,9}\s*)?\))?((?:\[\])*)$/s.exec(v.trim());
  if (!m) throw invalid(pointer, `unknown type '${v}'`);
  const base = resolveTypeName(ctx.schema.typeNames, m[1]);
  if (base === null) throw invalid(pointer, `unknown type '${v}'`);
  const typmod = m[2] ? m[2].replaceAll(/\s/g, "") : "";
  return base + typmod + m[3];
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
