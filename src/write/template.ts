/**
 * Plan templates: a write whose payload has the shape of an earlier write of the same query
 * (the same keys, in the same order, in every object; the same row counts; null in the same
 * places) skips planning and compiling. Everything the planner decides from a payload — rows,
 * actions, fills, statements, their columns and SQL — follows from that shape when every
 * statement is a plain INSERT and no key value is given (the usual nested insert), so the first
 * write of a shape records where each payload value goes in the statements' input text, and the
 * next ones only check their values (the same checks, in the same order) and put them in place.
 * Any other write (updates, upserts, deletes, keys given, a column given twice) is planned in
 * full every time, and so is a write whose values fail a check: the planner then reports the
 * error exactly as without templates. Pure: no I/O.
 */
import type { RelationNode } from "../compile/ast.ts";
import type { Column } from "../db/schema.ts";
import { type PlanRecorder, planWrite } from "./plan.ts";
import {
  type CompiledWrite,
  compileWrite,
  inputValue,
  SHAPES_PER_QUERY,
  type WriteStatement,
} from "./compile.ts";
import { checkValue, isObject } from "./values.ts";

/** Payloads with more values than this are planned in full (a template's size follows the payload's). */
export const TEMPLATE_MAX_VALUES = 512;

/** A select item seen by the walk: its index, and the query node of a join that is written. */
interface WalkItem {
  i: number;
  join: RelationNode | null;
}

const walkItems = new WeakMap<RelationNode, Map<string, WalkItem>>();

function walkItemsOf(q: RelationNode): Map<string, WalkItem> {
  let items = walkItems.get(q);
  if (!items) {
    items = new Map();
    q.select.forEach((it, i) => {
      const join = it.value.kind === "join" && it.mode !== "get" ? it.value.join.node : null;
      items!.set(it.name, { i, join });
    });
    walkItems.set(q, items);
  }
  return items;
}

/** Shape codes of the walk (one UTF-16 unit each): brackets, then one per key. */
const OPEN_ROWS = 1, CLOSE_ROWS = 2, OPEN_ROW = 3, CLOSE_ROW = 4, KEY = 8;
/** A key's code: KEY + 4 × its select item's index + the kind of its value. */
const NULL = 0, VALUE = 1, ROWS = 2, ROW = 3;
const MAX_ITEM = (0xffff - KEY) >> 2;

/**
 * The walk of a payload: its shape (select item of each key, nullness of values, nesting), as
 * codes, and its values in walk order (every key of an object, in order, then the joins' rows).
 */
class Walk {
  codes: number[] = [];
  vals: unknown[] = [];
  constructor(readonly base?: Map<object, number>) {}

  /** The shape as a string (a cache key). */
  shape(): string {
    return String.fromCharCode.apply(null, this.codes);
  }

  /** False when the payload is not one the planner accepts as it is (it then reports why). */
  rows(q: RelationNode, rows: unknown[]): boolean {
    this.codes.push(OPEN_ROWS);
    for (const row of rows) {
      if (!isObject(row) || !this.row(q, row)) return false;
    }
    this.codes.push(CLOSE_ROWS);
    return this.vals.length <= TEMPLATE_MAX_VALUES;
  }

  private row(q: RelationNode, obj: Record<string, unknown>): boolean {
    const items = walkItemsOf(q);
    const codes = this.codes;
    this.base?.set(obj, this.vals.length);
    codes.push(OPEN_ROW);
    let joins = false;
    for (const key in obj) {
      const item = items.get(key);
      if (!item || item.i > MAX_ITEM) return false;
      const v = obj[key];
      this.vals.push(v);
      const code = KEY + 4 * item.i;
      if (v === null) codes.push(code + NULL);
      else if (item.join === null) codes.push(code + VALUE);
      else if (Array.isArray(v)) {
        codes.push(code + ROWS);
        joins = true;
      } else if (isObject(v)) {
        codes.push(code + ROW);
        joins = true;
      } else return false;
    }
    if (joins) {
      for (const key in obj) {
        const item = items.get(key)!;
        const v = obj[key];
        if (item.join === null || v === null) continue;
        if (Array.isArray(v)) {
          if (!this.rows(item.join, v)) return false;
        } else if (!this.row(item.join, v as Record<string, unknown>)) return false;
      }
    }
    codes.push(CLOSE_ROW);
    return this.vals.length <= TEMPLATE_MAX_VALUES;
  }
}

/** A statement of a template: its input text's pieces around the values (walk indices). */
interface TemplateStatement {
  statement: WriteStatement;
  pieces: string[] | null;
  at: number[];
}

interface Template {
  checks: [number, string, Column, string, string][];
  statements: TemplateStatement[];
  write: CompiledWrite;
}

const templates = new WeakMap<RelationNode, Map<string, Template>>();

/** How many payload shapes of `query` have a plan template. */
export function cachedTemplates(query: RelationNode): number {
  return templates.get(query)?.size ?? 0;
}

function fillText(pieces: string[], at: number[], vals: unknown[]): string {
  let s = pieces[0];
  for (let i = 0; i < at.length; i++) s += inputValue(vals[at[i]]) + pieces[i + 1];
  return s;
}

/** Splits a recorded input text at its `\0<walk index>\0` marks. */
function split(text: string): { pieces: string[]; at: number[] } {
  const parts = text.split("\0");
  const pieces: string[] = [];
  const at: number[] = [];
  parts.forEach((p, i) => i % 2 === 0 ? pieces.push(p) : at.push(Number(p)));
  return { pieces, at };
}

/** Options of {@link planAndCompileWrite}. */
export interface PlanCompileOptions {
  /** Whether the write is read back (default true). */
  readBack?: boolean;
  /** Well-known parameter values (a root delete's `where` may use them). */
  params?: Record<string, unknown>;
  /** Answer from `RETURNING` when the write allows it (see compile.ts `CompileWriteOptions`). */
  answer?: { maxRowSize: number };
}

/**
 * `compileWrite(planWrite(node, data, pointer, …), …)`, from a plan template when a write of
 * `node` with a payload of this shape was planned before (see above): the same statements,
 * parameters, stats and errors.
 */
export function planAndCompileWrite(
  node: RelationNode,
  data: unknown,
  pointer = "/data",
  opts: PlanCompileOptions = {},
): CompiledWrite {
  const readBack = opts.readBack !== false;
  const full = () =>
    compileWrite(planWrite(node, data, pointer, { readBack }), {
      params: opts.params,
      readBack,
      answer: opts.answer,
    });
  if (!Array.isArray(data)) return full();
  let byShape = templates.get(node);
  const walk = new Walk();
  if (!walk.rows(node, data)) return full();
  const answer = opts.answer ? `a${opts.answer.maxRowSize}` : "";
  const key = `${pointer}\0${readBack ? 1 : 0}${answer}\0${walk.shape()}`;
  const t = byShape?.get(key);
  if (t) {
    const vals = walk.vals;
    try {
      for (const [at, table, col, ptr, k] of t.checks) checkValue(table, col, vals[at], ptr, k);
    } catch {
      return full(); // the planner reports the first failure, as it always does
    }
    return {
      ...t.write,
      statements: t.statements.map(({ statement, pieces, at }) =>
        pieces
          ? { ...statement, params: [fillText(pieces, at, vals), ...statement.params.slice(1)] }
          : statement
      ),
    };
  }
  // Plan in full, recording where each value goes.
  const rec: PlanRecorder = { base: new Map(), checks: [], eligible: true };
  const recWalk = new Walk(rec.base);
  recWalk.rows(node, data);
  const vals = recWalk.vals;
  const plan = planWrite(node, data, pointer, { readBack, record: rec });
  const crec = { eligible: rec.eligible };
  const w = compileWrite(plan, {
    params: opts.params,
    readBack,
    answer: opts.answer,
    record: crec,
  });
  const statements: TemplateStatement[] = w.statements.map((s) => {
    const text = s.params[0];
    if ((s.counts !== "row" && s.counts !== "inserted") || typeof text !== "string") {
      return { statement: s, pieces: null, at: [] };
    }
    const { pieces, at } = split(text);
    s.params[0] = fillText(pieces, at, vals);
    return { statement: s, pieces, at };
  });
  if (crec.eligible) {
    if (!byShape) templates.set(node, byShape = new Map());
    if (byShape.size >= SHAPES_PER_QUERY) byShape.delete(byShape.keys().next().value!);
    byShape.set(key, { checks: rec.checks, statements, write: w });
  }
  return w;
}
