/**
 * What a role is shown, asked of PostgreSQL at request time (so grants made after startup show at
 * once; docs/endpoint.md "GET /svc/database.json"): relations it holds any privilege on (table or
 * column SELECT/INSERT/UPDATE/DELETE/REFERENCES… ) in schemas it has USAGE on, and of those only
 * the columns it holds a column privilege on (SELECT, INSERT, UPDATE or REFERENCES); functions it
 * may EXECUTE, in schemas it has USAGE on, whose signature names no type it cannot see. Keys,
 * foreign keys and computed fields follow from them ({@link View}). Used only to narrow
 * database.json and the generated client, never to refuse a query.
 */
import type { Tx } from "../db/tx.ts";
import type { Column, ComputedField, ForeignKey, Func, Relation, Schema } from "../db/schema.ts";
import { qualified } from "../db/schema.ts";
import { Client } from "../pg/client.ts";
import { setRole } from "../auth/roles.ts";

/** OIDs of the relations and functions a role may use, and the columns it may use. */
export interface Visible {
  relations: Set<number>;
  /**
   * The column names the role may use, for the visible relations it holds no table-wide SELECT,
   * INSERT, UPDATE or REFERENCES on (a relation absent here shows every column).
   */
  columns: Map<number, Set<string>>;
  functions: Set<number>;
}

/** Privileges that make a relation visible (any of them, on the table or on one column). */
const REL_PRIVS = "'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER'";
/** Privileges that make a column visible (held on the column or on the whole table). */
const COL_PRIVS = "'SELECT,INSERT,UPDATE,REFERENCES'";

/**
 * One row: `relations` (OIDs), `columns` (`{oid: [names]}` for relations visible through column
 * privileges only), `functions` (OIDs). A function is hidden when a type its signature names
 * (arguments, result; through arrays and domains) lies in a schema without USAGE, or is the row
 * type of a relation that is not visible (or not in the model: blacklisted, outside pg.schemas).
 */
const Q_VISIBLE = `
with recursive rel as (
  select c.oid from pg_class c
  where c.relkind in ('r','v','m','p','f') and c.oid = any($1::oid[])
    and has_schema_privilege(c.relnamespace, 'USAGE')
    and (has_table_privilege(c.oid, ${REL_PRIVS})
      or has_any_column_privilege(c.oid, ${COL_PRIVS}))
), fn as (
  select p.oid, coalesce(p.proallargtypes, p.proargtypes::oid[]) || p.prorettype as types
  from pg_proc p
  where p.oid = any($2::oid[]) and has_schema_privilege(p.pronamespace, 'USAGE')
    and has_function_privilege(p.oid, 'EXECUTE')
), ty(root, oid, depth) as (
  select distinct u.t, u.t, 0 from fn, unnest(fn.types) u(t)
  union all
  select ty.root, case when t.typtype = 'd' then t.typbasetype else t.typelem end, ty.depth + 1
  from ty join pg_type t on t.oid = ty.oid
  where ty.depth < 8 and (t.typtype = 'd' or (t.typcategory = 'A' and t.typelem <> 0))
), hidden as (
  select array(
    select distinct ty.root from ty join pg_type t on t.oid = ty.oid
    left join pg_class k on k.oid = t.typrelid and k.relkind <> 'c'
    where (t.typnamespace <> 'pg_catalog'::regnamespace
        and not has_schema_privilege(t.typnamespace, 'USAGE'))
      or (k.oid is not null and k.oid not in (select oid from rel))
  ) as types
)
select array(select oid::int8 from rel) as relations, (
  select coalesce(jsonb_object_agg(r.oid::text, array(
    select a.attname::text from pg_attribute a
    where a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
      and has_column_privilege(r.oid, a.attnum, ${COL_PRIVS})
    order by a.attnum)), '{}')
  from rel r where not has_table_privilege(r.oid, ${COL_PRIVS})
) as columns, array(
  select fn.oid::int8 from fn, hidden where not (fn.types && hidden.types)
) as functions`;

/**
 * Asks, inside a transaction already running as the role, which of the given relation and
 * function OIDs (and which columns) it may use.
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
  const columns = new Map<number, Set<string>>();
  for (const [oid, names] of Object.entries(row.columns as Record<string, string[]>)) {
    columns.set(Number(oid), new Set(names));
  }
  return {
    relations: new Set((row.relations as (string | number)[]).map(Number)),
    columns,
    functions: new Set((row.functions as (string | number)[]).map(Number)),
  };
}

/**
 * What `role` is shown of `schema`, asked through a connection of its own to `uri` (for what runs
 * outside a request: the `typescript.helper_path` file): a read-only transaction switched to the
 * role, as a request's is.
 */
export async function visibleAs(
  uri: string,
  role: string,
  schema: Schema,
  statementTimeout: number | string = 0,
): Promise<Visible> {
  const client = new Client(uri, { applicationName: "svc-visible", maxStatements: 0 });
  try {
    return await client.begin(async (c) => {
      await c.execute([setRole({ role, claims: null }, statementTimeout)]);
      return await visibleTo(
        { query: (sql, params) => c.query(sql, params, false) },
        ...schemaOids(schema),
      );
    }, "read only");
  } finally {
    await client.close();
  }
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

const NONE: ReadonlySet<number> = new Set();

/**
 * A text naming exactly what a {@link Visible} shows (sorted), so that two requests shown the
 * same thing share one generated file.
 */
export function visibleKey(v: Visible): string {
  const sorted = (s: Iterable<number>) => [...s].sort((a, b) => a - b).join(",");
  const cols = [...v.columns].sort((a, b) => a[0] - b[0])
    .map(([oid, names]) => `${oid}:${JSON.stringify([...names].sort())}`);
  return `${sorted(v.relations)}|${sorted(v.functions)}|${cols.join(",")}`;
}

/**
 * A schema model as one role sees it (`visible`; null: everything, as the model holds it): the
 * one rule database.json and database.ts both describe by. A relation shows the columns the role
 * may use; a primary key or unique key only when all its columns show; a foreign key only when
 * both relations and all its columns (on either side) show; a computed field or function only
 * when the role may call it ({@link Visible}); a function as a query root ({@link View.queryable})
 * only when `/svc` calls it too: not one of `hidden`, the functions `/svc` answers as unknown
 * (full-control routes, middleware, SSO callbacks: src/query/envelope_functions.ts, the same set
 * the query parser is given as `hiddenFunctions`).
 */
export class View {
  /**
   * The view of `visible` (null: everything) over `schema`, leaving out of the queryable functions
   * the OIDs in `hidden`.
   */
  constructor(
    readonly schema: Schema,
    readonly visible: Visible | null,
    readonly hidden: ReadonlySet<number> = NONE,
  ) {}

  /** Whether the relation shows. */
  relation(r: Relation): boolean {
    return this.visible === null || this.visible.relations.has(r.oid);
  }

  /** Whether the function (or computed field, by its OID) shows. */
  func(f: Func | { oid: number }): boolean {
    return this.visible === null || this.visible.functions.has(f.oid);
  }

  /**
   * Whether the function shows as one a query may be rooted at (`{"function": …}`): the role may
   * call it ({@link func}) and `/svc` does not refuse it (`hidden`).
   */
  queryable(f: Func): boolean {
    return !this.hidden.has(f.oid) && this.func(f);
  }

  /** Whether a column of a shown relation shows. */
  column(r: Relation, name: string): boolean {
    if (!r.columnMap.has(name)) return false;
    const only = this.visible?.columns.get(r.oid);
    return only === undefined || only.has(name);
  }

  /** The columns of a shown relation that show, in their order. */
  columns(r: Relation): Column[] {
    const only = this.visible?.columns.get(r.oid);
    return only === undefined ? r.columns : r.columns.filter((c) => only.has(c.name));
  }

  /** The primary key when all its columns show, else none (`[]`). */
  primaryKey(r: Relation): string[] {
    return r.primaryKey.every((c) => this.column(r, c)) ? r.primaryKey : [];
  }

  /** The unique keys all of whose columns show. */
  unique(r: Relation): string[][] {
    return r.unique.filter((k) => k.every((c) => this.column(r, c)));
  }

  /** Whether a foreign key shows: both relations, its columns and the referenced ones. */
  foreignKey(fk: ForeignKey): boolean {
    const from = this.schema.relations.get(qualified(fk.schema, fk.relation));
    const to = this.schema.relations.get(qualified(fk.references.schema, fk.references.relation));
    return from !== undefined && to !== undefined && this.relation(from) && this.relation(to) &&
      fk.columns.every((c) => this.column(from, c)) &&
      fk.references.columns.every((c) => this.column(to, c));
  }

  /** The foreign keys a shown relation holds that show. */
  foreignKeys(r: Relation): ForeignKey[] {
    return r.foreignKeys.filter((fk) => this.foreignKey(fk));
  }

  /** The foreign keys pointing at a shown relation that show. */
  referencedBy(r: Relation): ForeignKey[] {
    return r.referencedBy.filter((fk) => this.foreignKey(fk));
  }

  /** The computed fields of a shown relation the role may call. */
  computedFields(r: Relation): ComputedField[] {
    return [...r.computedFields.values()].filter((f) => this.func(f));
  }
}
