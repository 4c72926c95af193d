/**
 * What the request's role may use, asked of PostgreSQL inside a transaction already running as
 * that role (so grants and revokes count at once, whatever introspection saw): which "did you
 * mean" candidates it holds a privilege on, and which relations' row types it may cast to.
 * Never used to refuse a query: PostgreSQL's grants decide that.
 */
import type { Tx } from "./tx.ts";
import type { Candidate } from "../util/suggest.ts";

const Q_USABLE = `
with need as (
  select * from jsonb_to_recordset($1::text::jsonb)
    as x(i int, relation oid, "column" text, functions oid[])
)
select array(
  select n.i from need n join pg_class c on c.oid = n.relation
  where n.functions is null
    and has_schema_privilege(c.relnamespace, 'USAGE')
    and case when n."column" is null
      then has_table_privilege(c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER')
        or has_any_column_privilege(c.oid, 'SELECT,INSERT,UPDATE,REFERENCES')
      else exists(select from pg_attribute a where a.attrelid = c.oid and a.attname = n."column"
        and a.attnum > 0 and not a.attisdropped
        and has_column_privilege(c.oid, a.attnum, 'SELECT,INSERT,UPDATE,REFERENCES'))
    end
) || array(
  select n.i from need n where n.functions is not null and exists(
    select from pg_proc p where p.oid = any(n.functions)
      and has_schema_privilege(p.pronamespace, 'USAGE')
      and has_function_privilege(p.oid, 'EXECUTE'))
) as usable`;

/**
 * The candidates (with a need) the role holds a privilege on, as indexes into `candidates`:
 * any privilege on a relation or on a column (table-level privileges count for every column),
 * EXECUTE on a function; always with USAGE on the schema.
 */
export async function usableCandidates(tx: Tx, candidates: Candidate[]): Promise<Set<number>> {
  const q = usableStatement(candidates);
  if (q === null) return new Set();
  const [row] = await tx.query(q.sql, q.params);
  return usableOf(row);
}

/**
 * The statement {@link usableCandidates} runs (for a caller that sends it in a batch of its
 * own), or null when no candidate needs asking; {@link usableOf} reads its row.
 */
export function usableStatement(
  candidates: Candidate[],
): { sql: string; params: unknown[] } | null {
  const needs: Record<string, unknown>[] = [];
  candidates.forEach((c, i) => {
    const n = c.need;
    if (n === undefined) return;
    if ("functions" in n) needs.push({ i, functions: n.functions });
    else needs.push({ i, relation: n.relation, column: "column" in n ? n.column : null });
  });
  if (needs.length === 0) return null;
  return { sql: Q_USABLE, params: [JSON.stringify(needs)] };
}

/** The candidates' indexes a row of {@link usableStatement} lists as usable. */
export function usableOf(row: Record<string, unknown> | undefined): Set<number> {
  return new Set(((row?.usable ?? []) as (number | string)[]).map(Number));
}

const Q_SELECTABLE = `
select array(
  select c.oid::int8 from pg_class c
  where c.oid = any($1::text::oid[])
    and has_schema_privilege(c.relnamespace, 'USAGE') and has_table_privilege(c.oid, 'SELECT')
) as selectable`;

/**
 * The relations (OIDs) among `relations` the role may SELECT (table-level, with USAGE on the
 * schema): their row types are cast targets for it.
 */
export async function selectableRelations(tx: Tx, relations: number[]): Promise<Set<number>> {
  const [row] = await tx.query(Q_SELECTABLE, [`{${relations.join(",")}}`]);
  return new Set((row.selectable as (number | string)[]).map(Number));
}
