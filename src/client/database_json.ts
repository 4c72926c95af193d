/**
 * GET /svc/database.json: the introspected schema as JSON (docs/endpoint.md "GET /svc/database.json"), filtered by what
 * the request's role may see (SELECT on relations, EXECUTE on functions, USAGE on schemas).
 */
import type { Column, Relation, Schema } from "../db/schema.ts";
import { canExecute, canSelect } from "../db/schema.ts";
import type { Visible } from "./visible.ts";

/** A well-known query as listed in database.json. */
export interface WellKnownInfo {
  name: string;
  params: Record<string, unknown>;
}

/** Route info attached to functions, by `schema.name`. */
export type RouteInfo = Map<string, Record<string, unknown>>;

function column(c: Column) {
  return {
    name: c.name,
    type: c.type,
    nullable: c.nullable,
    has_default: c.hasDefault,
    identity: c.identity,
    generated: c.generated,
    mandatory: c.mandatory,
  };
}

function relation(r: Relation) {
  return {
    name: r.name,
    kind: r.kind,
    comment: r.comment,
    columns: r.columns.map(column),
    primary_key: r.primaryKey,
    foreign_keys: r.foreignKeys.map((f) => ({
      name: f.name,
      columns: f.columns,
      references: {
        schema: f.references.schema,
        relation: f.references.relation,
        columns: f.references.columns,
      },
    })),
    unique: r.unique,
    computed_fields: [...r.computedFields.values()].map((f) => ({ name: f.name, type: f.type })),
  };
}

/**
 * Builds the database.json document for `role` (all of it when role is null). `visible`, when
 * given (asked of PostgreSQL at request time, see ./visible.ts), decides what the role is shown
 * instead of the privileges read at introspection.
 */
export function databaseJson(
  schema: Schema,
  role: string | null,
  wellknown: WellKnownInfo[],
  routes: RouteInfo = new Map(),
  visible?: Visible,
): Record<string, unknown> {
  const schemas = new Map<string, { name: string; relations: unknown[]; functions: unknown[] }>();
  const entry = (name: string) => {
    let e = schemas.get(name);
    if (!e) schemas.set(name, e = { name, relations: [], functions: [] });
    return e;
  };
  for (const r of schema.relations.values()) {
    if (visible) {
      if (!visible.relations.has(r.oid)) continue;
    } else if (role !== null && !canSelect(schema, role, r)) continue;
    entry(r.schema).relations.push(relation(r));
  }
  for (const fns of schema.functions.values()) {
    for (const f of fns) {
      if (visible) {
        if (!visible.functions.has(f.oid)) continue;
      } else if (role !== null && !canExecute(schema, role, f)) continue;
      entry(f.schema).functions.push({
        name: f.name,
        arguments: f.args.map((a) => ({
          name: a.name,
          type: a.type,
          mode: a.mode,
          has_default: a.hasDefault,
        })),
        returns: { type: f.returns.type, set: f.returns.set },
        volatility: f.volatility,
        comment: f.comment,
        route: routes.get(`${f.schema}.${f.name}`) ?? null,
      });
    }
  }
  const list = [...schemas.values()].sort((a, b) => a.name.localeCompare(b.name));
  for (const s of list) {
    (s.relations as { name: string }[]).sort((a, b) => a.name.localeCompare(b.name));
    (s.functions as { name: string }[]).sort((a, b) => a.name.localeCompare(b.name));
  }
  return { schemas: list, wellknown };
}
