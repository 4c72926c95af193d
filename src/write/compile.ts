/**
 * The write engine's compiler: turns a WritePlan (plan.ts, steps.ts) into the statements to run,
 * in order — one plain statement per relation and level (and per set of provided columns), with
 * every value bound: rows as one jsonb parameter, a root's delete scope compiled by the read
 * compiler. Nothing passes through JavaScript between the statements (generated keys flow through
 * transaction-local settings, see statements.ts), so all of them, the read-back and commit go to
 * the database in one round trip. Pure: no I/O.
 */
import { isExactNumber, plainDecimal } from "../formats/json.ts";
import type { LiteralValue, RelationNode, RootKeys } from "../compile/ast.ts";
import { compileCondition, returningRead } from "../compile/sql.ts";
import { capRowSize } from "../compile/rowsize.ts";
import type { Row } from "../db/tx.ts";
import { invalid, SvcError } from "../svc_error.ts";
import {
  BULK_ROWS,
  deleteChildrenStatement,
  deleteRootStatement,
  type FillSource,
  insertAnswerStatement,
  insertOrKeepStatement,
  insertStatement,
  lookupStatement,
  rootKeysSetting,
  rootKeysStatement,
  type RowsSpec,
  sourceField,
  updateStatement,
  upsertStatement,
  valuesSetting,
} from "./statements.ts";
import type { DeleteStep, PlanNode, PlanRow, RowsStep, Stat, WritePlan } from "./plan_types.ts";
import { knownValue } from "./plan.ts";
import type { JsonValue } from "./values.ts";
import { WRITE_CHECK_MARKER } from "../util/markers.ts";

/** A marker with a secret per process (src/util/markers.ts): a payload cannot forge a check. */
const MARKER = WRITE_CHECK_MARKER;

/**
 * Statement texts by query (the parsed tree, alive as long as its request or a cache holds it) and
 * payload shape: which statements, with which columns, stores and sources. The text depends on
 * nothing else, so a write of a known shape skips SQL generation.
 */
const sqlCache = new WeakMap<RelationNode, Map<string, string[]>>();

/** Payload shapes cached per query. */
export const SHAPES_PER_QUERY = 16;

/** How many payload shapes of `query` have their statement texts cached. */
export function cachedShapes(query: RelationNode): number {
  return sqlCache.get(query)?.size ?? 0;
}

/** One statement of a write. */
export interface WriteStatement {
  /** Join keys from the root to the relation written (ComplexResult `sql`, `query_plan`). */
  path: string[];
  /** Plan node written. */
  node: number;
  sql: string;
  params: unknown[];
  /**
   * Where its counts come from: its one row (`i`, `u`, `d`), the command count of a plain INSERT
   * or DELETE, or nowhere (the statement storing the root keys).
   */
  counts: "row" | "inserted" | "deleted" | "none";
}

/** A write compiled to statements. */
export interface CompiledWrite {
  /** In execution order. */
  statements: WriteStatement[];
  /**
   * The root keys in payload order for the read-back: the values when every root row's key is
   * known before the write, else the setting the root's last statement stores them in.
   */
  rootKeys: RootKeys;
  /**
   * Set when the write answers from its own `RETURNING` (see {@link CompileWriteOptions.answer}):
   * the index of the statement whose rows (one JSON text `j` each, in payload order) are the
   * answer. No read-back runs then.
   */
  answer?: number;
  /** The stats (root first, written relations only) from the statements' results, in order. */
  stats(results: Row[][]): Stat[];
  /** The SvcError a failed check stands for; any other error unchanged. */
  error(e: unknown): unknown;
}

/** Options of compileWrite. */
export interface CompileWriteOptions {
  /** Well-known parameter values (a root delete's `where` may use them). */
  params?: Record<string, unknown>;
  /** Whether the write is read back (default true): the root keys are then needed. */
  readBack?: boolean;
  /**
   * Answer from the INSERT's own `RETURNING` instead of a read-back, when that answer cannot
   * differ from the read-back's ({@link answersFromReturning}), the answer rows capped at
   * `maxRowSize` bytes inside PostgreSQL (src/compile/rowsize.ts) as the read-back's are. Only
   * with `readBack`, and never under `EXPLAIN` (its rows are then the plan).
   */
  answer?: { maxRowSize: number };
  /**
   * Set while a plan template is recorded (template.ts, on a plan recorded with `src`): each
   * payload value in a statement's input text is written as `\0<walk index>\0`, and `eligible`
   * turns false when the statements depend on values beyond their place in the payload.
   */
  record?: { eligible: boolean };
}

interface Check {
  /** missing: a row other rows take values from was not written nor found. */
  kind: "update" | "lookup" | "count" | "missing";
  node: PlanNode;
  /** missing: the node's row at each position of the statement that stored them. */
  rows?: number[];
}

/** Where a row's run-time values are: the statement that stored them and the row's position. */
interface Stored {
  statement: number;
  pos: number;
}

/**
 * Whether a write's answer may come from its INSERT's `RETURNING` rather than a read-back: the
 * answer is then the same only when nothing can change or hide a row after its statement and the
 * select needs nothing but the written row. So: one statement, a plain INSERT of the root (no
 * other relation written or read, no upsert, update or delete), into a table (not a view) without
 * row-level security (`RETURNING` under a SELECT policy raises where the read-back leaves the row
 * out), without triggers of its own (an AFTER trigger may change the row) and without rules; and
 * a select of the root's own columns only ({@link returningRead}).
 */
export function answersFromReturning(plan: WritePlan): boolean {
  const root = plan.root;
  const step = plan.steps[0];
  const rel = root.relation;
  return plan.steps.length === 1 && plan.nodes.length === 1 && step.kind === "insert" &&
    step.node === root.id && root.written && root.parent === null &&
    rel.kind === "table" && !rel.rowSecurity && !rel.userTriggers && !rel.hasRules &&
    // Every row inserted: a kept one (merge-new) is in no RETURNING.
    root.rows.every((r) => r.action === "insert" && r.fills.length === 0);
}

/** Plan nodes in select order (a node before its joins). */
export function preorder(plan: WritePlan): PlanNode[] {
  const out: PlanNode[] = [];
  const visit = (n: PlanNode) => {
    out.push(n);
    for (const id of n.children) visit(plan.nodes[id]);
  };
  visit(plan.root);
  return out;
}

/**
 * Compiles `plan` to its statements. Throws the QUERY_INVALID of two rows of one statement with
 * one key and different values.
 */
export function compileWrite(plan: WritePlan, opts: CompileWriteOptions = {}): CompiledWrite {
  const checks: Check[] = [];
  const check = (c: Check) => checks.push(c) - 1;
  /**
   * Per node, per row: where its run-time values are (the last statement storing them and the
   * row's position in it; -1: none yet). Arrays, not an object per row: bulk writes.
   */
  const stored = new Map<number, { statement: Int32Array; pos: Int32Array }>();
  const storedOf = (node: number, row: number): Stored | undefined => {
    const m = stored.get(node);
    if (!m || m.statement[row] < 0) return undefined;
    return { statement: m.statement[row], pos: m.pos[row] };
  };
  /** Per statement that stores: the node's row at each position. */
  const positions = new Map<number, number[]>();

  // Nodes whose run-time values other statements take: their statements store them.
  const consumed = new Set<number>();
  for (const n of plan.nodes) {
    for (const row of n.rows) for (const f of row.fills) consumed.add(f.node);
  }
  const root = plan.root;
  const staticKey = (row: PlanRow) =>
    root.keyColumns.every((c) => knownValue(root, row, c) != null);
  const readBack = opts.readBack !== false && root.returning.length > 0;
  const answer = readBack && opts.answer && answersFromReturning(plan)
    ? returningRead(root.query, 2)
    : null;
  const rootRuntime = !answer && readBack && root.written &&
    root.rows.some((r) => !staticKey(r));
  if (rootRuntime) consumed.add(root.id);

  const statements: WriteStatement[] = [];
  /** Per statement: its part of the shape, and how to build its text (on a cache miss). */
  const shape: string[] = [];
  const builders: (() => string)[] = [];
  for (const step of plan.steps) {
    const node = plan.nodes[step.node];
    if (step.kind === "delete") {
      if (opts.record) opts.record.eligible = false;
      const d = deleteOf(plan, node, step, opts.params);
      statements.push(d);
      // A root delete's text comes with its where's values: it is built every time.
      shape.push(`d${node.id}:${step.parents === null ? "root" : step.match.join(",")}`);
      builders.push(() => d.sql);
      continue;
    }
    const index = statements.length;
    if (opts.record && step.kind !== "insert") opts.record.eligible = false;
    const built = buildInput(node, step, storedOf, opts.record);
    const fills: FillSource[] = built.fills.map(([column, src, statement, from]) => ({
      column,
      statement,
      index: plan.nodes[src].returning.indexOf(from),
      check: check({ kind: "missing", node: plan.nodes[src], rows: positions.get(statement) }),
      bulk: (positions.get(statement)?.length ?? 0) >= BULK_ROWS,
    }));
    for (const f of fills) {
      if (f.index < 0) throw new SvcError("INTERNAL", `write: ${f.column} from an unread column`);
    }
    const store = consumed.has(node.id);
    if (store) {
      let m = stored.get(node.id);
      if (!m) {
        const n = node.rows.length;
        stored.set(node.id, m = { statement: new Int32Array(n).fill(-1), pos: new Int32Array(n) });
      }
      for (let i = 0; i < step.rows.length; i++) {
        m.statement[step.rows[i]] = index;
        m.pos[step.rows[i]] = built.pos[i];
      }
      positions.set(index, built.ords);
    }
    const params: unknown[] = [built.text];
    const spec: RowsSpec = {
      target: node,
      columns: step.columns,
      fills,
      index,
      store,
      marker: MARKER,
      check: -1,
      json: scalarInput(node, step),
      // One root row (the usual single-object write); children's texts stay independent of
      // their row counts, so one prepared statement serves every count.
      single: node.parent === null && built.ords.length === 1,
    };
    let build: (spec: RowsSpec) => string;
    let counts: WriteStatement["counts"] = "row";
    let answerShape = "";
    switch (step.kind) {
      case "insert":
        spec.check = check({ kind: "count", node });
        build = insertStatement;
        if (store) params.push(String(built.ords.length));
        else counts = "inserted";
        if (answer && node === root) {
          // Its command count (SELECT n) is the number of rows inserted and returned.
          const cap = opts.answer!.maxRowSize;
          const select = capRowSize(answer.rows, cap).sql;
          build = (s) => insertAnswerStatement(s, answer.columns, select);
          params.push(...answer.rows.params);
          answerShape = `:a${cap}`;
        }
        break;
      case "update":
        spec.check = check({ kind: "update", node });
        build = updateStatement;
        break;
      case "upsert":
        build = upsertStatement;
        break;
      case "insert-or-keep":
        build = insertOrKeepStatement;
        break;
      case "lookup":
        spec.check = check({ kind: "lookup", node });
        build = lookupStatement;
        break;
    }
    shape.push(
      `${step.kind}${node.id}:${store ? 1 : 0}:${spec.check}:${spec.json ? "j" : "b"}${
        spec.single ? "1" : ""
      }:${
        step.columns.map((c) => `${c.name}${c.role === "match" ? "=" : ""}${c.flag ? "?" : ""}`)
          .join(",")
      }:${
        fills.map((f) => `${f.column}<${f.statement}.${f.index}#${f.check}${f.bulk ? "b" : ""}`)
          .join(",")
      }${answerShape}`,
    );
    builders.push(() => build(spec));
    statements.push({ path: node.path, node: node.id, sql: "", params, counts });
  }

  // The root keys in payload order: known ones bound; run-time ones from the setting of the one
  // statement that stored every root row in payload order, else gathered by one more statement.
  let rootKeys: RootKeys = { columns: [...root.keyColumns], rows: [] };
  if (!rootRuntime) {
    // Only a read-back needs them.
    if (readBack) {
      rootKeys.rows = root.rows.map((row) => root.keyColumns.map((c) => literal(row.value(c))));
    }
  } else {
    const where = (r: number) => staticKey(root.rows[r]) ? undefined : storedOf(root.id, r);
    const first = where(0);
    let inOrder = first !== undefined;
    for (let r = 0; inOrder && r < root.rows.length; r++) {
      const w = where(r);
      inOrder = w !== undefined && w.statement === first!.statement && w.pos === r;
    }
    if (first && inOrder) {
      rootKeys = {
        columns: [...root.keyColumns],
        rows: [],
        settings: root.keyColumns.map((_, i) => valuesSetting(first.statement, i)),
        ...(root.rows.length === 1 ? { single: true } : {}),
      };
    } else {
      const entries = root.rows.map((row, r) => {
        if (staticKey(row)) return [root.keyColumns.map((c) => row.value(c)!)];
        const w = where(r);
        if (!w) throw new SvcError("INTERNAL", `write: no value for the key of root row ${r}`);
        return [w.statement, w.pos];
      });
      statements.push({
        path: root.path,
        node: root.id,
        sql: "",
        params: [JSON.stringify(entries)],
        counts: "none",
      });
      const storing = [
        ...new Set(entries.flatMap((e) => e.length === 2 ? [e[0] as number] : [])),
      ].sort((a, b) => a - b);
      shape.push(`root keys:${storing.join(",")}`);
      builders.push(() => rootKeysStatement(root.keyColumns.length, storing));
      rootKeys = {
        columns: [...root.keyColumns],
        rows: [],
        settings: root.keyColumns.map((_, i) => rootKeysSetting(i)),
        ...(root.rows.length === 1 ? { single: true } : {}),
      };
    }
  }
  // A template holds no key value: every root key is known only at run time, or not at all.
  if (
    opts.record && root.rows.some((row) => root.keyColumns.some((c) => row.value(c) != null))
  ) {
    opts.record.eligible = false;
  }
  // The texts, from the cache when this query was written with this shape before.
  let byShape = sqlCache.get(root.query);
  if (!byShape) sqlCache.set(root.query, byShape = new Map());
  const key = shape.join("\n");
  let texts = byShape.get(key);
  if (!texts) {
    texts = builders.map((b) => b());
    if (byShape.size >= SHAPES_PER_QUERY) byShape.delete(byShape.keys().next().value!);
    byShape.set(key, texts);
  }
  statements.forEach((st, i) => {
    if (!st.sql) st.sql = texts[i];
  });
  const written = preorder(plan).filter((n) => n.written);

  return {
    statements,
    rootKeys,
    ...(answer ? { answer: 0 } : {}),
    stats(results) {
      const byNode = new Map<number, Stat>();
      for (const n of written) {
        byNode.set(n.id, {
          path: n.path,
          table: n.table,
          submitted: n.rows.length,
          inserted: 0,
          updated: 0,
          deleted: 0,
        });
      }
      statements.forEach((s, i) => {
        const st = byNode.get(s.node);
        const rows = results[i];
        if (!st || !rows || s.counts === "none") return;
        if (s.counts === "row") {
          const row = rows[0] ?? {};
          st.inserted += Number(row.i ?? 0);
          st.updated += Number(row.u ?? 0);
          st.deleted += Number(row.d ?? 0);
        } else {
          const n = Number((rows as { count?: number | null }).count ?? 0);
          if (s.counts === "inserted") st.inserted += n;
          else st.deleted += n;
        }
      });
      return written.map((n) => byNode.get(n.id)!);
    },
    error(e) {
      const m = new RegExp(`${MARKER}:(\\d+):(-?\\d+)`).exec(String((e as Error)?.message ?? ""));
      if (!m) return e;
      const c = checks[Number(m[1])];
      const node = c.node;
      if (c.kind === "count") {
        return new SvcError(
          "INTERNAL",
          `inserting into ${node.table}: another number of rows returned than sent (a trigger skipped rows?)`,
        );
      }
      const row = node.rows[c.kind === "missing" ? c.rows?.[Number(m[2])] ?? -1 : Number(m[2])];
      if (!row) return e;
      if (c.kind === "update" || (c.kind === "missing" && row.action === "update")) {
        const key = node.keyColumns.map((k) => `${k} = ${JSON.stringify(row.value(k) ?? null)}`)
          .join(", ");
        return invalid(
          row.pointer,
          `no row of ${node.table} has the key given (${key}): rows carrying a key are updated, never inserted`,
        );
      }
      return invalid(row.pointer, `no row of ${node.table} has the key given`);
    },
  };
}

function literal(v: JsonValue | undefined): LiteralValue {
  if (v === undefined || v === null) return null;
  if (typeof v === "object") return JSON.stringify(v);
  return v;
}

/** The DELETE of a merge's omitted rows: children of given parents, or root rows in its where. */
function deleteOf(
  plan: WritePlan,
  node: PlanNode,
  step: DeleteStep,
  params: Record<string, unknown> | undefined,
): WriteStatement {
  const typed = (n: PlanNode, cols: string[]) =>
    cols.map((c) => ({ name: c, type: n.relation.columnMap.get(c)!.type }));
  const keep = JSON.stringify(step.keep);
  if (step.parents === null) {
    const where = compileCondition(node.query, params);
    const keyParam = `$${where.params.length + 1}`;
    return {
      path: node.path,
      node: node.id,
      sql: deleteRootStatement(
        node,
        node.query.sqlAlias,
        where.sql,
        typed(node, node.keyColumns),
        keyParam,
      ),
      params: [...where.params, keep],
      counts: "deleted",
    };
  }
  const parent = plan.nodes[node.parent!];
  return {
    path: node.path,
    node: node.id,
    sql: deleteChildrenStatement(
      node,
      node.join?.on ?? [],
      parent,
      typed(parent, step.match),
      typed(node, node.keyColumns),
    ),
    params: [JSON.stringify(step.parents), keep],
    counts: "deleted",
  };
}

/**
 * Whether every input column of `step` takes scalar values only (checkValue refuses objects and
 * arrays for any other column), so that its input can be read as `json` (see RowsSpec.json).
 */
function scalarInput(node: PlanNode, step: RowsStep): boolean {
  for (const c of step.columns) {
    const col = node.relation.columnMap.get(c.name);
    if (!col || col.category === "A" || col.category === "C") return false;
    if (col.type === "json" || col.type === "jsonb") return false;
  }
  return true;
}

/**
 * A payload value as JSON text in a statement's input; a number (an exact one too) in plain
 * decimal notation, as PostgreSQL's `numeric` prints it (`1e-7` → `0.0000001`, `1e21` →
 * `1000000000000000000000`): `jsonb` reads a number as `numeric` and hands a text column that
 * text; `json` hands over the text as written. template.ts writes its inputs the same way.
 */
export function inputValue(v: unknown): string {
  if (typeof v === "number") {
    const s = String(v);
    return s.includes("e") ? plainDecimal(s) : s;
  }
  return isExactNumber(v) ? plainDecimal(v.rawJSON) : JSON.stringify(v);
}

/**
 * A one-column key's token as a `Map` key: a number for the text of a number (`Map`s hash numbers
 * several times faster than strings, and a string of digits slowest of all), else its JSON text.
 * Two tokens give the same key exactly when their JSON texts are equal.
 */
function mapKey(token: JsonValue): string | number {
  if (typeof token === "string") {
    const n = Number(token);
    if (Number.isSafeInteger(n) && String(n) === token && !Object.is(n, -0)) return n;
  }
  return JSON.stringify(token);
}

/** The rows of one statement and the run-time values they take. */
interface BuiltInput {
  /** The input rows as JSON text (an array of objects, see statements.ts), `$1`. */
  text: string;
  /** The `"@o"` of each input row, in input order. */
  ords: number[];
  /** [input column, source node, source statement, source column]: one per column and statement. */
  fills: [string, number, number, string][];
  /** Per row of the step (in step order): its position in the input (a merged row: its twin's). */
  pos: Int32Array;
}

/**
 * The input rows of a step. A value only known at run time is sent as the position of its source
 * row in the statement that stored it (field `"@s<statement>"`). Rows sharing a key in a
 * statement that matches by key (update, upsert, insert-or-keep, lookup) are sent once when they
 * carry the same values — e.g. two tracks linking the same genre object — and rejected when they
 * differ (known values and run-time sources alike).
 */
function buildInput(
  node: PlanNode,
  step: RowsStep,
  storedOf: (node: number, row: number) => Stored | undefined,
  rec?: { eligible: boolean },
): BuiltInput {
  // Each row's JSON text is written in one pass (no object per row, no second walk by
  // JSON.stringify), as pieces of one text joined once (no string per row). A field written twice
  // keeps its last value, as in the jsonb it becomes.
  const parts: string[] = [];
  const ords: number[] = [];
  const fills: [string, number, number, string][] = [];
  const fillIndex = new Set<string>();
  const pos = new Int32Array(step.rows.length);
  /** Per key (statements matching by key): the position in the input of the row sent for it. */
  const seen = new Map<string | number, number>();
  const keyCols = step.kind === "update" || step.kind === "lookup"
    ? node.keyColumns
    : node.conflictColumns;
  const source = (f: { node: number; row: number; column: string }) => {
    const w = storedOf(f.node, f.row);
    if (!w) {
      throw new SvcError("INTERNAL", `write order: ${node.table}.${f.column} before its source`);
    }
    return w;
  };
  /** A row's value of `c` as its key compares it: numbers as their text, run-time values by source. */
  const token = (row: PlanRow, c: string): JsonValue => {
    const v = row.value(c);
    if (v !== undefined) return typeof v === "number" ? String(v) : v;
    const f = row.fills.find((x) => x.column === c);
    if (!f) return null;
    const w = source(f);
    return { "@fill": [w.statement, w.pos, f.from] };
  };
  // The field names as JSON (`,"name":`), once per statement rather than per row and column.
  const fields = step.columns.map((c) => `,${JSON.stringify(c.name)}:`);
  const flags = step.columns.map((c) => c.flag ? `,${JSON.stringify(`@p:${c.name}`)}:` : "");
  for (let at = 0; at < step.rows.length; at++) {
    const r = step.rows[at];
    const prow = node.rows[r];
    const start = parts.length;
    parts.push(ords.length > 0 ? `,{"@o":${r}` : `{"@o":${r}`);
    let sources: Map<string, number> | undefined;
    for (let i = 0; i < step.columns.length; i++) {
      const c = step.columns[i];
      const sends = c.role === "match" || prow.writes.has(c.name);
      const v = prow.value(c.name);
      if (sends && v !== undefined) {
        const walk = rec ? prow.src?.get(c.name) : undefined;
        if (walk !== undefined) parts.push(fields[i], `\0${walk}\0`);
        else {
          if (rec && v !== null) rec.eligible = false;
          parts.push(fields[i], inputValue(v));
        }
      }
      if (c.flag) parts.push(flags[i], prow.writes.has(c.name) ? "true" : "false");
      const f = prow.fills.length === 0 ? undefined : prow.fills.find((x) => x.column === c.name);
      if (sends && f && v === undefined) {
        const w = source(f);
        const id = `${c.name}\0${w.statement}`;
        if (!fillIndex.has(id)) {
          fillIndex.add(id);
          fills.push([c.name, f.node, w.statement, f.from]);
        }
        (sources ??= new Map()).set(sourceField(w.statement), w.pos);
      }
    }
    if (sources) { for (const [k, p] of sources) parts.push(`,${JSON.stringify(k)}:${p}`); }
    parts.push("}");
    if (step.kind !== "insert") {
      const key = keyCols.length === 1
        ? mapKey(token(prow, keyCols[0]))
        : JSON.stringify(keyCols.map((c) => token(prow, c)));
      const first = seen.get(key);
      if (first !== undefined) {
        // Only a repeated key makes the rows' values be compared.
        const body = (row: PlanRow) =>
          JSON.stringify(
            step.columns.map((c) =>
              c.role === "match" || row.writes.has(c.name) ? token(row, c.name) : null
            ),
          );
        const twin = node.rows[ords[first]];
        if (body(twin) !== body(prow)) {
          throw invalid(
            prow.pointer,
            `two rows of ${node.table} have the same key (${
              keyCols.join(", ")
            }) but different values ` +
              `(the other is ${twin.pointer})`,
          );
        }
        pos[at] = first;
        parts.length = start;
        continue;
      }
      seen.set(key, ords.length);
    }
    pos[at] = ords.length;
    ords.push(r);
  }
  return { text: `[${parts.join("")}]`, ords, fills, pos };
}
