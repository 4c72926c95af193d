/**
 * The data types of a write plan (plan.ts builds them, steps.ts groups rows into statements,
 * compile.ts turns the steps into SQL, execute.ts runs it). No code.
 */
import type { JoinNode, RelationNode, WriteMode } from "../compile/ast.ts";
import type { Relation } from "../db/schema.ts";
import type { InputColumn } from "./statements.ts";
import type { JsonValue } from "./values.ts";

/** What is done with one payload row. */
export type RowAction =
  /** Inserted. */
  | "insert"
  /** Updated by its key; an error when no row has that key. */
  | "update"
  /** `INSERT … ON CONFLICT (conflict columns) DO UPDATE`. */
  | "upsert"
  /** `INSERT … ON CONFLICT (key) DO NOTHING` (merge-new, natural key). */
  | "insert-or-keep"
  /** Left unchanged (merge-new, or a merge row with nothing to set). */
  | "keep"
  /** Never written: a readonly outgoing join's object, only read for its key. */
  | "link";

/** A value one row takes at run time from another row of the plan, written before it. */
export interface Fill {
  /** Column of this row receiving the value. */
  column: string;
  /** Plan node (index in WritePlan.nodes) and row the value comes from. */
  node: number;
  row: number;
  /** Column of the source row. */
  from: string;
}

/** One payload row of a plan node (made by plan_rows.ts: values live in the node's columns). */
export interface PlanRow {
  /** JSON pointer of the row in the request (made on each read: only errors need it). */
  readonly pointer: string;
  /** Index of the parent row in the parent node's rows (-1 at the root). */
  readonly parentRow: number;
  action: RowAction;
  /**
   * The value of `column` known before execution: a payload value (of a written or key column)
   * or a value filled from a row whose values are already known; `undefined` when none is.
   */
  value(column: string): JsonValue | undefined;
  /** Sets the known value of `column`. */
  setValue(column: string, v: JsonValue): void;
  /** Forgets the known value of `column` (it is filled at run time). */
  deleteValue(column: string): void;
  /**
   * Columns this row writes: payload columns that are written, and every filled column. Shared by
   * rows that write the same columns (plan.ts `withWrite`): never changed in place.
   */
  writes: ReadonlySet<string>;
  /** Values filled at run time (from rows whose values only the database knows). */
  fills: Fill[];
  /**
   * Plan nodes of incoming joins whose key is present in this row (their deletes apply); null
   * when none is.
   */
  present: Set<number> | null;
  /**
   * Only while a plan template is recorded (template.ts): for each column with a value taken from
   * the payload, the index of that payload value in the walk of the payload.
   */
  src?: Map<string, number>;
}

/** A relation of the query that the write visits. */
export interface PlanNode {
  /** Index in WritePlan.nodes. */
  id: number;
  /** Join keys from the root (empty for the root). */
  path: string[];
  /** `schema.name`. */
  table: string;
  relation: Relation;
  /** Write mode; `readonly` nodes are link nodes (outgoing readonly joins). */
  mode: WriteMode;
  /** Whether the node is written (appears in stats); false for link nodes. */
  written: boolean;
  /** The query node. */
  query: RelationNode;
  /** Parent node id (null at the root) and how this node joins it. */
  parent: number | null;
  join: JoinNode | null;
  /** Child plan nodes (in select order). */
  children: number[];
  /** Columns identifying a row (primary key; a view's `on_conflict`). */
  keyColumns: string[];
  /** Columns of `ON CONFLICT` (upsert: `on_conflict` or key; merge/merge-new: key). */
  conflictColumns: string[];
  /** Columns read back from written rows: the key, and what other rows take from this one. */
  returning: string[];
  rows: PlanRow[];
}

/**
 * Deletes the existing rows a merge omits: children of the parent rows given (matched by `match`
 * columns of the parent), or, at the root (`parents` null), the rows matching the root query's
 * `where`. Rows whose key is in `keep` stay. Fully known when planning.
 */
export interface DeleteStep {
  kind: "delete";
  node: number;
  /** Parent rows (their `match` column values); null: the root's `where` scopes the delete. */
  parents: Record<string, JsonValue>[] | null;
  /** Columns of the parent identifying `parents` (its key or its conflict columns). */
  match: string[];
  /** Key values of the rows the payload carries (never deleted). */
  keep: Record<string, JsonValue>[];
}

/** A set-based statement over some rows of a node. */
export interface RowsStep {
  kind: "insert" | "update" | "upsert" | "insert-or-keep" | "lookup";
  node: number;
  /** Rows (indices in the node's rows) sent as `$1`; a lookup only sends those still lacking values. */
  rows: number[];
  /** Columns of the `jsonb_to_recordset` input. */
  columns: InputColumn[];
}

/** One statement of a plan. */
export type WriteStep = DeleteStep | RowsStep;

/** The plan of a write. */
export interface WritePlan {
  root: PlanNode;
  /** Every plan node; `nodes[i].id === i`. */
  nodes: PlanNode[];
  /** Statements in execution order. */
  steps: WriteStep[];
}

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
