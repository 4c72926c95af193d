/**
 * SQL text of the write statements: one builder per kind of statement (INSERT, UPDATE, INSERT …
 * ON CONFLICT DO UPDATE / DO NOTHING, lookup, DELETE of omitted children or root rows). Pure: no
 * I/O; compile.ts decides which statements a write runs and with which values.
 *
 * Every statement is a plain statement of its own, run in order in the request's transaction, so
 * it sees what the statements before it wrote (RLS policies, triggers and constraints of a child
 * see its parent). Its rows arrive as ONE jsonb parameter (sent as text and cast, so that no
 * driver re-encodes it) expanded by `jsonb_to_recordset` with the introspected column types (or,
 * when every value is a scalar, as `json` by `json_to_recordset`, which reads them alike for less) —
 * a wrong-typed value fails in the database with a 22xxx error, never in JavaScript. Every input row
 * carries its position `"@o"` (index of the row in its plan node); the input is in `"@o"` order.
 *
 * Values only the database knows (a generated key) flow between statements inside the database:
 * a statement whose rows others need stores each returned column (the key first) in the
 * transaction-local setting {@link valuesSetting} of its statement index and column — a
 * PostgreSQL `text[]` literal with one element per input row, in input order: the column's value
 * as text, or NULL for a row it did not write (a kept `ON CONFLICT DO NOTHING` row; a written row
 * always has its key). A statement needing them reads each setting once (`::text[]`, much
 * cheaper for PostgreSQL than a JSON document) and takes each row's value by position (the input
 * field `"@s<statement>"`). UPDATE
 * returns `x."@o"` and the ON CONFLICT forms join the written rows back to the input by their
 * conflict columns; a plain INSERT has no identity before it is inserted: its input is sorted by
 * `"@o"` and RETURNING rows come back in that order (ModifyTable inserts the rows of its sorted
 * subplan one at a time, the CTE's tuple store keeps them in that order), so the n-th returned row
 * is the n-th input row — and the count is checked.
 *
 * A check (an UPDATE whose key matched no row, a kept row that does not exist, an INSERT that
 * returned another number of rows than it was given, a value taken from a row that was not
 * written) raises inside its statement: `invalid input syntax for type integer:
 * "<marker>:<check>:<row>"`, a cast of a marker text, which compile.ts maps back to its
 * QUERY_INVALID and pointer.
 *
 * Identifiers are quoted with `ident`; types are `format_type` text from the catalogs; nothing
 * from the request is spliced into SQL.
 */
import { ident } from "../db/schema.ts";
import { RETURNED } from "../compile/sql.ts";

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
  relation: { schema: string; name: string; kind: string };
  keyColumns: string[];
  conflictColumns: string[];
  /** Columns read back (as text) from written rows, the key first. */
  returning: string[];
}

/** A value of an input column taken at run time from the rows an earlier statement stored. */
export interface FillSource {
  /** Column of the input receiving the value. */
  column: string;
  /** Statement and the index of the source column in its returned columns (its setting). */
  statement: number;
  index: number;
  /** Check raised when the source row has no stored values (the row's position is the value). */
  check: number;
  /**
   * The source statement stored many rows ({@link BULK_ROWS} or more): its values are read as a
   * jsonb array (constant-time elements) rather than a text[] (whose subscript walks the array,
   * quadratic over a bulk write, but cheapest for a few rows).
   */
  bulk?: boolean;
}

/** Rows a statement stores from which its readers take a jsonb array (see FillSource.bulk). */
export const BULK_ROWS = 200;

/** The shared parts of a rows statement. */
export interface RowsSpec {
  target: StatementTarget;
  columns: InputColumn[];
  fills: FillSource[];
  /** The statement's index: its setting when it stores its rows ({@link valuesSetting}). */
  index: number;
  /** Whether later statements need its rows (it stores them). */
  store: boolean;
  /** A process-unique marker of check failures (see the module comment). */
  marker: string;
  /** The check raised by this statement (update, lookup: missing rows; insert: row counts). */
  check: number;
  /**
   * Whether the input is read as `json` instead of `jsonb` (cheaper for PostgreSQL: no `jsonb`
   * document is built, and numbers reach their columns' input functions as written). Only for
   * inputs of scalar values in plain decimal notation, which both read alike: no array, composite,
   * `json` or `jsonb` column (`jsonb` renders nested values and `json` columns its own way).
   */
  json?: boolean;
  /**
   * Whether the statement has exactly one input row (set for a root's statement only): an INSERT
   * then needs no `ORDER BY` to keep the payload order (a sort set up for one row costs PostgreSQL
   * ≈ 20k instructions).
   */
  single?: boolean;
}

/**
 * The transaction-local setting holding returned column `column` (index in the statement's
 * returned columns, the key first) of the rows statement `index` stored: a `text[]` literal.
 */
export function valuesSetting(index: number, column: number): string {
  return `svc.w_${index}_${column}`;
}

/**
 * The transaction-local setting holding key column `column` of the root keys of the last write
 * (payload order), a `text[]` literal.
 */
export function rootKeysSetting(column: number): string {
  return `svc.write_root_keys_${column}`;
}

/** Name of the presence flag of a column in the input. */
export function flagName(column: string): string {
  return `@p:${column}`;
}

/** The quoted `schema.name` of a target. */
export function qname(t: { relation: { schema: string; name: string } }): string {
  return `${ident(t.relation.schema)}.${ident(t.relation.name)}`;
}

/**
 * `jsonb_to_recordset($n::text::jsonb) AS alias("@o" integer, "col" type, …)` (`ord`: with `"@o"`;
 * `json`: `json_to_recordset($n::text::json)`, see {@link RowsSpec.json}).
 */
export function recordset(
  columns: { name: string; type: string; flag?: boolean }[],
  alias = "x",
  param = "$1",
  ord = true,
  json = false,
): string {
  const defs = ord ? [`"@o" integer`] : [];
  for (const c of columns) {
    defs.push(`${ident(c.name)} ${c.type}`);
    if (c.flag) defs.push(`${ident(flagName(c.name))} boolean`);
  }
  const fn = json ? "json" : "jsonb";
  return `${fn}_to_recordset(${param}::text::${fn}) AS ${alias}(${defs.join(", ")})`;
}

/** Name of the input field holding a row's position in the rows statement `index` stored. */
export function sourceField(index: number): string {
  return `@s${index}`;
}

/** A check failure: raises when `row` (an integer expression) is not null. */
function raise(marker: string, check: number, row: string): string {
  return `CASE WHEN ${row} IS NOT NULL THEN ('${marker}:${check}:' || ${row})::int END`;
}

/**
 * The input rows: `SELECT r."@o", <column values> FROM jsonb_to_recordset(…) AS r …`, a value
 * filled at run time taken from the setting of the statement that stored it (each setting read
 * once). A source row that was not written (its key NULL) fails the fill's check.
 */
function input(spec: RowsSpec, param = "$1"): string {
  const sources = [...new Set(spec.fills.map((f) => f.statement))];
  const defs = [
    ...spec.columns,
    ...sources.map((k) => ({ name: sourceField(k), type: "integer" })),
  ];
  const cols = spec.columns.map((c) => {
    const q = ident(c.name);
    const flag = c.flag ? `, r.${ident(flagName(c.name))}` : "";
    const fills = spec.fills.filter((f) => f.column === c.name);
    if (fills.length === 0) return `r.${q}${flag}`;
    // A row takes the column from at most one statement; a source row without values fails.
    const cases = fills.map((f) => {
      const at = `r.${ident(sourceField(f.statement))}`;
      // The stored values as a jsonb array made once (an init plan: an uncorrelated scalar
      // sub-select), its elements reached in constant time. A text[] subscript walked the array
      // to the element, and a joined sub-select could run again for every row: quadratic in the
      // rows of a bulk write (found by a hostile probe).
      const stored = (i: number) =>
        f.bulk
          ? `(${storedValues(f.statement, i)} ->> ${at})`
          : `"s${f.statement}"."c${i}"[${at} + 1]`;
      // In the ELSE branch the position is not null: the check raises without testing it again.
      return `CASE WHEN ${at} IS NULL THEN NULL WHEN ${stored(0)} IS NOT NULL THEN ` +
        `${stored(f.index)}::${c.type} ELSE CASE WHEN ('${spec.marker}:${f.check}:' || ${at})` +
        `::int = 0 THEN NULL END::${c.type} END`;
    });
    return `coalesce(${[...cases, `r.${q}`].join(", ")}) AS ${q}${flag}`;
  });
  // A few stored rows: each source's text[] read once by a joined sub-select (cheapest then).
  const small = [...new Set(spec.fills.filter((f) => !f.bulk).map((f) => f.statement))];
  const joins = small.map((k) => {
    const used = new Set([
      0,
      ...spec.fills.filter((f) => f.statement === k && !f.bulk).map((f) => f.index),
    ]);
    const read = [...used].sort((a, b) => a - b).map((i) =>
      `current_setting('${valuesSetting(k, i)}')::text[] AS "c${i}"`
    );
    return ` CROSS JOIN (SELECT ${read.join(", ")} OFFSET 0) AS "s${k}"`;
  });
  return `SELECT ${['r."@o"', ...cols].join(", ")} FROM ${
    recordset(defs, "r", param, true, spec.json)
  }${joins.join("")}`;
}

/** The values column `i` of statement `k` stored, as a jsonb array computed once (an init plan). */
function storedValues(k: number, i: number): string {
  return `(SELECT to_jsonb(current_setting('${valuesSetting(k, i)}')::text[]))`;
}

function returning(t: StatementTarget, alias = "t"): string {
  return t.returning.map((c) => `${alias}.${ident(c)}::text AS ${ident(c)}`).join(", ");
}

function matchOn(cols: string[], left: string, right: string): string {
  return cols.map((c) => `${left}.${ident(c)} = ${right}.${ident(c)}`).join(" AND ");
}

/**
 * `set_config(<setting of the statement and column>, <values of rel in order>)` per returned
 * column (`"s0"`, `"s1"`, …); NULL elements where `when` fails.
 */
function storeExpr(
  spec: RowsSpec,
  rel: string,
  order: string | null,
  when?: string,
  cast = "",
): string {
  return spec.target.returning.map((c, i) => {
    const v = `${rel}.${ident(c)}${cast}`;
    const value = when ? `CASE WHEN ${when} THEN ${v} END` : v;
    return `set_config('${valuesSetting(spec.index, i)}', coalesce(array_agg(${value}${
      order ? ` ORDER BY ${order}` : ""
    }), '{}')::text, true) AS "s${i}"`;
  }).join(", ");
}

/**
 * Multi-row INSERT in input order. Without a store: a plain `INSERT … SELECT` (its command
 * count is the inserted count). With one, `$2` is the number of input rows (checked).
 */
export function insertStatement(spec: RowsSpec): string {
  const t = spec.target;
  const names = spec.columns.map((c) => ident(c.name));
  const list = names.length > 0 ? ` (${names.join(", ")})` : "";
  const head = `INSERT INTO ${qname(t)} AS t${list} SELECT ${
    names.map((n) => `x.${n}`).join(", ")
  } FROM (${input(spec)}) AS x${spec.single ? "" : ` ORDER BY x."@o"`}`;
  if (!spec.store) return head;
  // The count check as `raise` would build it, with the comparison written once.
  const counted = `CASE WHEN count(*) <> $2::int THEN ('${spec.marker}:${spec.check}:' || ` +
    `count(*))::int END`;
  return `WITH w AS (${head} RETURNING ${returning(t)}) ` +
    `SELECT count(*)::int AS "i", 0 AS "u", 0 AS "d", ${counted} AS "c", ${
      storeExpr(spec, "w", null)
    } FROM w`;
}

/**
 * A plain INSERT (no store) that answers the write itself: `WITH "svc_w" AS (INSERT … RETURNING
 * <columns>) <select>`, `select` reading `"svc_w"` (its rows' JSON, built as the read-back
 * builds them, its row-size cap included). The returned rows come in input order (see the module
 * comment), which the select keeps: it only scans them. Its command count is the inserted count.
 */
export function insertAnswerStatement(spec: RowsSpec, columns: string[], select: string): string {
  const ret = columns.map((c) => `t.${ident(c)}`).join(", ");
  return `WITH ${ident(RETURNED)} AS (${
    insertStatement({ ...spec, store: false })
  } RETURNING ${ret}) ` +
    `SELECT "svc_b"."j"::text AS "j" FROM (${select}) AS "svc_b"`;
}

/** Multi-row UPDATE by key; a flagged column is only set in rows whose flag is true. */
export function updateStatement(spec: RowsSpec): string {
  const t = spec.target;
  const match = spec.columns.filter((c) => c.role === "match").map((c) => c.name);
  const set = spec.columns.filter((c) => c.role === "write").map((c) => {
    const q = ident(c.name);
    return c.flag
      ? `${q} = CASE WHEN x.${ident(flagName(c.name))} THEN x.${q} ELSE t.${q} END`
      : `${q} = x.${q}`;
  });
  const missing =
    `(SELECT min(x."@o") FROM x WHERE NOT EXISTS (SELECT FROM w WHERE w."@o" = x."@o"))`;
  return `WITH x AS (${input(spec)}), ` +
    `w AS (UPDATE ${qname(t)} AS t SET ${set.join(", ")} FROM x WHERE ${
      matchOn(match, "t", "x")
    } ` +
    `RETURNING x."@o" AS "@o", ${returning(t)}) ` +
    `SELECT 0 AS "i", count(*)::int AS "u", 0 AS "d", ${
      raise(spec.marker, spec.check, missing)
    } AS "c"${spec.store ? `, ${storeExpr(spec, "w", `w."@o"`)}` : ""} FROM w`;
}

/** The INSERT … ON CONFLICT forms, joined back to the input by the conflict columns. */
/**
 * How an upsert tells inserted rows from updated ones: by an expression of the returned row
 * (a table's `xmax`), or, through a view (no system columns), by whether the statement's snapshot
 * — which never sees the statement's own writes — held a row with the returned conflict values.
 */
type Inserted = { returning: string } | "unseen" | null;

function conflictInsert(spec: RowsSpec, action: string, inserted: Inserted): string {
  const t = spec.target;
  const names = spec.columns.map((c) => ident(c.name));
  const back = t.conflictColumns.map((c, i) => `t.${ident(c)} AS "@m${i}"`);
  const on = t.conflictColumns.map((c, i) => `w."@m${i}" = x.${ident(c)}`).join(" AND ");
  const ret = [
    ...(inserted && inserted !== "unseen" ? [`${inserted.returning} AS "@ins"`] : []),
    ...back,
    returning(t),
  ];
  const ins = inserted === "unseen"
    ? `NOT EXISTS (SELECT FROM ${qname(t)} AS e WHERE ${
      t.conflictColumns.map((c, i) => `e.${ident(c)} = w."@m${i}"`).join(" AND ")
    })`
    : `w."@ins"`;
  const insert = `INSERT INTO ${qname(t)} AS t (${names.join(", ")}) SELECT ${
    names.map((n) => `x.${n}`).join(", ")
  } FROM x${spec.single ? "" : ` ORDER BY x."@o"`} ON CONFLICT (${
    t.conflictColumns.map(ident).join(", ")
  }) ${action} RETURNING ${ret.join(", ")}`;
  // With a store, every input row in order with what was written for it (nothing: a kept row).
  const written = spec.store ? `w."@m0" IS NOT NULL` : "true";
  const count = (cond: string) => `count(*) FILTER (WHERE ${cond})::int`;
  const counts = inserted
    ? `${count(`${written} AND ${ins}`)} AS "i", ${count(`${written} AND NOT ${ins}`)} AS "u"`
    : `${count(written)} AS "i", 0 AS "u"`;
  const store = spec.store ? `, ${storeExpr(spec, "w", `x."@o"`, written)}` : "";
  return `WITH x AS (${input(spec)}), w AS (${insert}) SELECT ${counts}, 0 AS "d"${store} FROM ${
    spec.store ? `x LEFT JOIN w ON ${on}` : "w"
  }`;
}

/**
 * `INSERT … ON CONFLICT (conflict columns) DO UPDATE`, telling inserted from updated rows. A key
 * column is never set on the matched row (docs/query.md: a key value is never changed by an
 * update): a row matched by another unique key keeps its own key, which its children refer to.
 */
export function upsertStatement(spec: RowsSpec): string {
  const t = spec.target;
  let set = spec.columns
    .filter((c) => !t.conflictColumns.includes(c.name) && !t.keyColumns.includes(c.name))
    .map((c) => c.name);
  // With nothing else to set, set a conflict column to itself so that RETURNING yields the row.
  if (set.length === 0) set = [t.conflictColumns[0]];
  const action = `DO UPDATE SET ${set.map((c) => `${ident(c)} = EXCLUDED.${ident(c)}`).join(", ")}`;
  // xmax is 0 on a freshly inserted row version; a view has no xmax.
  const isTable = t.relation.kind === "table" || t.relation.kind === "partitioned_table";
  return conflictInsert(spec, action, isTable ? { returning: "(t.xmax = 0)" } : "unseen");
}

/** `INSERT … ON CONFLICT (key) DO NOTHING`: returns the inserted rows only. */
export function insertOrKeepStatement(spec: RowsSpec): string {
  return conflictInsert(spec, "DO NOTHING", null);
}

/** Reads the returned columns of existing rows by key; every row must be found. */
export function lookupStatement(spec: RowsSpec): string {
  const t = spec.target;
  const match = spec.columns.map((c) => c.name);
  const found = `t.${ident(match[0])} IS NOT NULL`;
  const missing = `min(x."@o") FILTER (WHERE NOT (${found}))`;
  return `WITH x AS (${input(spec)}) SELECT 0 AS "i", 0 AS "u", 0 AS "d", ${
    raise(spec.marker, spec.check, missing)
  } AS "c"${
    spec.store ? `, ${storeExpr(spec, "t", `x."@o"`, found, "::text")}` : ""
  } FROM x LEFT JOIN ${qname(t)} AS t ON ${matchOn(match, "t", "x")}`;
}

/**
 * Stores the root keys in payload order in {@link rootKeysSetting} (one per key column) from
 * `$1`: one entry per root row, its key values, or `[statement, position]` of the stored row
 * holding them.
 */
export function rootKeysStatement(keyColumns: number, statements: number[]): string {
  // Each storing statement's values read once, as jsonb arrays (constant-time elements; reading
  // the setting per entry parsed it whole each time: quadratic, found by a hostile probe).
  const stored = (i: number) =>
    statements.length === 0
      ? "NULL"
      : `CASE (a.e ->> 0)::int ${
        statements.map((k) => `WHEN ${k} THEN ${storedValues(k, i)} ->> (a.e ->> 1)::int`)
          .join(" ")
      } END`;
  const sets = Array.from(
    { length: keyColumns },
    (_, i) =>
      `set_config('${rootKeysSetting(i)}', coalesce(array_agg(CASE WHEN jsonb_typeof(a.e -> 0) = ` +
      `'array' THEN a.e -> 0 ->> ${i} ELSE ${stored(i)} END ORDER BY a.o), '{}')::text, true) ` +
      `AS "r${i}"`,
  );
  return `SELECT ${
    sets.join(", ")
  } FROM jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS a(e, o)`;
}

/**
 * Deletes the children of the parent rows given in `$1` (matched by `match`) whose key is not in
 * `$2` (its command count is the deleted count).
 */
export function deleteChildrenStatement(
  child: StatementTarget,
  on: [string, string][],
  parent: StatementTarget,
  match: { name: string; type: string }[],
  key: { name: string; type: string }[],
): string {
  const refs = on.map(([, parentCol], i) => `t.${ident(parentCol)} AS "r${i}"`);
  const fk = on.map(([childCol], i) => `c.${ident(childCol)} = p."r${i}"`);
  return `DELETE FROM ${qname(child)} AS c USING (SELECT DISTINCT ${refs.join(", ")} FROM ${
    qname(parent)
  } AS t JOIN ${recordset(match, "x", "$1", false)} ON ${
    matchOn(match.map((m) => m.name), "t", "x")
  }) AS p WHERE ${fk.join(" AND ")} AND ${keepClause(key, "c", "$2")}`;
}

/**
 * Deletes the rows of a root relation matching `where` (a condition over `alias`) whose key is
 * not in `keyParam` (its command count is the deleted count).
 */
export function deleteRootStatement(
  target: StatementTarget,
  alias: string,
  where: string,
  key: { name: string; type: string }[],
  keyParam: string,
): string {
  return `DELETE FROM ${qname(target)} AS ${ident(alias)} WHERE ${where} AND ${
    keepClause(key, ident(alias), keyParam)
  }`;
}

function keepClause(key: { name: string; type: string }[], alias: string, param: string): string {
  const keep = key.map((k) => `k.${ident(k.name)} = ${alias}.${ident(k.name)}`);
  return `NOT EXISTS (SELECT FROM ${recordset(key, "k", param, false)} WHERE ${
    keep.join(" AND ")
  })`;
}
