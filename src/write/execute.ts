/**
 * Runs a WritePlan (plan.ts) inside the caller's transaction: one set-based statement per plan
 * step, so the number of round trips grows with the depth of the query tree, not with the number
 * of rows. Any failure throws; the caller rolls the transaction back, so nothing is half-written.
 */
import type { LiteralValue, RootKeys } from "../compile/ast.ts";
import type { Row, Tx } from "../db/tx.ts";
import { invalid, SvcError } from "../errors.ts";
import type { PlanNode, RowsStep, WritePlan, WriteStep } from "./plan.ts";
import { flagName } from "./statements.ts";
import { compileCteWrite, type CteWrite, preorder } from "./cte.ts";
import { fromText, type JsonValue, keyText } from "./values.ts";

/** Counts of one written relation (ComplexResult `stats`). */
export interface Stat {
  /** Join keys from the root (empty for the root). */
  path: string[];
  /** `schema.name`. */
  table: string;
  /** Payload rows of this relation. */
  submitted: number;
  inserted: number;
  updated: number;
  deleted: number;
}

/** SQL text run (ComplexResult `sql`). */
export interface SqlResult {
  path: string[];
  select: string;
}

/** Plan of one statement, captured with `EXPLAIN (ANALYZE, FORMAT JSON)` (ComplexResult `query_plan`). */
export interface PlanResult {
  path: string[];
  plan: unknown;
}

/** What a write produced. */
export interface WriteResult {
  /** One entry per written relation (readonly ones and those under them are absent), root first. */
  stats: Stat[];
  /** Statements run, when `opts.sql`. */
  sql: SqlResult[];
  /** Plans of the statements run, when `opts.queryPlan`. */
  plans: PlanResult[];
  /** Key of each root row, in payload order: restricts the read-back (`compileRead(node, {rootKeys})`). */
  rootKeys: RootKeys;
}

/** Options of executeWrite. */
export interface WriteOptions {
  /** Collect the SQL text of every statement. */
  sql: boolean;
  /** Collect `EXPLAIN (ANALYZE, FORMAT JSON)` of every statement. */
  queryPlan: boolean;
  /**
   * Run an eligible plan as one statement of data-modifying CTEs (cte.ts; default true). Never
   * with `queryPlan`, whose plans are per statement.
   */
  oneStatement?: boolean;
}

const SAVEPOINT = "svc_write_explain";

/**
 * Executes `plan` in the open transaction `tx`. Deletes run first (deepest relation first), then
 * inserts/updates with keys flowing from written rows to the rows that reference them.
 *
 * With `opts.queryPlan`, every statement first runs under `EXPLAIN (ANALYZE, FORMAT JSON)` inside
 * a savepoint that is rolled back right after — EXPLAIN ANALYZE executes the statement but does
 * not return its RETURNING rows, which the write needs to pass keys on — and then runs for real,
 * so the write persists and its plan is the one of an identical execution. (Side effects outside
 * transactional rollback, such as sequence increments, happen twice.)
 *
 * Throws SvcError for problems found with the data (QUERY_INVALID: an updated row that does not
 * exist, two rows with one key carrying different values), database errors as the driver raises
 * them.
 */
export async function executeWrite(
  tx: Tx,
  plan: WritePlan,
  opts: WriteOptions,
): Promise<WriteResult> {
  if (!opts.queryPlan && opts.oneStatement !== false) {
    const cte = compileCteWrite(plan);
    if (cte) return await executeCte(tx, cte, opts);
  }
  const resolved: Map<string, JsonValue>[][] = plan.nodes.map((n) =>
    n.rows.map((r) => new Map(r.values))
  );
  const stats = new Map<number, Stat>();
  for (const n of plan.nodes) {
    if (n.written) {
      stats.set(n.id, {
        path: n.path,
        table: n.table,
        submitted: n.rows.length,
        inserted: 0,
        updated: 0,
        deleted: 0,
      });
    }
  }
  const result: WriteResult = {
    stats: [],
    sql: [],
    plans: [],
    rootKeys: { columns: [], rows: [] },
  };

  const run = async (step: WriteStep, params: string[]): Promise<Row[]> => {
    const node = plan.nodes[step.node];
    if (opts.sql) result.sql.push({ path: node.path, select: step.sql });
    if (opts.queryPlan) {
      await tx.query(`SAVEPOINT ${SAVEPOINT}`, []);
      const rows = await tx.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${step.sql}`, params);
      await tx.query(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}`, []);
      await tx.query(`RELEASE SAVEPOINT ${SAVEPOINT}`, []);
      result.plans.push({ path: node.path, plan: explainOutput(rows) });
    }
    return await tx.query(step.sql, params);
  };

  for (const step of plan.steps) {
    const node = plan.nodes[step.node];
    const stat = stats.get(node.id)!;
    if (step.kind === "delete") {
      const rows = await run(step, step.params);
      stat.deleted += Number(rows[0]?.n ?? 0);
      continue;
    }
    const values = resolved[node.id];
    for (const r of step.rows) applyFills(plan, resolved, node, r);
    let rows = step.rows;
    if (step.kind === "lookup") {
      rows = rows.filter((r) => node.returning.some((c) => values[r].get(c) === undefined));
      if (rows.length === 0) continue;
    }
    const { input, aliases } = buildInput(node, step, rows, values);
    const out = await run(step, [JSON.stringify(input)]);
    const byOrd = new Map<number, Row>();
    if (step.kind === "insert") {
      if (out.length !== input.length) {
        throw new SvcError(
          "INTERNAL",
          `inserting into ${node.table}: ${input.length} rows sent, ${out.length} returned (a trigger skipped rows?)`,
        );
      }
      out.forEach((row, i) => byOrd.set(rows[i], row));
      stat.inserted += out.length;
    } else {
      for (const row of out) byOrd.set(Number(row["@o"]), row);
    }
    for (const r of rows) {
      const canonical = aliases.get(r) ?? r;
      const row = byOrd.get(canonical);
      if (!row) {
        if (step.kind === "update") {
          const key = node.keyColumns.map((c) =>
            `${c} = ${JSON.stringify(values[r].get(c) ?? null)}`
          ).join(", ");
          throw invalid(
            node.rows[r].pointer,
            `no row of ${node.table} has the key given (${key}): rows carrying a key are updated, never inserted`,
          );
        }
        continue; // insert-or-keep: kept; lookup: checked below
      }
      for (const c of node.returning) {
        values[r].set(c, fromText(node.relation.columnMap.get(c)!, row[c]));
      }
    }
    if (step.kind === "update") stat.updated += out.length;
    if (step.kind === "upsert") {
      for (const row of out) {
        if (row["@ins"] === true || row["@ins"] === "t" || row["@ins"] === "true") stat.inserted++;
        else stat.updated++;
      }
    }
    if (step.kind === "insert-or-keep") stat.inserted += out.length;
    if (step.kind === "lookup") {
      for (const r of rows) {
        if (node.returning.some((c) => values[r].get(c) === undefined)) {
          throw invalid(node.rows[r].pointer, `no row of ${node.table} has the key given`);
        }
      }
    }
  }

  result.stats = preorder(plan).filter((n) => n.written).map((n) => stats.get(n.id)!);
  const root = plan.root;
  result.rootKeys = {
    columns: [...root.keyColumns],
    rows: root.rows.map((_, r) => root.keyColumns.map((c) => literal(resolved[root.id][r].get(c)))),
  };
  return result;
}

/** Runs a plan compiled to one statement (cte.ts); the read-back may then use its setting. */
export async function executeCte(tx: Tx, cte: CteWrite, opts: WriteOptions): Promise<WriteResult> {
  let rows: Row[];
  try {
    rows = await tx.query(cte.sql, cte.params);
  } catch (e) {
    throw cte.error(e);
  }
  return resultOfCte(cte, rows[0], opts);
}

/** The WriteResult of a one-statement write from its result row. */
export function resultOfCte(cte: CteWrite, row: Row, opts: WriteOptions): WriteResult {
  const { stats, rootKeys } = cte.read(row);
  return {
    stats,
    sql: opts.sql ? cte.parts.map((p) => ({ path: p.path, select: p.select })) : [],
    plans: [],
    rootKeys,
  };
}

/** The plan object of `EXPLAIN (FORMAT JSON)` output (one row, one column holding a one-element array). */
function explainOutput(rows: Row[]): unknown {
  let v: unknown = rows[0] ? Object.values(rows[0])[0] : null;
  if (typeof v === "string") v = JSON.parse(v);
  return Array.isArray(v) && v.length === 1 ? v[0] : v;
}

function literal(v: JsonValue | undefined): LiteralValue {
  if (v === undefined || v === null) return null;
  if (typeof v === "object") return JSON.stringify(v);
  return v;
}

/** Takes the values this row receives from rows written before it. */
function applyFills(
  plan: WritePlan,
  resolved: Map<string, JsonValue>[][],
  node: PlanNode,
  r: number,
): void {
  for (const f of node.rows[r].fills) {
    const v = resolved[f.node][f.row].get(f.from);
    if (v === undefined || v === null) {
      throw new SvcError(
        "INTERNAL",
        `write order: ${node.table}.${f.column} needs ${
          plan.nodes[f.node].table
        }.${f.from} before it is known`,
      );
    }
    resolved[node.id][r].set(f.column, v);
  }
}

/**
 * The input rows of a statement. Rows sharing a key in a statement that matches by key (update,
 * upsert, insert-or-keep, lookup) are sent once when they carry the same values — e.g. two
 * tracks linking the same genre object — and rejected when they differ.
 */
function buildInput(
  node: PlanNode,
  step: RowsStep,
  rows: number[],
  values: Map<string, JsonValue>[],
): { input: Record<string, JsonValue>[]; aliases: Map<number, number> } {
  const input: Record<string, JsonValue>[] = [];
  const aliases = new Map<number, number>();
  const seen = new Map<string, { r: number; body: string }>();
  const keyCols = step.kind === "update" || step.kind === "lookup"
    ? node.keyColumns
    : node.conflictColumns;
  for (const r of rows) {
    const prow = node.rows[r];
    const o: Record<string, JsonValue> = Object.create(null);
    o["@o"] = r;
    for (const c of step.columns) {
      const sends = c.role === "match" || prow.writes.has(c.name);
      const v = values[r].get(c.name);
      if (sends && v !== undefined) o[c.name] = v;
      if (c.flag) o[flagName(c.name)] = prow.writes.has(c.name);
    }
    if (step.kind !== "insert") {
      const key = keyText(keyCols.map((c) => values[r].get(c)));
      const body = JSON.stringify(step.columns.map((c) => o[c.name] ?? null));
      const first = seen.get(key);
      if (first) {
        if (first.body !== body) {
          throw invalid(
            prow.pointer,
            `two rows of ${node.table} have the same key (${
              keyCols.join(", ")
            }) but different values ` +
              `(the other is ${node.rows[first.r].pointer})`,
          );
        }
        aliases.set(r, first.r);
        continue;
      }
      seen.set(key, { r, body });
    }
    input.push(o);
  }
  return { input, aliases };
}
