/**
 * Keys, foreign keys and column facts of views, derived from the relations behind them
 * (docs/query.md "Views"): a view each of whose rows is one row of one relation
 * (src/db/view_origins.ts) — a table, or such a view in turn — takes that relation's primary key
 * and unique keys when it shows all of their columns, and (with no trigger or rule on the way)
 * the facts of the table's columns it shows; a foreign key between two tables links every pair of
 * such views (or a view and a table) showing its columns on both sides, both exposed. Pure: no I/O.
 *
 * @module
 */
import type { ForeignKey, Relation } from "./schema.ts";
import type { ViewOrigin } from "./view_origins.ts";

/** A foreign key between two relations as the catalogs hold it (exposed or not). */
export interface TableForeignKey {
  name: string;
  from: Relation;
  columns: string[];
  to: Relation;
  refColumns: string[];
}

/** A view over a relation: for each column of the relation the view shows, its view column. */
interface Over {
  view: Relation;
  columns: Map<string, string>;
}

/** The relation (not a view) behind a view, and its columns the view shows. */
interface Base {
  table: Relation;
  columns: Map<string, string>;
}

/** Views nested deeper than this are not followed (PostgreSQL has no limit; cycles are impossible). */
const MAX_DEPTH = 32;

/**
 * Adds to the views of `byOid` the keys and foreign keys their relations give them (see the module
 * comment). `attNames`: column names by relation OID and attribute number.
 */
export function deriveViewKeys(
  byOid: Map<number, Relation>,
  origins: Map<number, ViewOrigin>,
  attNames: Map<number, Map<number, string>>,
  tableFks: TableForeignKey[],
  exposed: (r: Relation) => boolean,
): void {
  /**
   * The relation a view reads row for row and the columns of it the view shows, as [view column,
   * source column] pairs in view order; null when the view is not such a view.
   */
  const shownBy = (oid: number): { src: Relation; pairs: [string, string][] } | null => {
    const o = origins.get(oid);
    const src = o?.source != null ? byOid.get(o.source) : undefined;
    const names = attNames.get(oid);
    const srcNames = o?.source != null ? attNames.get(o.source) : undefined;
    if (!o || !src || !names || !srcNames) return null;
    const pairs: [string, string][] = [];
    for (const [resno, origin] of o.columns) {
      if (origin.rel !== o.source) continue;
      const from = srcNames.get(origin.attnum);
      const to = names.get(resno);
      if (from !== undefined && to !== undefined) pairs.push([to, from]);
    }
    return { src, pairs };
  };

  const bases = new Map<number, Base | null>();
  const baseOf = (oid: number, depth: number): Base | null => {
    if (bases.has(oid)) return bases.get(oid)!;
    bases.set(oid, null);
    const shown = depth < MAX_DEPTH ? shownBy(oid) : null;
    let out: Base | null = null;
    if (shown) {
      const src = shown.src;
      // Column of the relation read → the first view column showing it.
      const direct = new Map<string, string>();
      for (const [to, from] of shown.pairs) if (!direct.has(from)) direct.set(from, to);
      if (src.kind !== "view") out = { table: src, columns: direct };
      else {
        const inner = baseOf(src.oid, depth + 1);
        if (inner) {
          const columns = new Map<string, string>();
          for (const [t, s] of inner.columns) {
            const v = direct.get(s);
            if (v !== undefined) columns.set(t, v);
          }
          out = { table: inner.table, columns };
        }
      }
    }
    bases.set(oid, out);
    return out;
  };

  const filtered = (oid: number, depth: number): boolean | undefined => {
    const o = origins.get(oid);
    if (!o || depth >= MAX_DEPTH) return undefined;
    if (o.filtered) return true;
    const src = o.source !== null ? byOid.get(o.source) : undefined;
    return src?.kind === "view" ? filtered(src.oid, depth + 1) : false;
  };

  /**
   * Gives a view the column facts of the relation it reads row for row (see {@link takeFacts}),
   * that relation's first when it is a view: a view's own `DEFAULT` at any level counts, and every
   * view column showing a column takes its facts (one shown twice included). True when done.
   */
  const factsDone = new Map<number, boolean>();
  const columnFacts = (oid: number, depth: number): boolean => {
    const v = byOid.get(oid);
    if (!v) return false;
    if (v.kind !== "view") return true;
    if (factsDone.has(oid)) return factsDone.get(oid)!;
    factsDone.set(oid, false);
    const shown = depth < MAX_DEPTH && !v.userTriggers && !v.hasRules ? shownBy(oid) : null;
    const src = shown?.src;
    let done = false;
    if (
      shown && src && columnFacts(src.oid, depth + 1) &&
      (src.kind !== "view" || src.columnsFromTable === true)
    ) {
      takeFacts(v, src, new Map(shown.pairs));
      done = true;
    }
    factsDone.set(oid, done);
    return done;
  };

  const views = new Map<Relation, Over[]>();
  for (const view of byOid.values()) {
    if (view.kind !== "view") continue;
    view.filtersRows = filtered(view.oid, 0);
    const base = baseOf(view.oid, 0);
    if (!base) continue;
    let list = views.get(base.table);
    if (!list) views.set(base.table, list = []);
    list.push({ view, columns: base.columns });
    const shown = (cols: string[]) =>
      cols.length > 0 && cols.every((c) => base.columns.has(c))
        ? cols.map((c) => base.columns.get(c)!)
        : null;
    columnFacts(view.oid, 0);
    const pk = shown(base.table.primaryKey);
    if (view.primaryKey.length === 0 && pk) view.primaryKey = pk;
    for (const u of base.table.unique) {
      const key = shown(u);
      if (key && !view.unique.some((k) => k.join("\0") === key.join("\0"))) view.unique.push(key);
    }
  }

  for (const fk of tableFks) {
    const froms: (Over | { view: Relation; columns: null })[] = [
      { view: fk.from, columns: null },
      ...views.get(fk.from) ?? [],
    ];
    const tos: (Over | { view: Relation; columns: null })[] = [
      { view: fk.to, columns: null },
      ...views.get(fk.to) ?? [],
    ];
    for (const f of froms) {
      for (const t of tos) {
        if (f.columns === null && t.columns === null) continue; // the tables' own key
        if (!exposed(f.view) || !exposed(t.view)) continue;
        const columns = f.columns ? fk.columns.map((c) => f.columns.get(c)) : fk.columns;
        const refs = t.columns ? fk.refColumns.map((c) => t.columns.get(c)) : fk.refColumns;
        if (columns.includes(undefined) || refs.includes(undefined)) continue;
        const derived: ForeignKey = {
          name: fk.name,
          schema: f.view.schema,
          relation: f.view.name,
          columns: columns as string[],
          references: { schema: t.view.schema, relation: t.view.name, columns: refs as string[] },
        };
        f.view.foreignKeys.push(derived);
        t.view.referencedBy.push(derived);
      }
    }
  }
}

/**
 * A view over one relation row for row, written as PostgreSQL writes an auto-updatable view: an
 * omitted column takes the view's own default, else the relation's; a NOT NULL column refuses
 * null; identity and generated columns stay what they are; a column computed by the view is not
 * updatable. Its columns are given those facts from `src`'s columns they show (`shows`: view
 * column → source column; the catalogs record none of them for a view).
 */
function takeFacts(view: Relation, src: Relation, shows: Map<string, string>): void {
  // A column shown twice (`value, value AS value2`) is given by either: neither is mandatory.
  const times = new Map<string, number>();
  for (const from of shows.values()) times.set(from, (times.get(from) ?? 0) + 1);
  for (const c of view.columns) {
    const from = shows.get(c.name);
    const t = from === undefined ? undefined : src.columnMap.get(from);
    if (!t) {
      c.generated = true;
      c.mandatory = false;
      continue;
    }
    c.nullable = t.nullable;
    c.hasDefault = c.hasDefault || t.hasDefault;
    c.identity = t.identity;
    c.generated = t.generated;
    c.mandatory = !c.nullable && !c.hasDefault && c.identity === null && !c.generated &&
      times.get(from!) === 1;
  }
  view.columnsFromTable = true;
}
