/**
 * Shared pieces of the query-tree parser: options, parser state, name scopes and small helpers
 * used by the relation, select and expression parsers.
 */
import { isExactNumber } from "../formats/json.ts";
import type { Column, ComputedField, Func, FunctionArg, Relation, Schema } from "../db/schema.ts";
import { invalid, type SvcError } from "../svc_error.ts";
import { type Candidate, SuggestingError } from "../util/suggest.ts";
import type { Expr, JoinNode, Source } from "./ast.ts";

/** Options of {@link parseQuery}. */
export interface ParseOptions {
  /** Maximum join nesting (`pg.query.max_depth`); the root is depth 0. */
  maxDepth: number;
  /**
   * Functions a query may not call, answered as unknown (the envelope functions of
   * src/query/envelope_functions.ts: reached through their own paths only).
   */
  hiddenFunctions?: ReadonlySet<number>;
  /** Parameters of a well-known query definition; `$param` is only allowed when given. */
  params?: Record<string, { cast?: string }> | null;
  /** JSON pointer of the tree inside the request body (prefix of every error pointer). */
  pointer?: string;
  /**
   * The request's role. Never used to refuse a query (PostgreSQL decides); it narrows "did you
   * mean" suggestions (left to the caller: see SuggestingError) and the cast targets (types in
   * schemas it has no USAGE on are unknown, and so are row types of relations it may not SELECT).
   */
  role?: string;
  /**
   * With `role`: the relations (OIDs) whose row types the role may cast to, as PostgreSQL
   * answered for this request. Absent: a row-type cast makes parseQuery throw
   * {@link NeedRowTypes} naming the relations to ask about (then parse again with them).
   */
  rowTypes?: ReadonlySet<number>;
  /**
   * Collects, in parse order, every relation or function the tree names that exists: an error
   * of the request is then answered as the unknown name one of them would have been when the
   * role holds no privilege on it (see `hideUnreadable` in src/query/resolve.ts).
   */
  found?: FoundSource[];
}

/** A relation or function a query names and the schema holds (see {@link ParseOptions.found}). */
export interface FoundSource {
  /** What the role must hold a privilege on (any privilege; EXECUTE on one overload). */
  candidate: Candidate;
  /** The error the same position would be if the name did not exist. */
  unknown: () => SvcError;
}

/**
 * Thrown by parseQuery when a request with a role casts to row types and `rowTypes` was not
 * given: the caller asks PostgreSQL which of `relations` the role may SELECT and parses again.
 * (Parsing on instead would let later errors tell a hidden row type from an unknown type.)
 */
export class NeedRowTypes extends Error {
  override name = "NeedRowTypes";
  /** `relations`: the OIDs of the relations whose row types the request casts to. */
  constructor(readonly relations: number[]) {
    super("row-type casts need the role's privileges");
  }
}

/** Escapes one JSON pointer segment (RFC 6901). */
export function ptr(base: string, key: string | number): string {
  return `${base}/${String(key).replaceAll("~", "~0").replaceAll("/", "~1")}`;
}

/**
 * A QUERY_UNKNOWN_COLUMN error pointing at a node, for `name` among `candidates`; the message is
 * `unknown column '<name>'` and its hint unless `render` builds another.
 */
export function unknownColumn(
  pointer: string,
  name: string,
  candidates: Iterable<Candidate>,
  render: (hint: string) => string = (hint) => `unknown column '${name}'${hint}`,
): SvcError {
  return new SuggestingError("QUERY_UNKNOWN_COLUMN", name, candidates, render, { pointer });
}

/** Whether `v` is a plain JSON object. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !isExactNumber(v);
}

/** Parser state shared by the whole tree. */
export interface Ctx {
  schema: Schema;
  opts: ParseOptions;
  /** Next sqlAlias number. */
  next: number;
  /** The composite field (Column) behind each field expression, for nested `.` access. */
  fieldColumns: WeakMap<Expr, Column>;
  /** Relations whose row types were cast to while `opts.rowTypes` was unknown. */
  pendingRowTypes: Set<number>;
  /** Bytes a value of the query's padded casts (`char(n)`, `bit(n)`) take together, so far. */
  padded?: number;
  /**
   * Set while select, order_by and distinct_on expressions are parsed: their literals are
   * computed into every row (a sort key, an aggregate's input), so their bytes are counted
   * (`rowLiterals`) and capped (src/compile/expr.ts ROW_LITERALS_MAX).
   */
  perRow?: boolean;
  rowLiterals?: number;
}

/** What bare names and `.`/`agg` references resolve against. */
export interface Scope {
  /** sqlAlias of the relation. */
  alias: string;
  /** The name the caller used for the relation (`alias` or relation name). */
  name: string;
  /** Where the columns come from (for "did you mean" hints); absent: no columns yet. */
  source?: Source;
  columns: Map<string, Column>;
  computed: Map<string, ComputedField>;
  /** Outgoing/incoming joins by key. */
  joins: Map<string, JoinNode>;
}

/** Columns of a node's rows. */
export function sourceColumns(source: Source): Column[] {
  return source.kind === "relation" ? source.relation.columns : source.columns;
}

/** An optional non-empty string field. */
export function optionalString(v: unknown, pointer: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v === "") throw invalid(pointer, "expected a non-empty string");
  return v;
}

/** The relation a source reads rows of (for FKs and computed fields), if any. */
export function sourceRelation(schema: Schema, source: Source): Relation | null {
  if (source.kind === "relation") return source.relation;
  const r = source.func.returns.relation;
  return r ? schema.relations.get(`${r.schema}.${r.name}`) ?? null : null;
}

/** The declared input argument a call argument binds to. */
export function argumentOf(
  func: Func,
  arg: { name: string | null },
  index: number,
): FunctionArg | undefined {
  return arg.name === null ? func.inArgs[index] : func.inArgs.find((a) => a.name === arg.name);
}
