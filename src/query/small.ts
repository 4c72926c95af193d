/**
 * The small-read decision: a read known to return at most one fetch batch runs begin, role
 * switch, query and commit in one batch (one round trip); any other read opens a cursor.
 *
 * @module
 */
import type { RelationNode } from "../compile/ast.ts";
import { FETCH_BATCH } from "../db/run_as.ts";

/** Whether a read returns at most one fetch batch: a small limit, or a unique key pinned by `=`. */
export function isSmall(node: RelationNode): boolean {
  if (node.limit !== null && node.limit <= FETCH_BATCH) return true;
  if (node.source.kind !== "relation" || node.where === null || node.distinctOn.length > 0) {
    return false;
  }
  const rel = node.source.relation;
  const conjuncts = node.where.kind === "op" && node.where.op === "and"
    ? node.where.args
    : [node.where];
  const pinned = new Set<string>();
  for (const c of conjuncts) {
    if (c.kind !== "op" || c.op !== "=" || c.args.length !== 2) continue;
    const [a, b] = c.args;
    const value = (e: typeof a) => e.kind === "literal" || e.kind === "param";
    const col = a.kind === "column" && value(b) ? a : b.kind === "column" && value(a) ? b : null;
    if (col && col.kind === "column" && col.scope === node.sqlAlias) pinned.add(col.column.name);
  }
  const keys = rel.primaryKey.length ? [rel.primaryKey, ...rel.unique] : rel.unique;
  return keys.some((k) => k.length > 0 && k.every((c) => pinned.has(c)));
}
