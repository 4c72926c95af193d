/**
 * Which reads may run on a read replica (src/db/replicas.ts routes them): a query tree that calls
 * no VOLATILE function.
 *
 * @module
 */
import type { Expr, RelationNode } from "../compile/ast.ts";
import { findFunctions, type Schema } from "../db/schema.ts";
import { readOnlyFunctions } from "../db/replicas.ts";

/**
 * Whether a read's query tree may run on a replica: no function it reads from (root or joined)
 * and no computed field it selects, filters or orders by is VOLATILE (a VOLATILE function may
 * write; a hot standby refuses that).
 */
export function readOnlyTree(node: RelationNode, schema: Schema): boolean {
  if (node.source.kind === "function" && node.source.func.volatility === "volatile") return false;
  const exprs: Expr[] = [];
  if (node.where) exprs.push(node.where);
  for (const s of node.select) if (s.value.kind === "expr") exprs.push(s.value.expr);
  for (const o of node.orderBy) exprs.push(o.expr);
  exprs.push(...node.distinctOn);
  if (node.source.kind === "function") { for (const a of node.source.args) exprs.push(a.value); }
  if (!exprs.every((e) => readOnlyExpr(e, schema))) return false;
  return node.joins.every((j) => readOnlyTree(j.node, schema));
}

function readOnlyExpr(e: Expr, schema: Schema): boolean {
  switch (e.kind) {
    case "computed":
      // Computed fields are functions of the row type; any VOLATILE overload counts.
      return readOnlyFunctions(findFunctions(schema, e.fn, e.schema));
    case "field":
    case "cast":
      return readOnlyExpr(e.expr, schema);
    case "array":
      return e.items.every((x) => readOnlyExpr(x, schema));
    case "op":
      return e.args.every((x) => readOnlyExpr(x, schema));
    case "agg":
      return (e.expr === null || readOnlyExpr(e.expr, schema)) &&
        (e.filter === null || readOnlyExpr(e.filter, schema)) &&
        readOnlyTree(e.join.node, schema);
    default:
      return true;
  }
}
