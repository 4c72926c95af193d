/**
 * The write planner: turns a validated query (RelationNode) and a write payload (`data`, which
 * mirrors what reading the query returns) into a WritePlan — every row to write, what to do with
 * it, where its foreign keys come from, and the set-based statements to run, in order.
 * Pure: no I/O. `compileWrite` (compile.ts) turns the plan into SQL, `executeWrite` (execute.ts)
 * or the request pool's pipeline runs it.
 *
 * Semantics (the write rules of docs/query.md and docs/endpoint.md's write section):
 * - Shape: the root is an array of objects; an incoming join key holds an array, an outgoing join
 *   key an object or null; keys are the select's output names. An unknown key is QUERY_INVALID
 *   (pointer into data). `get`-marked items, computed fields and other expressions, generated
 *   columns and GENERATED ALWAYS identity columns are read-only: their payload values are ignored
 *   (a key column's value is still used to identify the row, never written).
 * - Key of a relation: its primary key (a view without one: `on_conflict`). The select of every
 *   written relation must contain its key columns (and `on_conflict` columns for upsert), or they
 *   must be filled by a join of the select (an incoming child's foreign key columns, a parent's
 *   foreign key columns from an outgoing join); else QUERY_NOT_WRITABLE.
 * - A row "carries its key" when every key column has a non-null value (given or filled).
 * - Row actions by write mode:
 *   - insert: insert. A row carrying a GENERATED ALWAYS identity key cannot be inserted: QUERY_INVALID.
 *   - upsert: carrying the `on_conflict` columns → `INSERT … ON CONFLICT DO UPDATE` (when a
 *     conflict column is GENERATED ALWAYS identity, which can never be inserted explicitly: a
 *     plain UPDATE by it); otherwise insert.
 *   - merge: carrying the key → update (natural keys, with no default or identity: upsert, since
 *     the key cannot tell new rows from existing ones); otherwise insert. A row whose update would
 *     set nothing is only kept. Under a parent row that exists, existing children the payload
 *     omits are deleted.
 *   - merge-new: carrying the key → kept unchanged (natural keys: `INSERT … ON CONFLICT DO
 *     NOTHING`); otherwise insert; omitted existing children are deleted.
 *   - readonly: never written, nor anything under it. An outgoing readonly join's object must
 *     carry the referenced key; it sets the parent's foreign key (`null` clears it).
 *   A root in merge or merge-new whose query has a `where` deletes the existing rows matching it
 *   that the payload omits (the `where` scopes the root as the foreign key scopes a child; with
 *   limit/offset/distinct_on too: QUERY_NOT_WRITABLE); without `where` the root deletes nothing.
 *   Outgoing joins never delete the referenced row.
 *   A view's key is natural only when its columns take their facts from its table
 *   (Relation.columnsFromTable) and it leaves no row out.
 * - Deletes: for each parent row that may exist (updated, kept, upserted) and whose payload carries
 *   the join (an empty array deletes every child), children not carried by key anywhere under the
 *   node are deleted (a child moved to another parent of the payload is updated, not deleted).
 *   Children of deleted rows are left to the database's foreign keys (CASCADE, or a 23503 error).
 *   A join with where/limit/offset/distinct_on would delete rows its read hides: QUERY_NOT_WRITABLE.
 * - A foreign key column filled by a join overrides a value the payload gives for it.
 * - A row to update whose key matches no row is QUERY_INVALID (merge never inserts a row carrying a
 *   generated key). Two rows of one statement with the same key must carry the same values (they
 *   are written once, e.g. two tracks linking one genre object), else QUERY_INVALID.
 * - Order: deletes first, deepest relation first (the root's last); then, depth-first, every outgoing (referenced)
 *   relation before the relation referencing it, a parent before its incoming children; keys flow
 *   through fills (child foreign key ← parent key; parent foreign key ← referenced row's key).
 * - Rows to insert must provide every mandatory column (a filled foreign key counts), else
 *   QUERY_MANDATORY_COLUMN_MISSING.
 */
import type { JoinNode, RelationNode, SelectItem } from "../compile/ast.ts";
import type { Column, Relation } from "../db/schema.ts";
import { invalid, SvcError } from "../svc_error.ts";
import { checkValue, isObject, type JsonValue } from "./values.ts";
import { buildSteps } from "./steps.ts";
import type { PlanNode, PlanRow, WritePlan } from "./plan_types.ts";
import { escapePointer as esc, NO_FILLS, NodeRows } from "./plan_rows.ts";

export type { JsonValue } from "./values.ts";
export type { InputColumn } from "./statements.ts";
export type {
  DeleteStep,
  Fill,
  PlanNode,
  PlanRow,
  RowAction,
  RowsStep,
  Stat,
  WritePlan,
  WriteStep,
} from "./plan_types.ts";

/** A select item seen from the payload. */
type Item =
  | { kind: "column"; column: Column; readOnly: boolean }
  | { kind: "join"; join: JoinNode; readOnly: boolean }
  | { kind: "ignored" };

/**
 * The payload objects of one query node, as arrays (no object per row): each value, the index of
 * its parent row (none at the root) and its index in the payload array holding it (none for a
 * join's one object; the root's: its own index).
 */
interface Inputs {
  values: unknown[];
  parentRows: number[] | null;
  places: number[] | null;
  /** The rows of the parent node and the join's name (null at the root). */
  up: NodeRows | null;
  key: string | null;
}

interface Ctx {
  nodes: PlanNode[];
  rec?: PlanRecorder;
  /** The rows' first `writes`: empty, shared by every row of the plan (see {@link withWrite}). */
  noWrites: ReadonlySet<string>;
  /** The payload's pointer (`/data`). */
  base: string;
}

/**
 * The write sets made from each by adding one column. Rows writing the same columns share one
 * set, as objects of one shape share a hidden class: a bulk write of flat rows costs one set, not
 * a set per row (≈ 150 bytes each). The sets of a plan go with it.
 */
const nextWrites = new WeakMap<ReadonlySet<string>, Map<string, ReadonlySet<string>>>();

/** `writes` with `column` added: `writes` itself when it has it, else the one shared set. */
function withWrite(writes: ReadonlySet<string>, column: string): ReadonlySet<string> {
  if (writes.has(column)) return writes;
  let next = nextWrites.get(writes);
  if (!next) nextWrites.set(writes, next = new Map());
  let to = next.get(column);
  if (!to) {
    const made = new Set(writes);
    made.add(column);
    next.set(column, to = made);
  }
  return to;
}

/**
 * What planning records to make a plan template (template.ts): where each payload value of a row
 * is in the walk of the payload, and the value checks run, in order.
 */
export interface PlanRecorder {
  /** Index in the walk of the first key of each payload object. */
  base: Map<object, number>;
  /** The checkValue calls run: [walk index, table, column, row pointer, key]. */
  checks: [number, string, Column, string, string][];
  /** False once planning decided something from a value beyond its nullness. */
  eligible: boolean;
}

/**
 * Plans a write of `data` through the query `node`. `pointer` is the JSON pointer of `data` in
 * the request (default `/data`). Throws SvcError (QUERY_INVALID, QUERY_NOT_WRITABLE,
 * QUERY_MANDATORY_COLUMN_MISSING) and nothing else.
 */
export function planWrite(
  node: RelationNode,
  data: unknown,
  pointer = "/data",
  opts: { readBack?: boolean; record?: PlanRecorder } = {},
): WritePlan {
  if (!Array.isArray(data)) throw invalid(pointer, "data must be an array of rows");
  const ctx: Ctx = { nodes: [], rec: opts.record, noWrites: new Set(), base: pointer };
  const root = newNode(ctx, node, null, null, []);
  processNode(ctx, root, node, {
    values: data,
    parentRows: null,
    places: null,
    up: null,
    key: null,
  });
  for (const n of ctx.nodes) n.returning = returningOf(ctx, n);
  // Without a read-back (`returns: none`), a plain insert of one relation needs no column back:
  // an INSERT-only table (no SELECT privilege) can then be written.
  if (opts.readBack === false && ctx.nodes.length === 1 && root.query.writeMode === "insert") {
    root.returning = [];
  }
  return { root, nodes: ctx.nodes, steps: buildSteps(ctx.nodes, root) };
}

function tableName(rel: Relation): string {
  return `${rel.schema}.${rel.name}`;
}

function newNode(
  ctx: Ctx,
  q: RelationNode,
  parent: PlanNode | null,
  join: JoinNode | null,
  path: string[],
): PlanNode {
  if (q.source.kind !== "relation") {
    throw new SvcError("QUERY_NOT_WRITABLE", `${q.name} is a function: it cannot be written`, {
      details: { pointer: q.pointer },
    });
  }
  const rel = q.source.relation;
  const table = tableName(rel);
  const key = rel.primaryKey.length > 0 ? [...rel.primaryKey] : [...(q.onConflict ?? [])];
  if (key.length === 0) {
    throw new SvcError(
      "QUERY_NOT_WRITABLE",
      `${table} has no primary key: it cannot be written (a view needs on_conflict naming its key)`,
      { details: { pointer: q.pointer, relation: table } },
    );
  }
  for (const c of key) {
    if (!rel.columnMap.has(c)) {
      throw invalid(`${q.pointer}/on_conflict`, `${table} has no column "${c}"`);
    }
  }
  let conflict = key;
  if (q.writeMode === "upsert" && q.onConflict) {
    conflict = [...q.onConflict];
    const same = (a: string[]) =>
      a.length === conflict.length && a.every((c) => conflict.includes(c));
    if (rel.kind !== "view" && !same(rel.primaryKey) && !rel.unique.some(same)) {
      throw invalid(
        `${q.pointer}/on_conflict`,
        `on_conflict (${
          conflict.join(", ")
        }) is neither the primary key nor a unique constraint or index of ${table}`,
      );
    }
  }
  const n: PlanNode = {
    id: ctx.nodes.length,
    path,
    table,
    relation: rel,
    mode: q.writeMode,
    written: q.writeMode !== "readonly",
    query: q,
    parent: parent?.id ?? null,
    join,
    children: [],
    keyColumns: key,
    conflictColumns: conflict,
    returning: [],
    rows: [],
  };
  ctx.nodes.push(n);
  parent?.children.push(n.id);
  return n;
}

/**
 * The select items of each query node by output name (pure of the node; parsed write queries are
 * cached, so a repeated write classifies its select once).
 */
const itemsCache = new WeakMap<RelationNode, Map<string, Item>>();

/** Classifies the select items of `q` by output name. */
function itemsOf(q: RelationNode): Map<string, Item> {
  let items = itemsCache.get(q);
  if (!items) itemsCache.set(q, items = classify(q));
  return items;
}

function classify(q: RelationNode): Map<string, Item> {
  const items = new Map<string, Item>();
  for (const it of q.select as SelectItem[]) {
    const readOnly = it.mode === "get";
    if (it.value.kind === "join") {
      items.set(it.name, { kind: "join", join: it.value.join, readOnly });
    } else if (it.value.expr.kind === "column" && it.value.expr.scope === q.sqlAlias) {
      items.set(it.name, { kind: "column", column: it.value.expr.column, readOnly });
    } else {
      items.set(it.name, { kind: "ignored" });
    }
  }
  return items;
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * Validates the rows of one query node and, when `plan` is given, plans them (recursively with
 * their joins). Without `plan` (a node under a readonly one, or a `get` join) only the shape is
 * checked.
 */
function processNode(ctx: Ctx, plan: PlanNode | null, q: RelationNode, inputs: Inputs): void {
  const items = itemsOf(q);
  const rel = q.source.kind === "relation" ? q.source.relation : null;
  const table = rel ? tableName(rel) : q.name;
  const keySet = new Set(plan ? [...plan.keyColumns, ...plan.conflictColumns] : []);
  // An outgoing join's referenced columns identify the row the parent links to.
  if (plan?.join?.direction === "outgoing") {
    for (const [childCol] of plan.join.on) keySet.add(childCol);
  }
  // What the query alone decides is checked before any row is looked at: a write the query
  // cannot make costs nothing per row.
  if (plan && plan.written) checkQuery(plan, items, inputs.values.length > 0);

  // 1. Shape and column values of each row.
  const { values, parentRows, places } = inputs;
  const of = new NodeRows(values.length, inputs.up, inputs.key, ctx.base);
  const rows = of.rows;
  // Per join of the select: each row's value of it (`undefined`: the row does not carry it).
  const joinValues = new Map<string, unknown[]>();
  const action = plan && !plan.written ? "link" : "insert";
  for (let i = 0; i < values.length; i++) {
    const obj = values[i];
    const parentRow = parentRows ? parentRows[i] : -1;
    const place = places ? places[i] : parentRows ? -1 : i;
    const row = of.add(parentRow, place, action, ctx.noWrites);
    if (!isObject(obj)) {
      throw invalid(row.pointer, `expected an object (a row of ${q.name}), got ${kindOf(obj)}`);
    }
    const rec = ctx.rec;
    const base = rec ? rec.base.get(obj) : undefined;
    if (rec) row.src = new Map();
    let k = -1;
    for (const key in obj) {
      k++;
      const item = items.get(key);
      const v = obj[key];
      if (!item) {
        throw invalid(
          `${row.pointer}/${esc(key)}`,
          `unknown key "${key}": it is not in the select of ${q.name}`,
        );
      }
      if (item.kind === "ignored") continue;
      if (item.kind === "join") {
        if (!item.readOnly) {
          let byRow = joinValues.get(key);
          if (!byRow) joinValues.set(key, byRow = new Array(values.length));
          byRow[i] = v;
        }
        continue;
      }
      if (!plan) continue;
      const col = item.column;
      const isKey = keySet.has(col.name);
      const writable = !item.readOnly && !col.generated && col.identity !== "always";
      if (!isKey && !writable) continue;
      if (isKey && v === null) continue; // a null key is no key: the row is new
      if (plan.mode !== "readonly" || isKey) {
        checkValue(table, col, v, row, key);
        if (rec) {
          if (base === undefined) rec.eligible = false;
          else rec.checks.push([base + k, table, col, row.pointer, key]);
        }
      }
      const prev = row.value(col.name);
      if (rec) {
        if (prev !== undefined || base === undefined) rec.eligible = false;
        else row.src!.set(col.name, base + k);
      }
      if (prev !== undefined && !sameJson(prev, v)) {
        throw invalid(
          `${row.pointer}/${esc(key)}`,
          `column "${col.name}" of ${table} is given twice with different values`,
        );
      }
      row.setValue(col.name, v as JsonValue);
      if (writable && plan.mode !== "readonly") row.writes = withWrite(row.writes, col.name);
    }
  }
  if (plan) plan.rows = rows;

  // Join items of the select, in select order.
  const joinItems: { name: string; join: JoinNode; readOnly: boolean }[] = [];
  for (const [name, item] of items) {
    if (item.kind === "join") joinItems.push({ name, join: item.join, readOnly: item.readOnly });
  }
  /** The pointer of row `r`'s value of join `name`. */
  const joinPointer = (r: number, name: string) => `${rows[r].pointer}/${esc(name)}`;

  // 2. Fills from the parent (incoming child: its foreign key ← the parent row's key).
  if (plan && plan.written && plan.join?.direction === "incoming" && plan.parent !== null) {
    const parent = ctx.nodes[plan.parent];
    // Siblings filled at run time from one parent row take the same fills: the first one's
    // (never changed in place, as `writes`), not an array and objects per row.
    let last: { parentRow: number; before: ReadonlySet<string>; after: PlanRow } | null = null;
    for (const row of rows) {
      if (
        last && last.parentRow === row.parentRow && last.before === row.writes &&
        row.fills === NO_FILLS && !row.src
      ) {
        for (const [childCol] of plan.join.on) row.deleteValue(childCol);
        row.fills = last.after.fills;
        row.writes = last.after.writes;
        continue;
      }
      const before = row.writes;
      const fresh = row.fills === NO_FILLS;
      const prow = parent.rows[row.parentRow];
      for (const [childCol, parentCol] of plan.join.on) {
        fill(row, childCol, parent, row.parentRow, knownValue(parent, prow, parentCol), parentCol);
      }
      const runtime = plan.join.on.every(([childCol]) => row.value(childCol) === undefined);
      last = fresh && runtime ? { parentRow: row.parentRow, before, after: row } : null;
    }
  }

  // 3. Outgoing joins first: the referenced rows, then this row's foreign key from them.
  for (const ji of joinItems) {
    if (ji.join.direction !== "outgoing") continue;
    const childQ = ji.join.node;
    const childPlan = plan && plan.written && !ji.readOnly
      ? newNode(ctx, childQ, plan, ji.join, [...plan.path, ji.join.key])
      : null;
    const byRow = joinValues.get(ji.name);
    const child: Inputs = { values: [], parentRows: [], places: null, up: of, key: ji.name };
    const childRowOf: (number | null | undefined)[] = [];
    for (let r = 0; byRow && r < rows.length; r++) {
      const v = byRow[r];
      if (v === undefined) continue;
      if (v === null) {
        childRowOf[r] = null;
        continue;
      }
      if (!isObject(v)) {
        throw invalid(
          joinPointer(r, ji.name),
          `expected an object or null (the ${ji.name} of this row), got ${kindOf(v)}`,
        );
      }
      childRowOf[r] = child.values.length;
      child.values.push(v);
      child.parentRows!.push(r);
    }
    processNode(ctx, childPlan, childQ, child);
    if (!plan || !childPlan) continue;
    for (let r = 0; r < rows.length; r++) {
      const k = childRowOf[r];
      if (k === undefined) continue;
      const row = rows[r];
      if (k === null) {
        if (!ji.join.nullable) {
          throw invalid(joinPointer(r, ji.name), `${ji.name} cannot be null: ${table} requires it`);
        }
        for (const [, parentCol] of ji.join.on) {
          row.setValue(parentCol, null);
          row.src?.delete(parentCol);
          row.writes = withWrite(row.writes, parentCol);
        }
        continue;
      }
      const crow = childPlan.rows[k];
      for (const [childCol, parentCol] of ji.join.on) {
        const known = knownValue(childPlan, crow, childCol);
        if (childPlan.mode === "readonly" && (known === undefined || known === null)) {
          throw invalid(
            crow.pointer,
            `${ji.name} is readonly: to link it, the object must carry its key "${childCol}"`,
          );
        }
        fill(row, parentCol, childPlan, k, known, childCol);
      }
    }
  }

  // 4. This node's own rows: actions and checks.
  if (plan && plan.written) decideActions(plan, rows, items);

  // 5. Incoming joins: children after their parent.
  for (const ji of joinItems) {
    if (ji.join.direction !== "incoming") continue;
    const childQ = ji.join.node;
    const childPlan = plan && plan.written && !ji.readOnly && childQ.writeMode !== "readonly"
      ? newNode(ctx, childQ, plan, ji.join, [...plan.path, ji.join.key])
      : null;
    const byRow = joinValues.get(ji.name);
    const child: Inputs = { values: [], parentRows: [], places: [], up: of, key: ji.name };
    for (let r = 0; byRow && r < rows.length; r++) {
      const v = byRow[r];
      if (v === undefined) continue;
      if (!Array.isArray(v)) {
        throw invalid(
          joinPointer(r, ji.name),
          `expected an array (the ${ji.name} of this row), got ${kindOf(v)}`,
        );
      }
      if (childPlan) (rows[r].present ??= new Set()).add(childPlan.id);
      for (let i = 0; i < v.length; i++) {
        child.values.push(v[i]);
        child.parentRows!.push(r);
        child.places!.push(i);
      }
    }
    processNode(ctx, childPlan, childQ, child);
  }
}

/**
 * `row`'s value of `col` as known before the write runs: its payload's (or filled) value, except a
 * key column of a row upserted on other columns, whose matched row keeps its own key
 * (statements.ts `upsertStatement`): that one only the database knows.
 */
export function knownValue(node: PlanNode, row: PlanRow, col: string): JsonValue | undefined {
  if (
    row.action === "upsert" && node.keyColumns.includes(col) && !node.conflictColumns.includes(col)
  ) return undefined;
  return row.value(col);
}

function kindOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return `a ${typeof v}`;
}

/** Sets `column` of `row` from `from` of row `srcRow` of `src`: statically when known, else at run time. */
function fill(
  row: PlanRow,
  column: string,
  src: PlanNode,
  srcRow: number,
  known: JsonValue | undefined,
  from: string,
): void {
  if (row.fills.length > 0) row.fills = row.fills.filter((f) => f.column !== column);
  if (known !== undefined && known !== null) {
    row.setValue(column, known);
    if (row.src) {
      const at = src.rows[srcRow].src?.get(from);
      if (at === undefined) row.src.delete(column);
      else row.src.set(column, at);
    }
  } else {
    row.deleteValue(column);
    row.src?.delete(column);
    if (row.fills === NO_FILLS || row.fills.length === 0) row.fills = [];
    row.fills.push({ column, node: src.id, row: srcRow, from });
  }
  row.writes = withWrite(row.writes, column);
}

function has(row: PlanRow, col: string): boolean {
  const v = row.value(col);
  return (v !== undefined && v !== null) || row.fills.some((f) => f.column === col);
}

/**
 * Checks what the query of a written node decides alone: its select holds the key (and conflict)
 * columns; an `insert` node's relation can be inserted into (`rows`: whether it has any).
 */
function checkQuery(plan: PlanNode, items: Map<string, Item>, rows: boolean): void {
  const q = plan.query;
  // Key (and conflict) columns must be in the select, or filled by a join of it.
  const selected = new Set<string>();
  for (const item of items.values()) {
    if (item.kind === "column") selected.add(item.column.name);
    if (item.kind === "join" && item.join.direction === "outgoing") {
      for (const [, parentCol] of item.join.on) selected.add(parentCol);
    }
  }
  if (plan.join?.direction === "incoming") {
    for (const [childCol] of plan.join.on) selected.add(childCol);
  }
  const required = [
    ...new Set([...plan.keyColumns, ...(plan.mode === "upsert" ? plan.conflictColumns : [])]),
  ];
  const missing = required.filter((c) => !selected.has(c));
  if (missing.length > 0) {
    throw new SvcError(
      "QUERY_NOT_WRITABLE",
      `${plan.table} is written (write_mode ${plan.mode}) but its select lacks key column(s) ${
        missing.join(", ")
      }`,
      { details: { pointer: q.pointer, relation: plan.table, missing } },
    );
  }
  if (rows && plan.mode === "insert" && !plan.relation.insertable) notWritable(plan, "inserted");
}

/** Decides each row's action and checks mandatory columns and capabilities. */
function decideActions(plan: PlanNode, rows: PlanRow[], items: Map<string, Item>): void {
  const rel = plan.relation;
  const q = plan.query;
  const col = (c: string) => rel.columnMap.get(c);
  // A natural key (no default, no identity) cannot tell new rows from existing ones: merge
  // upserts them. A view's columns carry that information only when taken from its table
  // (Relation.columnsFromTable), and a view that leaves rows out is never upserted (below): its
  // key is then never natural, and merge updates through it (its WHERE applies) as before.
  const natural = (rel.kind !== "view" ||
    (rel.columnsFromTable === true && rel.filtersRows === false)) &&
    plan.keyColumns.every((c) => {
      const k = col(c);
      return k !== undefined && k.identity === null && !k.hasDefault && !k.generated;
    });
  const conflictAlways = plan.conflictColumns.some((c) => col(c)?.identity === "always");
  const hasAll = (row: PlanRow, cols: string[]) => cols.every((c) => has(row, c));
  // Rows writing the same columns share one `writes` set: what depends only on it is decided
  // once per set, not once per row.
  const setsMemo = new Map<ReadonlySet<string>, boolean>();
  const setsSomething = (row: PlanRow) => {
    let sets = setsMemo.get(row.writes);
    if (sets === undefined) {
      sets = [...row.writes].some((c) => !plan.keyColumns.includes(c));
      setsMemo.set(row.writes, sets);
    }
    return sets;
  };
  const complete = new Set<ReadonlySet<string>>();

  for (const row of rows) {
    switch (plan.mode) {
      case "insert":
        row.action = "insert";
        break;
      case "upsert":
        if (!hasAll(row, plan.conflictColumns)) row.action = "insert";
        else if (!conflictAlways) row.action = "upsert";
        else row.action = setsSomething(row) ? "update" : "keep";
        break;
      case "merge":
        if (!hasAll(row, plan.keyColumns)) row.action = "insert";
        else if (natural) row.action = "upsert";
        else row.action = setsSomething(row) ? "update" : "keep";
        break;
      case "merge-new":
        if (!hasAll(row, plan.keyColumns)) row.action = "insert";
        else row.action = natural ? "insert-or-keep" : "keep";
        break;
      default:
        row.action = "link";
    }
    if (row.action === "upsert" || row.action === "insert-or-keep") {
      // ON CONFLICT columns are inserted (even a get-marked one: it identifies the row).
      for (const c of plan.conflictColumns) row.writes = withWrite(row.writes, c);
    }
    if (row.action === "insert" || row.action === "upsert" || row.action === "insert-or-keep") {
      if (!rel.insertable) notWritable(plan, "inserted");
      if (row.action === "insert") {
        for (const k of plan.keyColumns) {
          if (col(k)?.identity === "always" && has(row, k)) {
            throw invalid(
              `${row.pointer}/${esc(outputOf(items, k))}`,
              `column "${k}" of ${plan.table} is GENERATED ALWAYS AS IDENTITY: a row carrying it cannot be ` +
                `inserted (write_mode ${plan.mode}); use write_mode merge or upsert to update existing rows`,
            );
          }
        }
      }
      if (!complete.has(row.writes)) {
        for (const c of rel.columns) {
          if (c.mandatory && !row.writes.has(c.name)) {
            throw new SvcError(
              "QUERY_MANDATORY_COLUMN_MISSING",
              `column "${c.name}" of ${plan.table} is mandatory: a row to insert must provide it`,
              { details: { pointer: row.pointer, relation: plan.table, column: c.name } },
            );
          }
        }
        complete.add(row.writes);
      }
    }
    if ((row.action === "update" || row.action === "upsert") && !rel.updatable) {
      notWritable(plan, "updated");
    }
    // PostgreSQL's ON CONFLICT DO UPDATE through a view does not apply the view's WHERE to the row
    // it meets: an upsert could change a row the view hides.
    if (row.action === "upsert" && rel.kind === "view" && rel.filtersRows !== false) {
      throw new SvcError(
        "QUERY_NOT_WRITABLE",
        `${plan.table} is a view that ${
          rel.filtersRows ? "leaves rows out" : "svc cannot tell leaves no rows out"
        }: an upsert through it could update a row it hides (ON CONFLICT does not apply the view's ` +
          "WHERE); use write_mode merge, or upsert the table",
        { details: { pointer: q.pointer, relation: plan.table } },
      );
    }
  }
}

function outputOf(items: Map<string, Item>, column: string): string {
  for (const [name, item] of items) {
    if (item.kind === "column" && item.column.name === column) return name;
  }
  return column;
}

function notWritable(plan: PlanNode, what: string): never {
  throw new SvcError("QUERY_NOT_WRITABLE", `${plan.table} cannot be ${what}`, {
    details: { pointer: plan.query.pointer, relation: plan.table },
  });
}

/** Columns read back from the rows of `n`: its key, conflict columns, and what other rows take from it. */
function returningOf(ctx: Ctx, n: PlanNode): string[] {
  const cols = new Set([...n.keyColumns, ...n.conflictColumns]);
  for (const id of n.children) {
    const c = ctx.nodes[id];
    if (c.join?.direction === "incoming") {
      for (const [, parentCol] of c.join.on) cols.add(parentCol);
    }
  }
  if (n.join?.direction === "outgoing") { for (const [childCol] of n.join.on) cols.add(childCol); }
  return [...cols];
}
