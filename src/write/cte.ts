/**
 * One-statement writes: compiles a WritePlan whose steps can share one snapshot into a single
 * statement of data-modifying CTEs. Pure: no I/O.
 *
 * Shape (per step `i` of the plan, in plan order):
 * - `x<i>`: the step's input rows (`jsonb_to_recordset` of one parameter, as in statements.ts),
 *   with every value only known at run time (a foreign key filled from a row this write
 *   inserts) taken from the source node's `v<n>` by the source row's ordinal `"@o"`. All CTEs see
 *   the snapshot taken before the statement, so a child never reads its parent from the table:
 *   it takes the key from the parent CTE's RETURNING.
 * - `s<i>`: the INSERT / UPDATE / INSERT … ON CONFLICT / lookup / DELETE itself.
 * - `m<i>`: `s<i>` mapped back to input ordinals. UPDATE returns `x."@o"`; the ON CONFLICT forms
 *   join back by their conflict columns; a plain INSERT has no identity before it is inserted:
 *   its input is sorted by `"@o"` and RETURNING rows come back in that order (ModifyTable inserts
 *   the rows of its sorted subplan one at a time, the CTE's tuple store keeps them in that order),
 *   so the n-th returned row is the n-th input ordinal — and the row counts are checked.
 * - `v<n>`: every run-time value of node `n` (union of its `m<i>`), keyed by `"@o"`.
 * The final SELECT returns the counts of every written node, raises an error when a check fails
 * (an UPDATE whose key matched no row, a kept row that does not exist, an INSERT that returned
 * fewer rows than it was given) and stores the root keys, in payload order, as a transaction-local
 * setting (ROOT_KEYS_SETTING) that the read-back pipelined after it reads
 * (`compileRead(node, { rootKeys: { …, setting } })`).
 *
 * A check failure raises `invalid input syntax for type integer: "<marker>:<check>:<row>"` (a
 * cast of a marker text); `CteWrite.error` turns it back into the QUERY_INVALID (or INTERNAL) error
 * the multi-statement executor raises for the same row.
 *
 * Plans are eligible unless: they have no statement; a written relation is a view (rules and
 * INSTEAD OF triggers are not allowed in data-modifying CTEs) or is written at two nodes (two
 * CTEs could touch one row, which PostgreSQL does not order); one key reaches two statements of a
 * node (the second would have to see the first's row). Those keep the multi-statement path.
 */
import type { LiteralValue, RootKeys } from "../compile/ast.ts";
import { ident } from "../db/schema.ts";
import { invalid, SvcError } from "../errors.ts";
import type { Stat } from "./execute.ts";
import { flagName, qname, recordset } from "./statements.ts";
import type { DeleteStep, PlanNode, RowsStep, WritePlan } from "./types.ts";
import type { JsonValue } from "./values.ts";

/** The transaction-local setting holding the root keys of the last one-statement write. */
export const ROOT_KEYS_SETTING = "svc.write_root_keys";

/** A random marker per process: a payload value cannot forge a check failure. */
const MARKER = `svc-write-check-${crypto.randomUUID().slice(0, 8)}`;

/** A plan compiled to one statement. */
export interface CteWrite {
  sql: string;
  params: string[];
  /**
   * One entry per statement the multi-statement path would run (same paths, same order): the
   * text of the CTE doing it (`s<i> AS (INSERT …)`), for the `sql` flag (SPEC: one entry per
   * relation touched, as run).
   */
  parts: { path: string[]; select: string }[];
  /** Stats and root keys from the statement's one result row. */
  read(row: Record<string, unknown>): { stats: Stat[]; rootKeys: RootKeys };
  /** The SvcError a failed check stands for; any other error unchanged. */
  error(e: unknown): unknown;
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

/** Whether the plan can run as one statement (see the module comment). */
function eligible(plan: WritePlan): boolean {
  if (plan.steps.length === 0) return false;
  const tables = new Set<string>();
  for (const n of plan.nodes) {
    if (!n.written) continue;
    const kind = n.relation.kind;
    if (kind !== "table" && kind !== "partitioned_table") return false;
    // A write that returns no column (INSERT-only table, `returns: none`) keeps the plain path.
    if (n.returning.length === 0) return false;
    if (tables.has(n.table)) return false;
    tables.add(n.table);
  }
  return true;
}

/**
 * Compiles `plan` to one statement, or returns null when the plan is not eligible. Throws the
 * QUERY_INVALID the executor would raise for two rows with one key and different values.
 */
export function compileCteWrite(plan: WritePlan): CteWrite | null {
  if (!eligible(plan)) return null;
  const params: string[] = [];
  const bind = (text: string) => {
    params.push(text);
    return `$${params.length}`;
  };
  const ctes: string[] = [];
  const checks: { expr: string; check: Check }[] = [];
  const counts = new Map<number, { ins: string[]; upd: string[]; del: string[] }>();
  for (const n of plan.nodes) if (n.written) counts.set(n.id, { ins: [], upd: [], del: [] });
  /** Per node: row → the row it was merged with (same key, same values). */
  const aliases = new Map<number, Map<number, number>>();
  const canon = (node: number, row: number) => aliases.get(node)?.get(row) ?? row;
  /** Per node: the m<i> CTEs giving its run-time values; null once v<n> is defined. */
  const pending = new Map<number, string[]>();
  const defined = new Set<number>();
  /** Per node: key identity → step and row (keys reaching two statements are not eligible). */
  const seenKeys = new Map<number, Map<string, { step: number; r: number; body: string }>>();

  const defineV = (n: PlanNode) => {
    if (defined.has(n.id)) return;
    const parts = pending.get(n.id) ?? [];
    const cols = ['"@o"', ...n.returning.map(ident)].join(", ");
    ctes.push(
      parts.length > 0
        ? `v${n.id} AS (${parts.map((m) => `SELECT ${cols} FROM ${m}`).join(" UNION ALL ")})`
        : `v${n.id} AS (SELECT ${
          ['NULL::int AS "@o"', ...n.returning.map((c) => `t.${ident(c)}`)].join(", ")
        } FROM ${qname(n)} AS t WHERE false)`,
    );
    defined.add(n.id);
  };

  const parts: { path: string[]; select: string }[] = [];
  const part = (_i: number, node: PlanNode, name: string) => {
    const text = ctes.find((c) => c.startsWith(`${name} AS (`));
    if (text) parts.push({ path: node.path, select: text });
  };

  for (let i = 0; i < plan.steps.length; i++) {
    const step = plan.steps[i];
    const node = plan.nodes[step.node];
    // The values of a node are complete once its last statement is in: define v<n> then.
    const next = plan.steps[i + 1];
    if (step.kind === "delete") {
      compileDelete(step, node, plan, bind, ctes, i);
      part(i, node, `s${i}`);
      counts.get(node.id)!.del.push(`(SELECT count(*) FROM s${i})`);
      continue;
    }
    const built = buildInput(node, step, aliases, seenKeys, i);
    if (built === null) return null;
    for (const src of built.sources) if (!defined.has(src)) defineV(plan.nodes[src]);
    // A source row that was neither written nor found fails before its value is used.
    const missing = built.joins.map(([, src]) => {
      checks.push({ expr: "NULL::int", check: { kind: "missing", node: plan.nodes[src] } });
      return checks.length - 1;
    });
    ctes.push(inputCte(step, built, missing, bind(JSON.stringify(built.input)), i));
    const c = counts.get(node.id)!;
    const pend = pending.get(node.id) ?? [];
    pending.set(node.id, pend);
    const t = qname(node);
    const ret = node.returning.map((col) => `t.${ident(col)}`).join(", ");
    const retNames = node.returning.map((col) => `s.${ident(col)}`).join(", ");
    const names = step.columns.map((col) => ident(col.name));
    const insertHead = `INSERT INTO ${t} AS t${names.length ? ` (${names.join(", ")})` : ""} ` +
      `SELECT ${names.map((n) => `x.${n}`).join(", ")} FROM x${i} AS x ORDER BY x."@o"`;
    const backOn = node.conflictColumns.map((col, k) => `s."@m${k}" = x.${ident(col)}`)
      .join(" AND ");
    const back = node.conflictColumns.map((col, k) => `t.${ident(col)} AS "@m${k}"`);
    switch (step.kind) {
      case "insert": {
        ctes.push(`s${i} AS (${insertHead} RETURNING ${ret})`);
        ctes.push(
          `m${i} AS (SELECT o."@o", ${retNames} FROM ` +
            `(SELECT row_number() OVER () AS "@n", * FROM s${i}) AS s JOIN ` +
            `(SELECT "@o", row_number() OVER (ORDER BY "@o") AS "@n" FROM x${i}) AS o ` +
            `ON o."@n" = s."@n")`,
        );
        c.ins.push(`(SELECT count(*) FROM s${i})`);
        checks.push({
          expr: `CASE WHEN (SELECT count(*) FROM s${i}) <> (SELECT count(*) FROM x${i}) ` +
            `THEN -1 END`,
          check: { kind: "count", node },
        });
        break;
      }
      case "update": {
        const match = step.columns.filter((col) => col.role === "match")
          .map((col) => `t.${ident(col.name)} = x.${ident(col.name)}`).join(" AND ");
        const set = step.columns.filter((col) => col.role === "write").map((col) => {
          const q = ident(col.name);
          return col.flag
            ? `${q} = CASE WHEN x.${ident(flagName(col.name))} THEN x.${q} ELSE t.${q} END`
            : `${q} = x.${q}`;
        });
        ctes.push(
          `s${i} AS (UPDATE ${t} AS t SET ${set.join(", ")} FROM x${i} AS x WHERE ${match} ` +
            `RETURNING x."@o" AS "@o", ${ret})`,
        );
        ctes.push(`m${i} AS (SELECT s."@o", ${retNames} FROM s${i} AS s)`);
        c.upd.push(`(SELECT count(*) FROM s${i})`);
        checks.push({
          expr: `(SELECT min(x."@o") FROM x${i} AS x WHERE NOT EXISTS ` +
            `(SELECT FROM s${i} AS s WHERE s."@o" = x."@o"))`,
          check: { kind: "update", node },
        });
        break;
      }
      case "upsert":
      case "insert-or-keep": {
        let action = "DO NOTHING";
        let ins = "";
        if (step.kind === "upsert") {
          let set = step.columns.filter((col) => !node.conflictColumns.includes(col.name))
            .map((col) => col.name);
          if (set.length === 0) set = [node.conflictColumns[0]];
          action = `DO UPDATE SET ${
            set.map((col) => `${ident(col)} = EXCLUDED.${ident(col)}`).join(", ")
          }`;
          ins = `(t.xmax = 0) AS "@ins", `;
        }
        ctes.push(
          `s${i} AS (${insertHead} ON CONFLICT (${
            node.conflictColumns.map(ident).join(", ")
          }) ${action} RETURNING ${ins}${back.join(", ")}, ${ret})`,
        );
        ctes.push(
          `m${i} AS (SELECT x."@o", ${retNames} FROM s${i} AS s JOIN x${i} AS x ON ${backOn})`,
        );
        if (step.kind === "upsert") {
          c.ins.push(`(SELECT count(*) FILTER (WHERE "@ins") FROM s${i})`);
          c.upd.push(`(SELECT count(*) FILTER (WHERE NOT "@ins") FROM s${i})`);
        } else {
          c.ins.push(`(SELECT count(*) FROM s${i})`);
        }
        break;
      }
      case "lookup": {
        const match = step.columns.map((col) => `t.${ident(col.name)} = x.${ident(col.name)}`)
          .join(" AND ");
        // Rows an insert-or-keep of this statement inserted are not visible here: they come
        // from that statement's RETURNING instead.
        ctes.push(
          `m${i} AS (SELECT x."@o", ${ret} FROM ${t} AS t JOIN x${i} AS x ON ${match} ` +
            `WHERE NOT EXISTS (SELECT FROM (${
              pend.map((m) => `SELECT "@o" FROM ${m}`).join(" UNION ALL ") ||
              'SELECT NULL::int AS "@o"'
            }) AS d WHERE d."@o" = x."@o"))`,
        );
        pend.push(`m${i}`);
        defineV(node);
        checks.push({
          expr: `(SELECT min(x."@o") FROM x${i} AS x WHERE NOT EXISTS ` +
            `(SELECT FROM v${node.id} AS v WHERE v."@o" = x."@o"))`,
          check: { kind: "lookup", node },
        });
        break;
      }
    }
    part(i, node, step.kind === "lookup" ? `m${i}` : `s${i}`);
    if (step.kind !== "lookup") pend.push(`m${i}`);
    if (!next || next.node !== node.id) defineV(node);
  }

  // Root keys in payload order: known ones from the payload, the others from v<root>.
  const root = plan.root;
  if (!defined.has(root.id)) defineV(root);
  const rootInput = root.rows.map((row, r) => {
    const o: Record<string, JsonValue> = Object.create(null);
    o["@o"] = r;
    o["@a"] = canon(root.id, r);
    for (const col of root.keyColumns) {
      const v = row.values.get(col);
      if (v !== undefined) o[col] = v;
    }
    return o;
  });
  const keyCols = root.keyColumns.map((col) => ({
    name: col,
    type: root.relation.columnMap.get(col)!.type,
  }));
  const rootJson = `(SELECT coalesce(json_agg(json_build_array(${
    root.keyColumns.map((col) => `coalesce(v.${ident(col)}, x.${ident(col)})`).join(", ")
  }) ORDER BY x."@o"), '[]')::text FROM ${
    recordset([{ name: "@a", type: "integer" }, ...keyCols], "x", bind(JSON.stringify(rootInput)))
  } LEFT JOIN v${root.id} AS v ON v."@o" = x."@a")`;

  const stats = preorder(plan).filter((n) => n.written);
  const out: string[] = [];
  for (const n of stats) {
    const c = counts.get(n.id)!;
    const sum = (xs: string[]) => (xs.length ? xs.join(" + ") : "0");
    out.push(
      `(${sum(c.ins)})::int AS "i${n.id}"`,
      `(${sum(c.upd)})::int AS "u${n.id}"`,
      `(${sum(c.del)})::int AS "d${n.id}"`,
    );
  }
  ctes.push(
    `chk AS (SELECT ${
      checks.length ? checks.map((c, k) => `${c.expr} AS "c${k}"`).join(", ") : "1 AS one"
    })`,
  );
  const raise = checks.length
    ? `CASE ${
      checks.map((_, k) =>
        `WHEN chk."c${k}" IS NOT NULL THEN ('${MARKER}:${k}:' || chk."c${k}")::int`
      ).join(" ")
    } ELSE 0 END`
    : "0";
  out.push(`${raise} AS "@check"`);
  out.push(`set_config('${ROOT_KEYS_SETTING}', ${rootJson}, true) AS "@root"`);
  const sql = `WITH ${ctes.join(", ")} SELECT ${out.join(", ")} FROM chk`;

  return {
    sql,
    params,
    parts,
    read(row) {
      const st: Stat[] = stats.map((n) => ({
        path: n.path,
        table: n.table,
        submitted: n.rows.length,
        inserted: Number(row[`i${n.id}`]),
        updated: Number(row[`u${n.id}`]),
        deleted: Number(row[`d${n.id}`]),
      }));
      const keys = JSON.parse(String(row["@root"])) as LiteralValue[][];
      return {
        stats: st,
        rootKeys: {
          columns: [...root.keyColumns],
          rows: keys.map((k) =>
            k.map((v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : v))
          ),
        },
      };
    },
    error(e) {
      const m = new RegExp(`${MARKER}:(\\d+):(-?\\d+)`).exec(String((e as Error)?.message ?? ""));
      if (!m) return e;
      const { kind, node } = checks[Number(m[1])].check;
      const r = Number(m[2]);
      if (kind === "count") {
        return new SvcError(
          "INTERNAL",
          `inserting into ${node.table}: fewer rows returned than sent (a trigger skipped rows?)`,
        );
      }
      if (kind === "update" || (kind === "missing" && node.rows[r].action === "update")) {
        const key = node.keyColumns.map((c) =>
          `${c} = ${JSON.stringify(node.rows[r].values.get(c) ?? null)}`
        ).join(", ");
        return invalid(
          node.rows[r].pointer,
          `no row of ${node.table} has the key given (${key}): rows carrying a key are updated, never inserted`,
        );
      }
      return invalid(node.rows[r].pointer, `no row of ${node.table} has the key given`);
    },
  };
}

/** The rows and fill joins of one step's input. */
interface BuiltInput {
  input: Record<string, JsonValue>[];
  /** Fill joins: [column, source node, source column]; JSON field `"@f<k>"`, alias `f<k>`. */
  joins: [string, number, string][];
  /** Source nodes whose v<n> the input joins. */
  sources: Set<number>;
}

/**
 * The input rows of a step, as the executor builds them, except that a value only known at run
 * time is sent as the ordinal of its source row. Rows sharing a key (known values and run-time
 * sources alike) are sent once when they carry the same values, rejected when they differ; a key
 * reaching another statement of the node makes the plan ineligible (null).
 */
function buildInput(
  node: PlanNode,
  step: RowsStep,
  aliases: Map<number, Map<number, number>>,
  seenKeys: Map<number, Map<string, { step: number; r: number; body: string }>>,
  stepIndex: number,
): BuiltInput | null {
  const canon = (n: number, row: number) => aliases.get(n)?.get(row) ?? row;
  const input: Record<string, JsonValue>[] = [];
  const joins: [string, number, string][] = [];
  const joinIndex = new Map<string, number>();
  const sources = new Set<number>();
  // A lookup only reads: its keys are those of the node's other statements.
  const slot = node.id * 2 + (step.kind === "lookup" ? 1 : 0);
  let seen = seenKeys.get(slot);
  if (!seen) seenKeys.set(slot, seen = new Map());
  const keyCols = step.kind === "update" || step.kind === "lookup"
    ? node.keyColumns
    : node.conflictColumns;
  for (const r of step.rows) {
    const prow = node.rows[r];
    const o: Record<string, JsonValue> = Object.create(null);
    const token = (c: string): JsonValue => {
      const v = prow.values.get(c);
      if (v !== undefined) return v;
      const f = prow.fills.find((x) => x.column === c);
      return f ? { "@fill": [f.node, canon(f.node, f.row), f.from] } : null;
    };
    o["@o"] = r;
    for (const c of step.columns) {
      const sends = c.role === "match" || prow.writes.has(c.name);
      const v = prow.values.get(c.name);
      if (sends && v !== undefined) o[c.name] = v;
      if (c.flag) o[flagName(c.name)] = prow.writes.has(c.name);
      const f = prow.fills.find((x) => x.column === c.name);
      if (sends && f && v === undefined) {
        const id = `${c.name}\0${f.node}\0${f.from}`;
        let k = joinIndex.get(id);
        if (k === undefined) {
          k = joins.length;
          joinIndex.set(id, k);
          joins.push([c.name, f.node, f.from]);
          sources.add(f.node);
        }
        o[`@f${k}`] = canon(f.node, f.row);
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
        if (first.step !== stepIndex) return null;
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
      seen.set(key, { step: stepIndex, r, body });
    }
    input.push(o);
  }
  return { input, joins, sources };
}

/** `x<i>`: the input of step `i`, run-time values taken from their sources' `v<n>`. */
function inputCte(
  step: RowsStep,
  built: BuiltInput,
  missing: number[],
  param: string,
  i: number,
) {
  const defs = [
    ...step.columns,
    ...built.joins.map((_, k) => ({ name: `@f${k}`, type: "integer", flag: false })),
  ];
  const cols = step.columns.map((c) => {
    const q = ident(c.name);
    const fills = built.joins.flatMap(([col, , from], k) =>
      col === c.name ? [`(f${k}.${ident(from)})::${c.type}`] : []
    );
    const raise = built.joins.flatMap(([col], k) =>
      col === c.name
        ? [
          `CASE WHEN r."@f${k}" IS NULL THEN NULL WHEN ('${MARKER}:${missing[k]}:' || ` +
          `r."@f${k}")::int = 0 THEN NULL END::${c.type}`,
        ]
        : []
    );
    const expr = fills.length ? `coalesce(${[...fills, `r.${q}`, ...raise].join(", ")})` : `r.${q}`;
    const flag = c.flag ? `, r.${ident(flagName(c.name))}` : "";
    return `${expr} AS ${q}${flag}`;
  });
  const joins = built.joins.map(([, src], k) =>
    ` LEFT JOIN v${src} AS f${k} ON f${k}."@o" = r."@f${k}"`
  );
  return `x${i} AS (SELECT ${['r."@o"', ...cols].join(", ")} FROM ${recordset(defs, "r", param)}${
    joins.join("")
  })`;
}

/** `s<i>`: a merge's delete of omitted children (its parameters are known when planning). */
function compileDelete(
  step: DeleteStep,
  node: PlanNode,
  plan: WritePlan,
  bind: (text: string) => string,
  ctes: string[],
  i: number,
): void {
  const parent = plan.nodes[node.parent!];
  const parents = JSON.parse(step.params[0]) as Record<string, unknown>[];
  const matchCols = Object.keys(parents[0] ?? {});
  const typed = (n: PlanNode, cols: string[]) =>
    cols.map((c) => ({ name: c, type: n.relation.columnMap.get(c)!.type }));
  const on = node.join?.on ?? [];
  const refs = on.map(([, parentCol], k) => `t.${ident(parentCol)} AS "r${k}"`);
  const fk = on.map(([childCol], k) => `c.${ident(childCol)} = p."r${k}"`);
  const keep = node.keyColumns.map((k) => `k.${ident(k)} = c.${ident(k)}`);
  const match = matchCols.map((c) => `t.${ident(c)} = x.${ident(c)}`).join(" AND ");
  ctes.push(
    `s${i} AS (DELETE FROM ${qname(node)} AS c USING (SELECT DISTINCT ${refs.join(", ")} FROM ${
      qname(parent)
    } AS t JOIN ${
      recordset(typed(parent, matchCols), "x", bind(step.params[0]), false)
    } ON ${match}) AS p WHERE ${fk.join(" AND ")} AND NOT EXISTS (SELECT FROM ${
      recordset(typed(node, node.keyColumns), "k", bind(step.params[1]), false)
    } WHERE ${keep.join(" AND ")}) RETURNING 1)`,
  );
}
