/**
 * Exposed schemas (`pg.schemas`): the introspected model keeps only the relations, functions
 * (routes and computed fields included), foreign keys between kept relations, and cast targets of
 * those schemas (pg_catalog's data types stay castable, and so does another schema's type that a
 * kept column or function argument has). Everything downstream — the query
 * compiler and its "did you mean" suggestions, routes, well-known queries, database.json and
 * database.ts — reads the model, so an object outside them answers exactly like one that does
 * not exist (404 QUERY_UNKNOWN_RELATION, 400 QUERY_UNKNOWN_TYPE).
 *
 * @module
 */
import type { Schema } from "./schema.ts";
import { log } from "../observe/log.ts";

/**
 * Narrows `schema` (in place, and returns it) to the schemas in `exposed`; unset or empty keeps
 * every schema. Logs a warning for a listed schema that does not exist.
 */
export function exposeSchemas(schema: Schema, exposed: readonly string[] | undefined): Schema {
  if (!exposed || exposed.length === 0) return schema;
  const keep = new Set(exposed);
  const shown = (ns: string) => keep.has(ns);
  for (const ns of keep) {
    if (!schema.schemas.includes(ns)) {
      log.warn("pg.schemas: schema {schema} does not exist (or is blacklisted)", { schema: ns });
    }
  }
  for (const [key, rel] of schema.relations) {
    if (!shown(rel.schema)) schema.relations.delete(key);
  }
  const kept = (s: string, r: string) => schema.relations.has(`${s}.${r}`);
  for (const rel of schema.relations.values()) {
    rel.foreignKeys = rel.foreignKeys.filter((fk) =>
      kept(fk.references.schema, fk.references.relation)
    );
    rel.referencedBy = rel.referencedBy.filter((fk) => kept(fk.schema, fk.relation));
    for (const [name, cf] of rel.computedFields) {
      if (!shown(cf.schema)) rel.computedFields.delete(name);
    }
  }
  for (const [key, fns] of schema.functions) {
    if (!shown(fns[0].schema)) schema.functions.delete(key);
  }
  if (schema.castTargets) {
    const oids = new Set([...schema.relations.values()].map((r) => r.oid));
    // A type of another schema that an exposed column or function argument has (an enum or a
    // domain kept with the tables, say) is named by database.json already: it stays castable.
    const used = new Set<string>();
    const use = (type: string) => used.add(type.replace(/(\[\])+$/, ""));
    for (const rel of schema.relations.values()) for (const c of rel.columns) use(c.type);
    for (const fns of schema.functions.values()) {
      for (const f of fns) for (const a of f.args) use(a.type);
    }
    const usedTargets = new Set(
      [...schema.castTargets].filter(([name]) => used.has(name)).map(([, t]) => t),
    );
    for (const [name, t] of schema.castTargets) {
      const relation = t.relation === undefined || oids.has(t.relation);
      const hidden = t.schema !== "pg_catalog" && !shown(t.schema) && !usedTargets.has(t);
      if (hidden || !relation) schema.castTargets.delete(name);
    }
  }
  if (schema.tsConfigs) {
    for (const name of schema.tsConfigs) {
      const dot = name.indexOf(".");
      if (dot > 0 && name.slice(0, dot) !== "pg_catalog" && !shown(name.slice(0, dot))) {
        schema.tsConfigs.delete(name);
      }
    }
  }
  schema.schemas = schema.schemas.filter(shown);
  return schema;
}

/** The settings {@link checkExposedConfig} reads. */
export interface ExposedConfigKeys {
  pg: { schemas?: string[] };
  route: Record<string, unknown>;
}

/**
 * Checks `pg.schemas` against the configuration: a route declared in configuration must live
 * in an exposed schema. Returns an error message, or null.
 */
export function checkExposedConfig(cfg: ExposedConfigKeys): string | null {
  const exposed = cfg.pg.schemas;
  if (!exposed || exposed.length === 0) return null;
  for (const ns of Object.keys(cfg.route)) {
    if (!exposed.includes(ns)) {
      return `route.${ns}.*: schema ${ns} is not in pg.schemas (${exposed.join(", ")})`;
    }
  }
  return null;
}
