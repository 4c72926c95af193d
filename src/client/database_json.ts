/**
 * GET /svc/database.json: the introspected schema as JSON (docs/endpoint.md "GET /svc/database.json"), filtered by what
 * the request's role may use, asked of PostgreSQL per request (./visible.ts: relations, their
 * columns, keys and foreign keys, computed fields and functions).
 */
import type { Column, Relation, Schema } from "../db/schema.ts";
import { View, type Visible } from "./visible.ts";

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

function relation(view: View, r: Relation) {
  return {
    name: r.name,
    kind: r.kind,
    comment: r.comment,
    columns: view.columns(r).map(column),
    primary_key: view.primaryKey(r),
    foreign_keys: view.foreignKeys(r).map((f) => ({
      name: f.name,
      columns: f.columns,
      references: {
        schema: f.references.schema,
        relation: f.references.relation,
        columns: f.references.columns,
      },
    })),
    unique: view.unique(r),
    computed_fields: view.computedFields(r).map((f) => ({ name: f.name, type: f.type })),
  };
}

/**
 * Builds the database.json document for what a role may use, `visible` (asked of PostgreSQL at
 * request time, see ./visible.ts; null: all of it). Every function the role may call is listed
 * with its `route` (docs/endpoint.md "GET /svc/database.json"), a full-control route's and a
 * middleware's too: they are called over their route.
 */
export function databaseJson(
  schema: Schema,
  visible: Visible | null,
  wellknown: WellKnownInfo[],
  routes: RouteInfo = new Map(),
): Record<string, unknown> {
  const view = new View(schema, visible);
  const schemas = new Map<string, { name: string; relations: unknown[]; functions: unknown[] }>();
  const entry = (name: string) => {
    let e = schemas.get(name);
    if (!e) schemas.set(name, e = { name, relations: [], functions: [] });
    return e;
  };
  for (const r of schema.relations.values()) {
    if (!view.relation(r)) continue;
    entry(r.schema).relations.push(relation(view, r));
  }
  for (const fns of schema.functions.values()) {
    for (const f of fns) {
      if (!view.func(f)) continue;
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
