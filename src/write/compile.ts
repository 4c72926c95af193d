/**
 * The write engine's compiler: turns a WritePlan (plan.ts, steps.ts) into the statements to run,
 * in order — one plain statement per relation and level (and per set of provided columns), with
 * every value bound: rows as one jsonb parameter, a root's delete scope compiled by the read
 * compiler. Nothing passes through JavaScript between the statements (generated keys flow through
 * transaction-local settings, see statements.ts), so all of them, the read-back and commit go to
 * the database in one round trip. Pure: no I/O.
 */
import type { LiteralValue, RootKeys } from "../compile/ast.ts";
import { compileCondition } from "../compile/sql.ts";
import type { Row } from "../db/tx.ts";
import { invalid, SvcError } from "../errors.ts";
import {
  deleteChildrenStatement,
  deleteRootStatement,
  type FillSource,
  insertOrKeepStatement,
  insertStatement,
  lookupStatement,
  ROOT_KEYS_SETTING,
  type RowsSpec,
  sourceField,
  type Store,
  updateStatement,
  upsertStatement,
} from "./statements.ts";
import type { DeleteStep, PlanNode, RowsStep, Stat, WritePlan } from "./types.ts";
import type { JsonValue } from "./values.ts";

/** A random marker per process: a payload value cannot forge a check failure. */
const MARKER = `svc-write-check-${crypto.randomUUID().slice(0, 8)}`;

/** One statement of a write. */
export interface WriteStatement {
  /** Join keys from the root to the relation written (ComplexResult `sql`, `query_plan`). */
  path: string[];
  /** Plan node written. */
  node: number;
  sql: string;
  params: unknown[];
  /**
   * Where its counts come from: its one row (`i`, `u`, `d`), or the command count of a plain
   * INSERT or DELETE.
   */
  counts: "row" | "inserted" | "deleted";
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
}

interface Check {
  /** missing: a row other rows take values from was not written nor found. */
  kind: "update" | "lookup" | "count" | "missing";
  node: PlanNode;
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
  const check = (kind: Check["kind"], node: PlanNode) => checks.push({ kind, node }) - 1;
  /** Per node: row → the row it was merged with (same key, same values). */
  const aliases = new Map<number, Map<number, number>>();
  const canon = (node: number, row: number) => aliases.get(node)?.get(row) ?? row;

  // Nodes whose run-time values other statements take: they store them.
  const consumed = new Set<number>();
  for (const n of plan.nodes) {
    for (const row of n.rows) for (const f of row.fills) consumed.add(f.node);
  }
  const root = plan.root;
  const staticKey = (values: Map<string, JsonValue>) =>
    root.keyColumns.every((c) => values.get(c) != null);
  const readBack = opts.readBack !== false && root.returning.length > 0;
  const rootRuntime = readBack && root.written && root.rows.some((r) => !staticKey(r.values));
  if (rootRuntime) consumed.add(root.id);
  const lastStep = new Map<number, number>();
  plan.steps.forEach((s, i) => {
    if (s.kind !== "delete") lastStep.set(s.node, i);
  });

  const statements: WriteStatement[] = [];
  const stored = new Set<number>();
  for (let i = 0; i < plan.steps.length; i++) {
    const step = plan.steps[i];
    const node = plan.nodes[step.node];
    if (step.kind === "delete") {
      statements.push(deleteOf(plan, node, step, opts.params));
      continue;
    }
    const built = buildInput(node, step, aliases, canon);
    const fills: FillSource[] = built.fills.map(([column, src, from]) => ({
      column,
      node: src,
      index: plan.nodes[src].returning.indexOf(from),
      check: check("missing", plan.nodes[src]),
    }));
    for (const f of fills) {
      if (f.index < 0) throw new SvcError("INTERNAL", `write: ${f.column} from an unread column`);
    }
    const params: unknown[] = [JSON.stringify(built.input)];
    let store: Store | null = null;
    if (consumed.has(node.id)) {
      let rootKeys: string | null = null;
      if (node === root && rootRuntime && lastStep.get(node.id) === i) {
        params.push(JSON.stringify(
          root.rows.map((row, r) =>
            staticKey(row.values)
              ? root.keyColumns.map((c) => row.values.get(c) as JsonValue)
              : canon(root.id, r)
          ),
        ));
        rootKeys = `$${params.length}`;
      }
      store = { node: node.id, merge: stored.has(node.id), rootKeys };
      stored.add(node.id);
    }
    const spec: RowsSpec = {
      target: node,
      columns: step.columns,
      fills,
      param: "$1",
      store,
      marker: MARKER,
      check: -1,
    };
    let sql: string;
    let counts: WriteStatement["counts"] = "row";
    switch (step.kind) {
      case "insert":
        spec.check = check("count", node);
        sql = insertStatement(spec);
        if (!store) counts = "inserted";
        break;
      case "update":
        spec.check = check("update", node);
        sql = updateStatement(spec);
        break;
      case "upsert":
        sql = upsertStatement(spec);
        break;
      case "insert-or-keep":
        sql = insertOrKeepStatement(spec);
        break;
      case "lookup":
        spec.check = check("lookup", node);
        sql = lookupStatement(spec);
        break;
    }
    statements.push({ path: node.path, node: node.id, sql, params, counts });
  }

  const rootKeys: RootKeys = rootRuntime
    ? { columns: [...root.keyColumns], rows: [], setting: ROOT_KEYS_SETTING }
    : {
      columns: [...root.keyColumns],
      rows: root.rows.map((row) => root.keyColumns.map((c) => literal(row.values.get(c)))),
    };
  const written = preorder(plan).filter((n) => n.written);

  return {
    statements,
    rootKeys,
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
        if (!st || !rows) return;
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
      const { kind, node } = checks[Number(m[1])];
      const r = Number(m[2]);
      if (kind === "count") {
        return new SvcError(
          "INTERNAL",
          `inserting into ${node.table}: fewer rows returned than sent (a trigger skipped rows?)`,
        );
      }
      const row = node.rows[r];
      if (!row) return e;
      if (kind === "update" || (kind === "missing" && row.action === "update")) {
        const key = node.keyColumns.map((c) =>
          `${c} = ${JSON.stringify(row.values.get(c) ?? null)}`
        ).join(", ");
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

/** The rows of one statement and the run-time values they take. */
interface BuiltInput {
  input: Record<string, JsonValue>[];
  /** [input column, source node, source column]: one per column and source node. */
  fills: [string, number, string][];
}

/**
 * The input rows of a step. A value only known at run time is sent as the `"@o"` of its source
 * row (field `"@s<node>"`). Rows sharing a key in a statement that matches by key (update,
 * upsert, insert-or-keep, lookup) are sent once when they carry the same values — e.g. two tracks
 * linking the same genre object — and rejected when they differ (known values and run-time
 * sources alike).
 */
function buildInput(
  node: PlanNode,
  step: RowsStep,
  aliases: Map<number, Map<number, number>>,
  canon: (node: number, row: number) => number,
): BuiltInput {
  const input: Record<string, JsonValue>[] = [];
  const fills: [string, number, string][] = [];
  const fillIndex = new Set<string>();
  const seen = new Map<string, { r: number; body: string }>();
  const keyCols = step.kind === "update" || step.kind === "lookup"
    ? node.keyColumns
    : node.conflictColumns;
  for (const r of step.rows) {
    const prow = node.rows[r];
    const o: Record<string, JsonValue> = Object.create(null);
    const token = (c: string): JsonValue => {
      const v = prow.values.get(c);
      if (v !== undefined) return typeof v === "number" ? String(v) : v;
      const f = prow.fills.find((x) => x.column === c);
      return f ? { "@fill": [f.node, canon(f.node, f.row), f.from] } : null;
    };
    o["@o"] = r;
    for (const c of step.columns) {
      const sends = c.role === "match" || prow.writes.has(c.name);
      const v = prow.values.get(c.name);
      if (sends && v !== undefined) o[c.name] = v;
      if (c.flag) o[`@p:${c.name}`] = prow.writes.has(c.name);
      const f = prow.fills.find((x) => x.column === c.name);
      if (sends && f && v === undefined) {
        const id = `${c.name}\0${f.node}`;
        if (!fillIndex.has(id)) {
          fillIndex.add(id);
          fills.push([c.name, f.node, f.from]);
        }
        o[sourceField(f.node)] = canon(f.node, f.row);
      }
    }
    if (step.kind !== "insert") {
      const key = JSON.stringify(keyCols.map(token));
      const body = JSON.stringify(
        step.columns.map((c) =>
          c.role === "match" || prow.writes.has(c.name) ? token(c.name) : null
        ),
      );
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
        let a = aliases.get(node.id);
        if (!a) aliases.set(node.id, a = new Map());
        a.set(r, first.r);
        continue;
      }
      seen.set(key, { r, body });
    }
    input.push(o);
  }
  return { input, fills };
}
