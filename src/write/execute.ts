/**
 * Runs a compiled write (compile.ts): its statements, in order, all sent at once (pipelined) in the
 * caller's transaction — one round trip, whatever the depth of the query tree or the number of
 * rows. Any failure throws; the caller rolls the transaction back, so nothing is half-written.
 */
import type { RootKeys } from "../compile/ast.ts";
import type { Row, Tx } from "../db/tx.ts";
import type { CompiledWrite } from "./compile.ts";
import type { Stat } from "./plan_types.ts";

export type { Stat } from "./plan_types.ts";

/** SQL text run (ComplexResult `sql`). */
export interface SqlResult {
  path: string[];
  select: string;
}

/** Plan of one statement, captured with `EXPLAIN (ANALYZE, FORMAT JSON)` (ComplexResult `query_plan`). */
export interface PlanResult {
  path: string[];
  /** The members of the statement's EXPLAIN (FORMAT JSON) object (`Plan`, `Execution Time`, …). */
  [member: string]: unknown;
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
  /** The answer rows (JSON texts `j`) when a statement gave them (`CompiledWrite.answer`). */
  answer?: Row[];
}

/** Options of a write's run. */
export interface WriteOptions {
  /** Collect the SQL text of every statement. */
  sql: boolean;
  /** Run every statement under `EXPLAIN (ANALYZE, FORMAT JSON)` and collect the plans. */
  queryPlan: boolean;
}

/** A statement to send. */
export interface Sent {
  sql: string;
  params: unknown[];
}

/**
 * A write's read-back under `query_plan`: its plan too, sent after the read-back itself (whose
 * rows are still the answer), as `sql` lists its text. `EXPLAIN (ANALYZE, FORMAT JSON)`, which
 * runs it again, only when `analyze` (the read calls no VOLATILE function); else the plan alone.
 */
export function explained(back: Sent, analyze: boolean): Sent {
  const explain = analyze ? "EXPLAIN (ANALYZE, FORMAT JSON)" : "EXPLAIN (FORMAT JSON)";
  return { sql: `${explain} ${back.sql}`, params: back.params };
}

/**
 * The statements to send for `w`. With `queryPlan` each runs under `EXPLAIN (ANALYZE, FORMAT
 * JSON)`, which executes it — once: its effects, the values it stores for the statements after
 * it included, are those of the plain statement; only its counts are not returned (stats and
 * query_plan are exclusive).
 */
export function toSend(w: CompiledWrite, opts: WriteOptions): Sent[] {
  return w.statements.map((s) => ({
    sql: opts.queryPlan ? `EXPLAIN (ANALYZE, FORMAT JSON) ${s.sql}` : s.sql,
    params: s.params,
  }));
}

/** The WriteResult of `w` from the results of its statements (as sent by {@link toSend}). */
export function writeResult(w: CompiledWrite, results: Row[][], opts: WriteOptions): WriteResult {
  return {
    stats: opts.queryPlan ? [] : w.stats(results),
    sql: opts.sql ? w.statements.map((s) => ({ path: s.path, select: s.sql })) : [],
    plans: opts.queryPlan ? w.statements.map((s, i) => planEntry(s.path, results[i] ?? [])) : [],
    rootKeys: w.rootKeys,
    ...(w.answer === undefined ? {} : { answer: results[w.answer] ?? [] }),
  };
}

/**
 * Executes `w` in the open transaction `tx`, its statements (and `after`, e.g. the read-back)
 * pipelined. Throws the first failure (a check's SvcError — QUERY_INVALID with the row's pointer —
 * or the database error), never a follow-up "transaction aborted".
 */
export async function executeWrite(
  tx: Tx,
  w: CompiledWrite,
  opts: WriteOptions,
  after: Sent[] = [],
): Promise<WriteResult & { after: Row[][] }> {
  const sent = [...toSend(w, opts), ...after];
  // Started in protocol order: Promise.allSettled subscribes to each in turn.
  const settled = await Promise.allSettled(sent.map((s) => tx.query(s.sql, s.params)));
  const failed = firstFailure(settled);
  if (failed !== undefined) throw w.error(failed);
  const results = settled.map((x) => (x as PromiseFulfilledResult<Row[]>).value);
  return {
    ...writeResult(w, results.slice(0, w.statements.length), opts),
    after: results.slice(w.statements.length),
  };
}

/**
 * The root cause among pipelined statements: the first failure that is not a 25P02 follow-up
 * (after a failure PostgreSQL aborts the transaction and refuses the statements after it).
 */
export function firstFailure(settled: PromiseSettledResult<unknown>[]): unknown {
  let first: PromiseRejectedResult | undefined;
  for (const x of settled) {
    if (x.status !== "rejected") continue;
    first ??= x;
    if ((x.reason as { code?: string } | null)?.code !== "25P02") return x.reason;
  }
  return first?.reason;
}

/**
 * A `query_plan` entry of a write's statement: its EXPLAIN (FORMAT JSON) object, as a read's
 * entry is, with the statement's `path` added (docs/endpoint.md).
 */
export function planEntry(path: string[], rows: Row[]): PlanResult {
  const plan = explainOutput(rows);
  return typeof plan === "object" && plan !== null && !Array.isArray(plan)
    ? { path, ...plan }
    : { path, plan };
}

/** The plan object of `EXPLAIN (FORMAT JSON)` output (one row, one column holding a one-element array). */
export function explainOutput(rows: Row[]): unknown {
  let v: unknown = rows[0] ? Object.values(rows[0])[0] : null;
  if (typeof v === "string") v = JSON.parse(v);
  return Array.isArray(v) && v.length === 1 ? v[0] : v;
}
