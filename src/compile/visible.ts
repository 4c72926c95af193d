/**
 * Names a role may plausibly mean, for "did you mean …" suggestions only (never to refuse a
 * query: PostgreSQL decides). Based on the privileges seen at the last introspection.
 */
import { canExecute, canSelect, type Schema } from "../db/schema.ts";

/** Relation names the role could see at introspection (all of them when role is undefined). */
export function visibleRelationNames(schema: Schema, role?: string, ns?: string): string[] {
  const out: string[] = [];
  for (const r of schema.relations.values()) {
    if (ns !== undefined && r.schema !== ns) continue;
    if (role === undefined || canSelect(schema, role, r)) out.push(r.name);
  }
  return out;
}

/** Function names the role could execute at introspection (all when role is undefined). */
export function visibleFunctionNames(schema: Schema, role?: string, ns?: string): string[] {
  const out: string[] = [];
  for (const fns of schema.functions.values()) {
    const f = fns[0];
    if (ns !== undefined && f.schema !== ns) continue;
    if (role === undefined || fns.some((x) => canExecute(schema, role, x))) out.push(f.name);
  }
  return out;
}
