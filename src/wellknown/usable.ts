/**
 * Whether a role may run a well-known query: it may use every relation its tree reads and every
 * function it calls (root, joins, computed fields). The generated client (src/client/generate.ts)
 * and database.json describe only the well-known queries a role may run: one over relations it
 * cannot read would describe their columns (docs/endpoint.md, "svc describes nothing the role
 * cannot read").
 *
 * @module
 */
import type { RelationNode } from "../compile/ast.ts";
import type { Func, Relation, Schema } from "../db/schema.ts";

/** What a role may use: a relation (to read), a function (to call). */
export interface Can {
  relation(r: Relation): boolean;
  func(f: Func): boolean;
}

/** Whether a well-known query's tree uses only what `can` allows. */
export function wellKnownUsable(schema: Schema, node: RelationNode, can: Can): boolean {
  const src = node.source;
  if (src.kind === "relation" ? !can.relation(src.relation) : !can.func(src.func)) return false;
  for (const name of computedIn([node.select, node.where, node.orderBy, node.distinctOn])) {
    if (!(schema.functions.get(name) ?? []).some((f) => can.func(f))) return false;
  }
  return node.joins.every((j) => wellKnownUsable(schema, j.node, can));
}

/** `schema.fn` of every computed field in expression trees (plain objects and arrays). */
function computedIn(trees: unknown[]): Set<string> {
  const out = new Set<string>();
  const seen = new Set<unknown>();
  const stack = [...trees];
  while (stack.length) {
    const v = stack.pop();
    if (v === null || typeof v !== "object" || seen.has(v)) continue;
    seen.add(v);
    if (Array.isArray(v)) {
      stack.push(...v);
      continue;
    }
    const o = v as Record<string, unknown>;
    if (o.kind === "computed" && typeof o.schema === "string" && typeof o.fn === "string") {
      out.add(`${o.schema}.${o.fn}`);
    }
    for (const [k, x] of Object.entries(o)) {
      // Schema objects (columns, relations) hold no expression.
      if (k !== "column" && k !== "relation" && k !== "func") stack.push(x);
    }
  }
  return out;
}
