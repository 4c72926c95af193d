/**
 * The statement steps of a write plan: from the planned rows of every node (plan.ts), the
 * set-based statements to run, in order — deletes of omitted rows first (deepest relation first,
 * the root's last), then, depth-first, referenced relations before the relations referencing them
 * and a parent before its incoming children. Which rows go together and which columns each
 * statement takes; the SQL is compile.ts's. Pure: no I/O.
 */
import { SvcError } from "../svc_error.ts";
import type { InputColumn } from "./statements.ts";
import type {
  DeleteStep,
  PlanNode,
  PlanRow,
  RowAction,
  RowsStep,
  WriteStep,
} from "./plan_types.ts";
import type { JsonValue } from "./values.ts";

interface Ctx {
  nodes: PlanNode[];
}

/** The statements of a plan whose rows and actions are decided, in execution order. */
export function buildSteps(nodes: PlanNode[], root: PlanNode): WriteStep[] {
  const ctx: Ctx = { nodes };
  const deletes: { depth: number; step: DeleteStep }[] = [];
  for (const n of ctx.nodes) {
    for (const step of deleteStepsOf(ctx, n)) deletes.push({ depth: n.path.length, step });
  }
  deletes.sort((a, b) => b.depth - a.depth);
  const steps: WriteStep[] = deletes.map((d) => d.step);
  const visit = (n: PlanNode) => {
    const kids = n.children.map((id) => ctx.nodes[id]);
    for (const c of kids) if (c.join?.direction === "outgoing") visit(c);
    if (n.written) steps.push(...writeStepsOf(n));
    for (const c of kids) if (c.join?.direction === "incoming") visit(c);
  };
  visit(root);
  return steps;
}

function inputColumn(
  n: PlanNode,
  name: string,
  role: InputColumn["role"],
  flag = false,
): InputColumn {
  const c = n.relation.columnMap.get(name);
  if (!c) throw new SvcError("INTERNAL", `unknown column ${name} of ${n.table}`);
  return { name, type: c.type, role, flag };
}

/** Columns a row sends to the database, by role of the statement. */
function groupBy<T>(items: T[], key: (t: T) => string): T[][] {
  const groups = new Map<string, T[]>();
  for (const it of items) {
    const k = key(it);
    const g = groups.get(k);
    if (g) g.push(it);
    else groups.set(k, [it]);
  }
  return [...groups.values()];
}

/** Per relation: its column names in order, and those with a default (or identity). */
const columnLists = new WeakMap<PlanNode["relation"], { all: string[]; defaulted: string[] }>();

function columnsOf(rel: PlanNode["relation"]): { all: string[]; defaulted: string[] } {
  let l = columnLists.get(rel);
  if (!l) {
    l = {
      all: rel.columns.map((c) => c.name),
      defaulted: rel.columns.filter((c) => c.hasDefault || c.identity !== null).map((c) => c.name),
    };
    columnLists.set(rel, l);
  }
  return l;
}

function writeStepsOf(n: PlanNode): RowsStep[] {
  const steps: RowsStep[] = [];
  // Rows by action, in row order (one pass).
  const byAction = new Map<RowAction, number[]>();
  n.rows.forEach((r, i) => {
    const l = byAction.get(r.action);
    if (l) l.push(i);
    else byAction.set(r.action, [i]);
  });
  const idx = (a: RowAction) => byAction.get(a) ?? [];
  const rel = n.relation;
  const names = columnsOf(rel);
  const union = (rows: number[], exclude: string[] = []) => {
    const cols = new Set<string>();
    for (const r of rows) for (const c of n.rows[r].writes) if (!exclude.includes(c)) cols.add(c);
    // Keep the relation's column order: stable SQL text for equal payload shapes.
    return names.all.filter((c) => cols.has(c));
  };
  // The columns of `among` a row writes, in the relation's order: its group's key.
  const pattern = (r: number, among: string[]) => {
    const writes = n.rows[r].writes;
    let k = "";
    for (const c of among) if (writes.has(c)) k += `${c}\u0000`;
    return k;
  };

  // Updates first: they may free unique values that inserted rows take.
  const updates = idx("update");
  if (updates.length > 0) {
    const set = union(updates, n.keyColumns);
    const columns = [
      ...n.keyColumns.map((c) => inputColumn(n, c, "match")),
      ...set.map((c) => inputColumn(n, c, "write", !updates.every((r) => n.rows[r].writes.has(c)))),
    ];
    steps.push({ kind: "update", node: n.id, rows: updates, columns });
  }
  // Upserts: ON CONFLICT DO UPDATE cannot tell a missing column from one set to null, so rows are
  // grouped by the set of columns they write (one group for a uniform payload).
  for (const rows of groupBy(idx("upsert"), (r) => pattern(r, names.all))) {
    const columns = union(rows).map((c) => inputColumn(n, c, "write"));
    steps.push({ kind: "upsert", node: n.id, rows, columns });
  }
  // Inserts (and insert-or-keep): an absent column must take its default, which INSERT … SELECT
  // cannot express per row, so rows are grouped by which columns with a default they provide
  // (one group for a uniform payload). Absent columns without a default are NULL either way.
  for (const rows of groupBy(idx("insert-or-keep"), (r) => pattern(r, names.defaulted))) {
    const columns = union(rows).map((c) => inputColumn(n, c, "write"));
    steps.push({ kind: "insert-or-keep", node: n.id, rows, columns });
  }
  for (const rows of groupBy(idx("insert"), (r) => pattern(r, names.defaulted))) {
    const columns = union(rows).map((c) => inputColumn(n, c, "write"));
    steps.push({ kind: "insert", node: n.id, rows, columns });
  }
  // Kept rows are looked up: every one, so that a key no row has is refused as an update's is (a
  // kept row is never inserted), and rows insert-or-keep may have inserted when their read-back
  // columns are not all known (after that statement: a row it inserted is found like one it kept).
  const lookups = n.rows.flatMap((r, i) =>
    r.action === "keep" ||
      r.action === "insert-or-keep" &&
        n.returning.some((c) => r.value(c) === undefined && !r.fills.some((f) => f.column === c))
      ? [i]
      : []
  );
  if (lookups.length > 0) {
    const columns = n.keyColumns.map((c) => inputColumn(n, c, "match"));
    steps.push({ kind: "lookup", node: n.id, rows: lookups, columns });
  }
  return steps;
}

/**
 * The deletes of a merge/merge-new node.
 * - An incoming child: existing children of the parent rows that may already exist (updated, kept
 *   or upserted; identified by values known before execution) and whose payload carries this
 *   join, except the rows the payload of this node carries by key (anywhere under the node, so
 *   that a child moved from one parent to another is updated, not deleted). Updated and kept
 *   parents are matched by their key, upserted ones by their conflict columns: at most two
 *   statements.
 * - The root, when its query has a `where`: the existing rows matching it, except the rows the
 *   payload carries by key. The `where` scopes the root as the foreign key scopes a child.
 */
function deleteStepsOf(ctx: Ctx, n: PlanNode): DeleteStep[] {
  if (!n.written || (n.mode !== "merge" && n.mode !== "merge-new")) return [];
  const known = (row: PlanRow, cols: string[]) => cols.every((c) => row.value(c) != null);
  const keepOf = () =>
    n.rows.filter((r) => r.action !== "insert" && known(r, n.keyColumns))
      .map((r) => record(n.keyColumns, r));
  const q = n.query;
  if (n.parent === null) {
    if (q.where === null) return [];
    if (q.limit !== null || q.offset !== null || q.distinctOn.length > 0) {
      throw new SvcError(
        "QUERY_NOT_WRITABLE",
        `${n.table} is written with write_mode ${n.mode} and a where, which deletes the rows ` +
          `matching it that the payload omits, but its limit/offset/distinct_on hides rows from ` +
          `the read: drop them, or use write_mode insert or upsert`,
        { details: { pointer: q.pointer, relation: n.table } },
      );
    }
    if (!n.relation.deletable) notWritable(n, "deleted from");
    return [{ kind: "delete", node: n.id, parents: null, match: [], keep: keepOf() }];
  }
  if (n.join?.direction !== "incoming") return [];
  const parent = ctx.nodes[n.parent];
  if (!parent.written) return [];
  const byKey: PlanRow[] = [];
  const byConflict: PlanRow[] = [];
  for (const row of parent.rows) {
    if (!row.present?.has(n.id)) continue;
    // A parent row being inserted has no children yet; one identified only at run time neither
    // (its key comes from a row inserted by this write).
    if (row.action === "update" || row.action === "keep") {
      if (known(row, parent.keyColumns)) byKey.push(row);
    } else if (row.action === "upsert" || row.action === "insert-or-keep") {
      if (known(row, parent.conflictColumns)) byConflict.push(row);
    }
  }
  if (byKey.length === 0 && byConflict.length === 0) return [];
  if (q.where !== null || q.limit !== null || q.offset !== null || q.distinctOn.length > 0) {
    throw new SvcError(
      "QUERY_NOT_WRITABLE",
      `${
        n.path.join(".")
      } (${n.table}) is written with write_mode ${n.mode}, which deletes the rows ` +
        `the payload omits, but its where/limit/offset/distinct_on hides rows from the read: use ` +
        `write_mode insert or upsert, or drop the filter`,
      { details: { pointer: q.pointer, relation: n.table } },
    );
  }
  if (!n.relation.deletable) notWritable(n, "deleted from");
  const keep = keepOf();
  const steps: DeleteStep[] = [];
  const groups: [PlanRow[], string[]][] = sameCols(parent.keyColumns, parent.conflictColumns)
    ? [[[...byKey, ...byConflict], parent.keyColumns]]
    : [[byKey, parent.keyColumns], [byConflict, parent.conflictColumns]];
  for (const [rows, match] of groups) {
    if (rows.length === 0) continue;
    const parents = rows.map((r) => record(match, r));
    steps.push({ kind: "delete", node: n.id, parents, match: [...match], keep });
  }
  return steps;
}

function sameCols(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((c) => b.includes(c));
}

function record(cols: string[], row: PlanRow): Record<string, JsonValue> {
  const o: Record<string, JsonValue> = Object.create(null);
  for (const c of cols) o[c] = row.value(c) ?? null;
  return o;
}

function notWritable(plan: PlanNode, what: string): never {
  throw new SvcError("QUERY_NOT_WRITABLE", `${plan.table} cannot be ${what}`, {
    details: { pointer: plan.query.pointer, relation: plan.table },
  });
}
