/**
 * Resolution of a query position: an ad-hoc Relation (parsed and validated against the schema
 * model) or `{wellknown, params}` (the loaded query and its bound parameters). A query casting to
 * row types asks PostgreSQL which of them the role may SELECT; an unknown name's "did you mean"
 * hint is completed with what the role holds a privilege on.
 *
 * @module
 */
import { isExactNumber } from "../formats/json.ts";
import { envelopeFunctions } from "./envelope_functions.ts";
import { batchIndexOf, markBatchIndex, SvcError } from "../svc_error.ts";
import type { RelationNode } from "../compile/ast.ts";
import { parseQuery } from "../compile/parse.ts";
import { type FoundSource, NeedRowTypes } from "../compile/parse_common.ts";
import { pipeline, type RequestTx, transaction } from "../db/run_as.ts";
import {
  selectableRelations,
  usableCandidates,
  usableOf,
  usableStatement,
} from "../db/privileges.ts";
import { type Candidate, SuggestingError } from "../util/suggest.ts";
import { resolveParams } from "../wellknown/registry.ts";
import { CACHE_MAX_KEY, writeQueries } from "./cache.ts";
import type { QueryContext } from "./context.ts";

/** A resolved query position. */
export interface Resolved {
  node: RelationNode;
  params?: Record<string, unknown>;
  /** The query casts to row types, allowed by the role's privileges of this request: not cached. */
  rowTyped?: boolean;
}

/** Whether `v` is a plain JSON object. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !isExactNumber(v);
}

/**
 * Resolves a query position (see {@link resolveQuery}); a query casting to row types is parsed
 * again once PostgreSQL has said which of them the role may SELECT (inside `tx` when given).
 */
export async function resolve(
  ctx: QueryContext,
  query: unknown,
  pointer: string,
  tx?: RequestTx,
): Promise<Resolved> {
  try {
    return resolveQuery(ctx, query, pointer);
  } catch (e) {
    if (!(e instanceof NeedRowTypes)) throw e;
    const rowTypes = tx
      ? await selectableRelations(tx, e.relations)
      : await transaction(ctx.db, ctx.who, (t) => selectableRelations(t, e.relations));
    return { ...resolveQuery(ctx, query, pointer, rowTypes), rowTyped: true };
  }
}

/**
 * Completes the "did you mean" hint of an unknown-name error with what the request's role holds
 * a privilege on (asked of PostgreSQL; when that fails, no hint naming a database object).
 */
export async function settleHint(ctx: QueryContext, e: unknown): Promise<void> {
  if (!(e instanceof SuggestingError) || e.settled) return;
  const candidates = e.suggest.candidates;
  let usable = new Set<Candidate>(candidates.filter((c) => c.need === undefined));
  if (usable.size < candidates.length) {
    try {
      const ok = await transaction(ctx.db, ctx.who, (tx) => usableCandidates(tx, candidates));
      usable = new Set(candidates.filter((c, i) => c.need === undefined || ok.has(i)));
    } catch { /* no hint */ }
  }
  e.settle((c) => usable.has(c));
}

/** A query position of a request: its tree, JSON pointer and batch index (in a batch). */
export interface Position {
  query: unknown;
  pointer: string;
  index?: number;
}

/**
 * Whether an error could tell a relation the role holds no privilege on from one that does not
 * exist: anything but a session problem, a limit of the HTTP layer, or the database being
 * unavailable, busy or cancelling.
 */
function mayReveal(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code !== "string") return false;
  if (e instanceof SvcError) {
    return !/^(AUTH_|HTTP_|PG_(UNAVAILABLE|POOL_EXHAUSTED|08|40|53|57|58))/.test(code);
  }
  return /^[0-9A-Z]{5}$/.test(code) && !/^(08|40|53|57|58)/.test(code);
}

/**
 * A relation or function the role holds no privilege on is answered as one that does not exist
 * (docs/endpoint.md), whatever error its query met (a permission denial, a column that does not
 * exist, a value the column's type refuses …). Only on the error path: the request's query
 * positions (`positions()`, null when the request cannot be read) are parsed again collecting what
 * they name, up to where parsing stops (as the failed request's did), and PostgreSQL is asked, as
 * the role, which of them it holds no privilege on; the first one's unknown-name error replaces
 * `e`. When that cannot be asked, `e` stands.
 */
export async function hideUnreadable(
  ctx: QueryContext,
  e: unknown,
  positions: () => Position[] | null,
): Promise<unknown> {
  if (!mayReveal(e)) return e;
  let list: Position[] | null;
  try {
    list = positions();
  } catch {
    return e;
  }
  const denied = deniedWellKnown(e, list ?? []);
  if (denied) return denied;
  const found: Named[] = [];
  for (const p of list ?? []) {
    const { names, stopped } = namedBy(ctx, p);
    found.push(...names);
    if (stopped !== null) break;
  }
  if (found.length === 0) return e;
  // The same question settles `e`'s "did you mean" hint when `e` stands (see settleHint): its
  // candidates follow the found ones, so that error path costs one round trip, not two.
  const hint = e instanceof SuggestingError && !e.settled ? e.suggest.candidates : [];
  const q = usableStatement([...found.map((x) => x.f.candidate), ...hint]);
  if (q === null) return e;
  let usable: Set<number>;
  try {
    // One round trip (begin, the role switch, the question, rollback), on the error path only.
    const [rows] = await pipeline(ctx.db, ctx.who, [q], "rollback");
    usable = usableOf(rows[0]);
  } catch {
    return e;
  }
  const hidden = firstHidden(found, usable);
  if (hidden === null && hint.length) {
    const n = found.length;
    const ok = new Set(hint.filter((c, i) => c.need === undefined || usable.has(n + i)));
    (e as SuggestingError).settle((c) => ok.has(c));
  }
  return hidden ?? e;
}

/** A relation or function a query position names, with the position's batch index. */
interface Named {
  f: FoundSource;
  index?: number;
}

/**
 * What position `p` names, collected as it parses (`rowTypes`: see {@link resolveQuery});
 * `stopped`: the error that stopped the parse (what was named before it is kept), else null.
 */
function namedBy(
  ctx: QueryContext,
  p: Position,
  rowTypes?: ReadonlySet<number>,
): { names: Named[]; stopped: unknown } {
  const sink: FoundSource[] = [];
  let stopped: unknown = null;
  try {
    resolveQuery(ctx, p.query, p.pointer, rowTypes, sink);
  } catch (e) {
    stopped = e;
  }
  return { names: sink.map((f) => ({ f, index: p.index })), stopped };
}

/**
 * The unknown-name error (its batch index set) of the first of `found` whose index the role's
 * answer to {@link usableStatement} leaves out of `usable`, or null when it may use them all.
 */
function firstHidden(found: Named[], usable: Set<number>): SvcError | null {
  const first = found.findIndex((_, i) => !usable.has(i));
  if (first < 0) return null;
  const err = found[first].f.unknown();
  if (found[first].index !== undefined) markBatchIndex(err, found[first].index);
  return err;
}

/**
 * A well-known query the role holds no privilege for (PostgreSQL's 42501 from its statement)
 * answers as one that does not exist, WELL_KNOWN_UNKNOWN_QUERY: the denial would name the table or
 * function it reads, which the role is not shown anywhere else (its generated client and
 * database.json leave such queries out, src/wellknown/usable.ts). Null when `e` is no such denial.
 */
function deniedWellKnown(e: unknown, list: Position[]): SvcError | null {
  const code = (e as { code?: unknown } | null)?.code;
  if (code !== "42501" && code !== "PG_42501") return null;
  const index = batchIndexOf(e) ??
    (e instanceof SvcError ? (e.details as { index?: number } | undefined)?.index : undefined);
  const at = list.length === 1 ? list[0] : list.find((p) => p.index === index);
  const q = at?.query;
  if (!isObject(q) || typeof q.wellknown !== "string") return null;
  const err = new SvcError(
    "WELL_KNOWN_UNKNOWN_QUERY",
    `unknown well-known query ${JSON.stringify(q.wellknown)}`,
  );
  if (at?.index !== undefined) markBatchIndex(err, at.index);
  return err;
}

/** What a batch asks before its answer may stream ({@link aheadQuestion}). */
export interface AheadQuestion {
  sql: string;
  params: unknown[];
  /** The unknown-name error of the first item naming a source the role may not use, or null. */
  hidden(rows: Record<string, unknown>[]): SvcError | null;
}

/**
 * A batch's answer streams once it outgrows the answer buffer, and its status goes with the first
 * bytes: a later item naming a relation or function the role holds no privilege on would then fail
 * mid-stream (200, truncated), where one naming nothing that exists fails before anything runs
 * (404), which would tell a hidden relation from a missing one (docs/endpoint.md). So a batch asks
 * first, in its transaction, which of the sources its later items (`positions`) name the role may
 * use, and no byte of the answer is sent before the answer came; the first item naming one it may
 * not use is answered as its unknown-name error, with its batch index. Null when nothing needs
 * asking (only well-known queries, or nothing named that needs a privilege).
 */
export function aheadQuestion(ctx: QueryContext, positions: Position[]): AheadQuestion | null {
  const found: Named[] = [];
  for (const p of positions) {
    let { names, stopped } = namedBy(ctx, p);
    // Planned already (so it parses): a row-type cast stops the parse to ask which row types the
    // role may use; parsed again as if it could use them all, to collect every name.
    if (stopped instanceof NeedRowTypes) names = namedBy(ctx, p, new Set(stopped.relations)).names;
    found.push(...names);
  }
  const q = usableStatement(found.map((x) => x.f.candidate));
  if (q === null) return null;
  return { ...q, hidden: (rows) => firstHidden(found, usableOf(rows[0])) };
}

/**
 * Resolves a query position: an ad-hoc Relation or `{wellknown, params}`. `found` collects the
 * relations and functions it names (see {@link hideUnreadable}).
 */
export function resolveQuery(
  ctx: QueryContext,
  query: unknown,
  pointer: string,
  rowTypes?: ReadonlySet<number>,
  found?: FoundSource[],
): Resolved {
  if (isObject(query) && "wellknown" in query) {
    const name = query.wellknown;
    if (typeof name !== "string") {
      throw new SvcError("QUERY_INVALID", "wellknown must be a string", {
        details: { pointer: `${pointer}/wellknown` },
      });
    }
    for (const k of Object.keys(query)) {
      if (k !== "wellknown" && k !== "params") {
        throw new SvcError("QUERY_INVALID", `unknown field "${k}" next to wellknown`, {
          details: { pointer: `${pointer}/${k}` },
        });
      }
    }
    const wk = ctx.state.wellknown.get(name);
    if (found) wellKnownSources(wk.node, name, found);
    return { node: wk.node, params: resolveParams(wk, query.params ?? {}, pointer) };
  }
  const node = parseQuery(ctx.state.schema, query, {
    maxDepth: ctx.cfg.pg.query.max_depth,
    hiddenFunctions: envelopeFunctions(ctx.state, ctx.cfg),
    pointer,
    role: ctx.who.role,
    rowTypes,
    found,
  });
  const max = ctx.cfg.pg.query.max_joins;
  if (countJoins(node) > max) {
    throw new SvcError(
      "QUERY_INVALID",
      `a query joins at most ${max} relations (pg.query.max_joins)`,
      {
        details: { pointer, limit: "pg.query.max_joins" },
      },
    );
  }
  return { node };
}

/**
 * The relations and functions a well-known query's tree reads, as FoundSources whose unknown
 * error is the query's own WELL_KNOWN_UNKNOWN_QUERY: any error it meets (a 42883 of a cast its
 * author got wrong, say) answers as an unknown query to a role that may not use them, as a
 * permission denial does (docs/endpoint.md).
 */
function wellKnownSources(node: RelationNode, name: string, found: FoundSource[]): void {
  const unknown = () =>
    new SvcError("WELL_KNOWN_UNKNOWN_QUERY", `unknown well-known query ${JSON.stringify(name)}`);
  const visit = (n: RelationNode) => {
    const src = n.source;
    const need = src.kind === "relation"
      ? { relation: src.relation.oid }
      : { functions: [src.func.oid] };
    found.push({ candidate: { name, need }, unknown });
    for (const j of n.joins) visit(j.node);
  };
  visit(node);
}

/** Joins in a query tree, at every depth. */
function countJoins(node: RelationNode): number {
  let n = 0;
  for (const j of node.joins) n += 1 + countJoins(j.node);
  return n;
}

/**
 * Resolves a write's query position (see {@link resolve}), an ad-hoc one through
 * {@link writeQueries} (not one casting to row types: that depends on the role's privileges).
 */
export async function resolveWrite(
  ctx: QueryContext,
  query: unknown,
  pointer: string,
  tx?: RequestTx,
): Promise<Resolved> {
  if (!isObject(query) || "wellknown" in query) return await resolve(ctx, query, pointer, tx);
  const text = JSON.stringify(query);
  if (text.length > CACHE_MAX_KEY) return await resolve(ctx, query, pointer, tx);
  const key = `${ctx.who.role}\0${pointer}\0${text}`;
  const hit = writeQueries.get(ctx.state, key);
  if (hit) return { node: hit };
  const r = await resolve(ctx, query, pointer, tx);
  if (!r.rowTyped) writeQueries.set(key, r.node);
  return r;
}
