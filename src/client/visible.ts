/**
 * What a role may use, asked of PostgreSQL at request time (so grants made after startup show at
 * once): relations it holds any privilege on (table or column SELECT/INSERT/UPDATE/DELETE/
 * REFERENCES… ) and functions it may EXECUTE, in schemas it has USAGE on. Used only to narrow
 * database.json and the generated client, never to refuse a query.
 */
import type { Tx } from "../db/tx.ts";
import type { Schema } from "../db/schema.ts";

/** OIDs of the relations and functions a role may use. */
export interface Visible {
  relations: Set<number>;
  functions: Set<number>;
}

const Q_VISIBLE = `
select array(
  select c.oid::int8 from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where c.relkind in ('r','v','m','p','f') and c.oid = any($1::oid[])
    and has_schema_privilege(n.oid, 'USAGE')
    and (has_table_privilege(c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER')
      or has_any_column_privilege(c.oid, 'SELECT,INSERT,UPDATE,REFERENCES'))
) as relations, array(
  select p.oid::int8 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
  where p.oid = any($2::oid[]) and has_schema_privilege(n.oid, 'USAGE')
    and has_function_privilege(p.oid, 'EXECUTE')
) as functions`;

/**
 * Asks, inside a transaction already running as the role, which of the given relation and
 * function OIDs it may use.
 */
export async function visibleTo(
  tx: Tx,
  relationOids: number[],
  functionOids: number[],
): Promise<Visible> {
  const [row] = await tx.query(Q_VISIBLE, [
    `{${relationOids.join(",")}}`,
    `{${functionOids.join(",")}}`,
  ]);
  return {
    relations: new Set((row.relations as (string | number)[]).map(Number)),
    functions: new Set((row.functions as (string | number)[]).map(Number)),
  };
}

/** The OIDs of a schema model's relations and functions (arguments of {@link visibleTo}). */
export function schemaOids(schema: Schema): [number[], number[]] {
  let oids = OIDS.get(schema);
  if (!oids) {
    const rels = [...schema.relations.values()].map((r) => r.oid);
    const fns = [...schema.functions.values()].flat().map((f) => f.oid);
    OIDS.set(schema, oids = [rels, fns]);
  }
  return oids;
}

const OIDS = new WeakMap<Schema, [number[], number[]]>();
