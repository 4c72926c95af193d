/**
 * Names a role may plausibly mean, for "did you mean …" suggestions only (never to refuse a
 * query: PostgreSQL decides). Each carries what the role must hold for it to be suggested; the
 * HTTP layer asks PostgreSQL for the request's role before a hint is shown (docs/endpoint.md "The query
 * endpoint").
 */
import type { Schema } from "../db/schema.ts";
import type { Candidate } from "../util/suggest.ts";
import type { Source } from "./ast.ts";
import type { Scope } from "./parse_common.ts";

/** Relations (of schema `ns`, or of every schema): any privilege on the relation. */
export function relationCandidates(schema: Schema, ns?: string): Candidate[] {
  const out: Candidate[] = [];
  for (const r of schema.relations.values()) {
    if (ns === undefined || r.schema === ns) out.push({ name: r.name, need: { relation: r.oid } });
  }
  return out;
}

/** Functions (of schema `ns`, or of every schema): EXECUTE on one of the overloads. */
export function functionCandidates(schema: Schema, ns?: string): Candidate[] {
  const out: Candidate[] = [];
  for (const fns of schema.functions.values()) {
    if (ns !== undefined && fns[0].schema !== ns) continue;
    out.push({ name: fns[0].name, need: { functions: fns.map((f) => f.oid) } });
  }
  return out;
}

/**
 * The columns of a source: any privilege on the column of a relation, EXECUTE on a function
 * whose rows they are. Without a source (nothing to read yet), none.
 */
export function columnCandidates(source: Source | undefined): Candidate[] {
  if (source === undefined) return [];
  if (source.kind === "relation") {
    const oid = source.relation.oid;
    return source.relation.columns.map((c) => ({
      name: c.name,
      need: { relation: oid, column: c.name },
    }));
  }
  const need = { functions: [source.func.oid] };
  return source.columns.map((c) => ({ name: c.name, need }));
}

/**
 * What a bare name may mean in a scope: its columns, and (when asked) its computed fields
 * (EXECUTE on the function) and joined aliases (the request's own names).
 */
export function scopeCandidates(
  scope: Scope,
  more: { computed?: boolean; joins?: boolean } = {},
): Candidate[] {
  const out = columnCandidates(scope.source);
  if (more.computed) {
    for (const cf of scope.computed.values()) {
      out.push({ name: cf.name, need: { functions: [cf.oid] } });
    }
  }
  if (more.joins) { for (const k of scope.joins.keys()) out.push({ name: k }); }
  return out;
}
