/**
 * The query-tree parser: validates a JSON Relation tree (docs/query.md "Reading: the Relation")
 * against the Schema model and produces the resolved AST of ./ast.ts. Every failure is a
 * SvcError with a code of docs/query.md "Errors" and `details.pointer`, the JSON pointer of the offending
 * node in the request.
 */
import type { Column, Func, Relation, Schema } from "../db/schema.ts";
import { callNotation, findFunctions, findRelation } from "../db/schema.ts";
import { didYouMean, SuggestingError } from "../util/suggest.ts";
import {
  columnCandidates,
  functionCandidates,
  relationCandidates,
  scopeCandidates,
} from "./candidates.ts";
import { invalid, SvcError } from "../svc_error.ts";
import type { JoinNode, RelationNode, Source, WriteMode } from "./ast.ts";
import { assertBoolean, checkRegLiteral, parseExpr } from "./expr.ts";
import {
  argumentOf,
  type Ctx,
  isObject,
  NeedRowTypes,
  optionalString,
  type ParseOptions,
  ptr,
  type Scope,
  sourceColumns,
  sourceRelation,
  unknownColumn,
} from "./parse_common.ts";
import { parseDistinctOn, parseOrderBy, parseSelect } from "./select.ts";

export { argumentOf, type ParseOptions, ptr, sourceColumns } from "./parse_common.ts";

/** Fields of a ComplexQuery (a request around a query) that a Relation does not take. */
const REQUEST_FLAGS = new Set([
  "query",
  "data",
  "count",
  "stats",
  "sql",
  "query_plan",
  "rollback",
  "returns",
]);
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
/**
 * Validates a JSON Relation tree against the schema and resolves it into a RelationNode.
 * Throws SvcError (QUERY_INVALID, QUERY_UNKNOWN_RELATION, QUERY_UNKNOWN_COLUMN, QUERY_BAD_JOIN,
 * QUERY_MAX_DEPTH_EXCEEDED, QUERY_DISTINCT_ON_NOT_PREFIX) with `details.pointer`.
 */
export function parseQuery(schema: Schema, tree: unknown, opts: ParseOptions): RelationNode {
  const ctx: Ctx = {
    schema,
    opts,
    next: 0,
    fieldColumns: new WeakMap(),
    pendingRowTypes: new Set(),
  };
  let node: RelationNode;
  try {
    node = parseNode(ctx, tree, opts.pointer ?? "", 0, false);
  } catch (e) {
    // Whether a row type is a target decides which error comes first: ask, then parse again.
    if (ctx.pendingRowTypes.size > 0) throw new NeedRowTypes([...ctx.pendingRowTypes]);
    // Without a role (a well-known query at load) every name may be suggested.
    if (e instanceof SuggestingError && opts.role === undefined) e.settle(() => true);
    throw e;
  }
  if (ctx.pendingRowTypes.size > 0) throw new NeedRowTypes([...ctx.pendingRowTypes]);
  return node;
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
    if (!allowed.has(k)) {
      // Field names are svc's own, public: a hint is safe to give anyone.
      const flag = !joined && REQUEST_FLAGS.has(k)
        ? `; '${k}' is a field of the request, beside its query: ` +
          `{"query": {"relation": …}, ${JSON.stringify(k)}: …}`
        : didYouMean(k, allowed);
      throw invalid(ptr(pointer, k), `unknown relation field '${k}'${flag}`);
    }
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
    source: node.source,
    columns: new Map(sourceColumns(node.source).map((c) => [c.name, c])),
    computed: resolved.relation?.computedFields ?? new Map(),
    joins: new Map(),
  };
  if (tree.join !== undefined) parseJoins(ctx, tree.join, ptr(pointer, "join"), node, scope);
  parseClauses(ctx, tree, pointer, node, scope);
  return node;
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
    // No privilege check here: PostgreSQL's grants and RLS decide (svc has no authorization
    // layer of its own, docs/endpoint.md); only blacklisted or absent relations are unknown.
    const relation = findRelation(ctx.schema, relName, ns);
    const unknown = () =>
      new SuggestingError(
        "QUERY_UNKNOWN_RELATION",
        relName,
        relationCandidates(ctx.schema, ns),
        (hint) => `unknown relation '${relName}'${hint}`,
        { pointer: ptr(pointer, "relation") },
      );
    if (!relation) throw unknown();
    ctx.opts.found?.push({
      candidate: { name: relName, need: { relation: relation.oid } },
      unknown,
    });
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
  const hidden = ctx.opts.hiddenFunctions;
  const found = findFunctions(ctx.schema, fnName, ns);
  const candidates = hidden ? found.filter((f) => !hidden.has(f.oid)) : found;
  const unknown = () =>
    new SuggestingError(
      "QUERY_UNKNOWN_RELATION",
      fnName,
      functionCandidates(ctx.schema, ns),
      (hint) => `unknown function '${fnName}'${hint}`,
      { pointer: ptr(pointer, "function") },
    );
  if (candidates.length === 0) throw unknown();
  ctx.opts.found?.push({
    candidate: { name: fnName, need: { functions: candidates.map((f) => f.oid) } },
    unknown,
  });
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
  if (named === null) return { kind: "function", func, args, columns };
  const how = callNotation(func, new Set(named));
  if (how.kind === "impossible") throw invalid(argsPointer, how.reason);
  if (how.kind === "named") return { kind: "function", func, args, columns };
  // A VARIADIC function with arguments left to their defaults: the leading ones, by position.
  const index = (name: string | null) => func.inArgs.findIndex((a) => a.name === name);
  const positional = args.toSorted((a, b) => index(a.name) - index(b.name))
    .map((a) => ({ name: null, value: a.value }));
  return { kind: "function", func, args: positional, columns };
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
    const ons = joiningOns(ctx, parent.node, child);
    throw invalid(
      pointer,
      "a joined relation needs 'on': {joined column: parent column}" +
        (ons.length > 0 ? `; the foreign keys between them join with ${ons.join(" or ")}` : ""),
    );
  }
  const childCols = new Map(sourceColumns(child.source).map((c) => [c.name, c]));
  const pairs: [string, string][] = [];
  for (const [c, pc] of Object.entries(on)) {
    if (typeof pc !== "string") throw invalid(ptr(pointer, c), "expected a parent column name");
    if (!childCols.has(c)) {
      throw unknownColumn(ptr(pointer, c), c, columnCandidates(child.source));
    }
    if (!parent.scope.columns.has(pc)) {
      throw unknownColumn(ptr(pointer, c), pc, scopeCandidates(parent.scope));
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
  const ons = joiningOns(ctx, parent.node, child);
  const hint = ons.length > 0
    ? `; the foreign keys between them join with 'on': ${ons.join(" or ")}`
    : "; no foreign key links these two relations";
  throw new SvcError("QUERY_BAD_JOIN", `'on' of join '${key}' matches no foreign key${hint}`, {
    details: { pointer },
  });
}

/** The foreign keys that join `child` to `parent`, as the `on` (JSON) that would name each. */
function joiningOns(ctx: Ctx, parent: RelationNode, child: RelationNode): string[] {
  const parentRel = sourceRelation(ctx.schema, parent.source);
  const childRel = sourceRelation(ctx.schema, child.source);
  const ons: string[] = [];
  if (!parentRel || !childRel) return ons;
  for (const fk of childRel.foreignKeys) {
    if (!sameRelation(fk.references, parentRel)) continue;
    ons.push(
      JSON.stringify(Object.fromEntries(fk.columns.map((c, i) => [c, fk.references.columns[i]]))),
    );
  }
  for (const fk of parentRel.foreignKeys) {
    if (!sameRelation(fk.references, childRel)) continue;
    ons.push(
      JSON.stringify(Object.fromEntries(fk.columns.map((c, i) => [fk.references.columns[i], c]))),
    );
  }
  return ons;
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
  // Expressions computed for every row (see Ctx.perRow).
  ctx.perRow = true;
  try {
    node.select = parseSelect(ctx, scope, tree.select, ptr(pointer, "select"));
    node.limit = parseCount(tree.limit, ptr(pointer, "limit"));
    node.offset = parseCount(tree.offset, ptr(pointer, "offset"));
    if (tree.order_by !== undefined) {
      node.orderBy = parseOrderBy(ctx, scope, tree.order_by, ptr(pointer, "order_by"));
    }
    if (tree.distinct_on !== undefined) {
      node.distinctOn = parseDistinctOn(ctx, scope, tree, pointer, node.orderBy);
    }
  } finally {
    ctx.perRow = false;
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
    if (!scope.columns.has(c)) throw unknownColumn(ptr(pointer, i), c, scopeCandidates(scope));
    if (seen.has(c)) throw invalid(ptr(pointer, i), `duplicate column '${c}'`);
    seen.add(c);
  });
  return [...seen];
}
