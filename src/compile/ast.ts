/**
 * The validated query AST: what the parser (src/compile/parse.ts) produces from a JSON query tree
 * or the GET form after checking every name against the Schema model, and what the SQL generator
 * (src/compile/sql.ts) and the write planner (src/write/) consume. Everything here is resolved:
 * relations and functions point into the Schema model, column references are known to exist.
 */
import type { Column, ForeignKey, Func, Relation } from "../db/schema.ts";
import type { ExactNumber } from "../formats/json.ts";

/**
 * A literal value; always becomes a bind parameter. A number a double cannot hold is kept as its
 * exact text (src/formats/json.ts).
 */
export type LiteralValue = string | number | boolean | null | ExactNumber;

/** A validated expression. */
export type Expr =
  /** A column of the relation at `scope` (a RelationNode.sqlAlias). */
  | { kind: "column"; scope: string; column: Column }
  /** A computed field: `schema.fn(scope_row)`. */
  | { kind: "computed"; scope: string; schema: string; fn: string; type: string; set: boolean }
  /** A column of an outgoing (to-one) joined relation: `[".", alias, column]`. */
  | { kind: "joined"; join: JoinNode; column: Column }
  /** A field of a composite-typed expression: `[".", compositeColumn, field]`. */
  | { kind: "field"; expr: Expr; field: string; type: string }
  | { kind: "literal"; value: LiteralValue }
  /** `["arr", v…]`. */
  | { kind: "array"; items: Expr[] }
  /** Any operator of docs/query.md "Expressions" by its JSON name (`=`, `and`, `like`, `in`, `fts`, `->` …). */
  | { kind: "op"; op: string; args: Expr[] }
  /** `["cast", e, type]`; type already checked against Schema.typeNames. */
  | { kind: "cast"; expr: Expr; type: string }
  /** `["agg", fn, [alias, expr?], filter?]` over an incoming join. */
  | { kind: "agg"; fn: string; join: JoinNode; expr: Expr | null; filter: Expr | null }
  /** `["$param", name, cast]` of a well-known query; cast defaults to jsonb. */
  | { kind: "param"; name: string; cast: string };

/** One output of a select. */
export interface SelectItem {
  /** Output key in the JSON row. */
  name: string;
  /** An expression, or a joined relation (by its key in `joins`). */
  value: { kind: "expr"; expr: Expr } | { kind: "join"; join: JoinNode };
  /** both: read and written; get: read-only (never written); set: write-only (never returned). */
  mode: "both" | "get" | "set";
}

/** An ORDER BY term. */
export interface OrderTerm {
  expr: Expr;
  dir: "asc" | "desc";
  nulls: "first" | "last" | null;
}

/** Write modes (docs/query.md "Writing"). */
export type WriteMode = "insert" | "upsert" | "merge" | "merge-new" | "readonly";

/** What a RelationNode reads from. */
export type Source =
  | { kind: "relation"; relation: Relation }
  | {
    kind: "function";
    func: Func;
    /** Resolved arguments in call order; named ones keep their names (`name => value`). */
    args: { name: string | null; value: Expr }[];
    /** Columns of the function's rows (from its return type). */
    columns: Column[];
  };

/** A relation (or function) being read or written, with its joins. */
export interface RelationNode {
  source: Source;
  /** Unique SQL alias within the statement (t0, t1 …), used as Expr scope. */
  sqlAlias: string;
  /** The name the caller used: `alias` if given, else the relation/function name. */
  name: string;
  where: Expr | null;
  select: SelectItem[];
  joins: JoinNode[];
  limit: number | null;
  offset: number | null;
  orderBy: OrderTerm[];
  distinctOn: Expr[];
  writeMode: WriteMode;
  /** Columns matching an existing row for upsert; null = primary key. */
  onConflict: string[] | null;
  /** JSON pointer of this node in the request (for error details). */
  pointer: string;
  /** Depth from the root (root = 0). */
  depth: number;
}

/** A joined relation under its parent. */
export interface JoinNode {
  /** Key in the parent's `join` map (also the default output name). */
  key: string;
  node: RelationNode;
  /** Pairs [column of the joined relation, column of the parent], from `on`. */
  on: [string, string][];
  /** incoming: the joined relation holds the FK to the parent (array); outgoing: the parent holds it (object). */
  direction: "incoming" | "outgoing";
  /** The foreign key matched by `on`. */
  fk: ForeignKey;
  /** For outgoing joins: whether the parent's FK columns are nullable (object may be null). */
  nullable: boolean;
}

/** Restricts the root to given key values, preserving their order (write read-back). */
export interface RootKeys {
  columns: string[];
  /** One array of key values per row, in output order. */
  rows: LiteralValue[][];
  /**
   * Instead of `rows`: one transaction-local setting per key column holding its values as a
   * PostgreSQL `text[]` literal (set by the write's statements pipelined ahead of the read-back).
   */
  settings?: string[];
  /** With `settings`: they hold exactly one row (the write had one root row). */
  single?: boolean;
}

/** Options of the SQL generator. */
export interface CompileOptions {
  /** Produce also a count statement (total ignoring limit/offset). */
  count?: boolean;
  /** Restrict the root to these keys, in this order (write read-back). */
  rootKeys?: RootKeys;
  /** Well-known parameter values by name (already type-checked); bound as parameters. */
  params?: Record<string, unknown>;
}

/** A compiled statement: SQL text with $n placeholders and its bind values. */
export interface Statement {
  sql: string;
  params: unknown[];
  /**
   * For a read's rows (set by the compiler): the largest number of bytes one row's `j` can have
   * whatever the data, when its columns' types bound it (no arrays, no unbounded text); absent
   * when unbounded. A row-size cap at or above it cannot be reached (src/compile/rowsize.ts).
   */
  maxRowBytes?: number;
  /**
   * For a read's rows (set by the compiler): whether the select has an `OFFSET` of its own. Without
   * one, `OFFSET 0` may be appended to make it a fence the planner does not pull up.
   */
  hasOffset?: boolean;
}

/** The compiled read: each output row is one JSON text in column `j`, in order. */
export interface CompiledRead {
  /** Select producing rows with one column `j` (a json value per root row). */
  rows: Statement;
  /** Select producing one row with column `count` (bigint), when requested. */
  count?: Statement;
}
