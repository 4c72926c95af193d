/**
 * Whether a role may run a well-known query: it may use every relation its tree reads, every
 * column of them it names (select, where, order, joins) and every function it calls (root, joins,
 * computed fields). The generated client (src/client/generate.ts) and database.json describe only
 * the well-known queries a role may run: one over relations or columns it cannot read would
 * describe them (docs/endpoint.md, "svc describes nothing the role cannot read").
 *
 * @module
 */
import type { RelationNode } from "../compile/ast.ts";
import type { Func, Relation, Schema } from "../db/schema.ts";

/** What a role may use: a relation (to read), a column of it, a function (to call). */
export interface Can {
  relation(r: Relation): boolean;
  /** Whether it may use a column of a relation (absent: every column of a relation it may use). */
  column?(r: Relation, name: string): boolean;
  func(f: Func): boolean;
}

/** Whether a well-known query's tree uses only what `can` allows. */
export function wellKnownUsable(schema: Schema, node: RelationNode, can: Can): boolean {
  return nodeUsable(schema, node, can) && (can.column === undefined || columnsUsable(node, can));
}

function nodeUsable(schema: Schema, node: RelationNode, can: Can): boolean {
  const src = node.source;
  if (src.kind === "relation" ? !can.relation(src.relation) : !can.func(src.func)) return false;
  for (const name of computedIn([node.select, node.where, node.orderBy, node.distinctOn])) {
    if (!(schema.functions.get(name) ?? []).some((f) => can.func(f))) return false;
  }
  return node.joins.every((j) => nodeUsable(schema, j.node, can));
}

/** Whether every relation column the tree names (by scope, joined, or in a join's `on`) is usable. */
function columnsUsable(root: RelationNode, can: Can): boolean {
  const byScope = new Map<string, Relation>();
  const nodes = [root];
  const used: [Relation, string][] = [];
  while (nodes.length) {
    const n = nodes.pop()!;
    const rel = n.source.kind === "relation" ? n.source.relation : null;
    if (rel) byScope.set(n.sqlAlias, rel);
    for (const j of n.joins) {
      const child = j.node.source.kind === "relation" ? j.node.source.relation : null;
      for (const [c, p] of j.on) {
        if (child) used.push([child, c]);
        if (rel) used.push([rel, p]);
      }
      nodes.push(j.node);
    }
  }
  eachObject([root], (o) => {
    const column = o.column as { name?: unknown } | undefined;
    if (o.kind === "column" && typeof o.scope === "string" && typeof column?.name === "string") {
      const rel = byScope.get(o.scope);
      if (rel) used.push([rel, column.name]);
    } else if (o.kind === "joined" && typeof column?.name === "string") {
      const src = (o.join as { node: RelationNode }).node.source;
      if (src.kind === "relation") used.push([src.relation, column.name]);
    }
  });
  return used.every(([r, c]) => can.column!(r, c));
}

/**
 * Calls `visit` on every plain object in the trees (arrays walked through, each object once),
 * never descending into schema objects (columns, relations, functions: they hold no expression).
 */
function eachObject(trees: unknown[], visit: (o: Record<string, unknown>) => void): void {
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
    visit(o);
    for (const [k, x] of Object.entries(o)) {
      if (k !== "column" && k !== "relation" && k !== "func" && k !== "columns") stack.push(x);
    }
  }
}

/** `schema.fn` of every computed field in expression trees (plain objects and arrays). */
function computedIn(trees: unknown[]): Set<string> {
  const out = new Set<string>();
  eachObject(trees, (o) => {
    if (o.kind === "computed" && typeof o.schema === "string" && typeof o.fn === "string") {
      out.add(`${o.schema}.${o.fn}`);
    }
  });
  return out;
}
