/**
 * SQL text of the write statements. Pure: no I/O. Every statement is set-based: its rows arrive
 * as ONE jsonb parameter (`$1`, sent as text and cast, so that no driver re-encodes it) expanded
 * by `jsonb_to_recordset` with the introspected column types — a wrong-typed value fails in the
 * database with a 22xxx error, never in JavaScript. One statement handles any number of rows.
 *
 * Every input row carries its position `"@o"` (index of the row in its plan node), and the
 * statements return it (UPDATE … FROM, and the CTE forms that join the written rows back to the
 * input by their conflict columns), so results map to payload rows exactly — except the plain
 * INSERT, whose rows have no identity before they are inserted: there the input is sorted by
 * `"@o"` and RETURNING rows come back in that order, because PostgreSQL's ModifyTable node
 * inserts the rows of its (sorted, never parallel) subplan one at a time and projects RETURNING
 * for each as it goes. The executor checks the number of rows returned.
 *
 * Identifiers are quoted with `ident`; types are `format_type` text from the catalogs; nothing
 * from the request is spliced into SQL.
 */
import { ident } from "../db/schema.ts";

/** A column of the `jsonb_to_recordset` input of a statement. */
export interface InputColumn {
  name: string;
  /** `format_type` text of the target column. */
  type: string;
  /** match: identifies the row (WHERE / join); write: a value written. */
  role: "match" | "write";
  /** For an UPDATE: a boolean `"@p:<name>"` says per row whether the column is set (else kept). */
  flag: boolean;
}

/** What the statements need to know about their relation. */
export interface StatementTarget {
  table: string;
  relation: { schema: string; name: string; kind: string };
  keyColumns: string[];
  conflictColumns: string[];
  /** Columns read back (as text) from written rows. */
  returning: string[];
}

/** Name of the presence flag of a column in the input. */
export function flagName(column: string): string {
  return `@p:${column}`;
}

/** The quoted `schema.name` of a target. */
export function qname(t: StatementTarget): string {
  return `${ident(t.relation.schema)}.${ident(t.relation.name)}`;
}

/** `jsonb_to_recordset($n::text::jsonb) AS alias("@o" integer, "col" type, …)` (`ord`: with `"@o"`). */
export function recordset(
  columns: { name: string; type: string; flag?: boolean }[],
  alias = "x",
  param = "$1",
  ord = true,
): string {
  const defs = ord ? [`"@o" integer`] : [];
  for (const c of columns) {
    defs.push(`${ident(c.name)} ${c.type}`);
    if (c.flag) defs.push(`${ident(flagName(c.name))} boolean`);
  }
  return `jsonb_to_recordset(${param}::text::jsonb) AS ${alias}(${defs.join(", ")})`;
}

function returning(t: StatementTarget, alias = "t"): string {
  return t.returning.map((c) => `${alias}.${ident(c)}::text AS ${ident(c)}`).join(", ");
}

function matchOn(cols: string[], left: string, right: string): string {
  return cols.map((c) => `${left}.${ident(c)} = ${right}.${ident(c)}`).join(" AND ");
}

/** Multi-row INSERT; RETURNING in input order. */
export function insertStatement(t: StatementTarget, columns: InputColumn[]): string {
  const names = columns.map((c) => ident(c.name));
  const list = names.length > 0 ? ` (${names.join(", ")})` : "";
  const select = names.length > 0 ? names.map((n) => `x.${n}`).join(", ") : "";
  return `INSERT INTO ${qname(t)} AS t${list} SELECT ${select} FROM ${
    recordset(columns)
  } ORDER BY x."@o" ` +
    `RETURNING ${t.returning.length > 0 ? returning(t) : `1 AS "@1"`}`;
}

/** Multi-row UPDATE by key; a flagged column is only set in rows whose flag is true. */
export function updateStatement(t: StatementTarget, columns: InputColumn[]): string {
  const match = columns.filter((c) => c.role === "match").map((c) => c.name);
  const set = columns.filter((c) => c.role === "write").map((c) => {
    const q = ident(c.name);
    return c.flag
      ? `${q} = CASE WHEN x.${ident(flagName(c.name))} THEN x.${q} ELSE t.${q} END`
      : `${q} = x.${q}`;
  });
  return `UPDATE ${qname(t)} AS t SET ${set.join(", ")} FROM ${recordset(columns)} ` +
    `WHERE ${matchOn(match, "t", "x")} RETURNING x."@o" AS "@o", ${returning(t)}`;
}

/** The INSERT … ON CONFLICT forms, joined back to the input by the conflict columns. */
function conflictInsert(
  t: StatementTarget,
  columns: InputColumn[],
  action: string,
  extra: string,
): string {
  const names = columns.map((c) => ident(c.name));
  const back = t.conflictColumns.map((c, i) => `t.${ident(c)} AS "@m${i}"`);
  const on = t.conflictColumns.map((c, i) => `w."@m${i}" = x.${ident(c)}`).join(" AND ");
  const out = t.returning.map((c) => `w.${ident(c)}`);
  return `WITH x AS (SELECT * FROM ${recordset(columns)}), ` +
    `w AS (INSERT INTO ${qname(t)} AS t (${names.join(", ")}) SELECT ${
      names.map((n) => `x.${n}`).join(", ")
    } ` +
    `FROM x ORDER BY x."@o" ON CONFLICT (${t.conflictColumns.map(ident).join(", ")}) ${action} ` +
    `RETURNING ${[...extra ? [extra] : [], ...back, returning(t)].join(", ")}) ` +
    `SELECT ${
      ['x."@o"', ...(extra ? [`w."@ins"`] : []), ...out].join(", ")
    } FROM w JOIN x ON ${on}`;
}

/** `INSERT … ON CONFLICT (conflict columns) DO UPDATE`, telling inserted from updated rows. */
export function upsertStatement(t: StatementTarget, columns: InputColumn[]): string {
  let set = columns.filter((c) => !t.conflictColumns.includes(c.name)).map((c) => c.name);
  // With nothing else to set, set a conflict column to itself so that RETURNING yields the row.
  if (set.length === 0) set = [t.conflictColumns[0]];
  const action = `DO UPDATE SET ${set.map((c) => `${ident(c)} = EXCLUDED.${ident(c)}`).join(", ")}`;
  // xmax is 0 on a freshly inserted row version; a view has no xmax (its rows count as updated).
  const isTable = t.relation.kind === "table" || t.relation.kind === "partitioned_table";
  return conflictInsert(t, columns, action, isTable ? `(t.xmax = 0) AS "@ins"` : `false AS "@ins"`);
}

/** `INSERT … ON CONFLICT (key) DO NOTHING`: returns the inserted rows only. */
export function insertOrKeepStatement(t: StatementTarget, columns: InputColumn[]): string {
  return conflictInsert(t, columns, "DO NOTHING", "");
}

/** Reads back columns of existing rows by key. */
export function lookupStatement(t: StatementTarget, columns: InputColumn[]): string {
  const match = columns.map((c) => c.name);
  return `SELECT x."@o" AS "@o", ${returning(t)} FROM ${qname(t)} AS t JOIN ${
    recordset(columns)
  } ` +
    `ON ${matchOn(match, "t", "x")}`;
}

/** What a delete needs to know about the join to its parent. */
export interface DeleteTarget extends StatementTarget {
  /** Pairs [column of this (child) relation, column of the parent]. */
  join: { on: [string, string][] } | null;
}

/**
 * Deletes the children of the parent rows given in `$1` (matched by `match`) whose key is not
 * in `$2`; returns one row with the count `n`.
 */
export function deleteStatement(
  child: DeleteTarget,
  parent: StatementTarget,
  match: { name: string; type: string }[],
  key: { name: string; type: string }[],
): string {
  const on = child.join?.on ?? [];
  const refs = on.map(([, parentCol], i) => `t.${ident(parentCol)} AS "r${i}"`);
  const fk = on.map(([childCol], i) => `c.${ident(childCol)} = p."r${i}"`);
  const keep = key.map((k) => `k.${ident(k.name)} = c.${ident(k.name)}`);
  return `WITH p AS (SELECT DISTINCT ${refs.join(", ")} FROM ${qname(parent)} AS t JOIN ` +
    `${recordset(match, "x", "$1", false)} ON ${matchOn(match.map((m) => m.name), "t", "x")}), ` +
    `k AS (SELECT * FROM ${recordset(key, "k", "$2", false)}), ` +
    `d AS (DELETE FROM ${qname(child)} AS c USING p WHERE ${fk.join(" AND ")} ` +
    `AND NOT EXISTS (SELECT FROM k WHERE ${keep.join(" AND ")}) RETURNING 1) ` +
    `SELECT count(*)::int AS n FROM d`;
}
