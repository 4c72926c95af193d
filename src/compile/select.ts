/**
 * The select, order_by and distinct_on clauses of a relation node.
 */
import { invalid, SvcError } from "../svc_error.ts";
import type { Expr, JoinNode, OrderTerm, SelectItem } from "./ast.ts";
import { parseExpr, resolveName } from "./expr.ts";
import { scopeCandidates } from "./candidates.ts";
import { type Ctx, isObject, ptr, type Scope, unknownColumn } from "./parse_common.ts";

/** Parses an order_by array. */
export function parseOrderBy(ctx: Ctx, scope: Scope, v: unknown, pointer: string): OrderTerm[] {
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
  // `-name` is descending, as in the GET form (one grammar), unless `-name` is itself a column.
  if (
    typeof t === "string" && t.length > 1 && t.startsWith("-") && !scope.columns.has(t) &&
    !scope.computed.has(t)
  ) {
    return { expr: parseExpr(ctx, scope, t.slice(1), pointer, 0), dir: "desc", nulls: null };
  }
  return { expr: parseExpr(ctx, scope, t, pointer, 0), dir: "asc", nulls: null };
}

/** The expression of a raw order term (for the distinct_on prefix check). */
function rawOrderExpr(t: unknown, scope: Scope): unknown {
  if (typeof t === "string" && t.length > 1 && t.startsWith("-") && !scope.columns.has(t)) {
    return t.slice(1);
  }
  return Array.isArray(t) && t.length >= 2 && (t[0] === "asc" || t[0] === "desc") ? t[1] : t;
}

/** Parses distinct_on, which must be a prefix of order_by. */
export function parseDistinctOn(
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
    if (i >= order.length || !sameJson(rawOrderExpr(order[i], scope), e)) {
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

/** Parses a select clause into output items. */
export function parseSelect(ctx: Ctx, scope: Scope, v: unknown, pointer: string): SelectItem[] {
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
  // A name in select is never a literal: an unknown one is most often a relation not joined.
  const otherwise = `; a select item is a column, a computed field or an alias declared under ` +
    `'join' (to select a related relation: "join": {${JSON.stringify(name)}: {"relation": …}})`;
  const expr = resolveName(scope, name, pointer, otherwise);
  return { name, value: { kind: "expr", expr }, mode: "both" };
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
    if (!column) throw unknownColumn(ptr(pointer, 1), col, scopeCandidates(scope));
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
