/**
 * The query endpoint: POST /svc (reads, writes, ComplexQuery flags, batches) and GET /svc (the
 * read-only query-string form). Pipeline: parse/validate → plan (pure) → SQL → execute as the
 * request's role → respond. A plain read is streamed straight from PostgreSQL's JSON rows.
 */
import type { Config } from "../config/load.ts";
import {
  type Database,
  FETCH_BATCH,
  readJson,
  type RequestRole,
  type RequestTx,
} from "../db/pool.ts";
import { SvcError } from "../errors.ts";
import type { RelationNode, Statement } from "../compile/ast.ts";
import { parseQuery } from "../compile/parse.ts";
import { NeedRowTypes } from "../compile/parse_common.ts";
import { selectableRelations, usableCandidates } from "../db/privileges.ts";
import { type Candidate, SuggestingError } from "../util/suggest.ts";
import { compileRead } from "../compile/sql.ts";
import { type ComplexQuery, parseBody } from "../compile/complex.ts";
import { parseGetQuery } from "../compile/get.ts";
import { planWrite } from "../write/plan.ts";
import { executeWrite, resultOfCte, type WriteResult } from "../write/execute.ts";
import { compileCteWrite, type CteWrite, ROOT_KEYS_SETTING } from "../write/cte.ts";
import type { WritePlan } from "../write/plan.ts";
import { resolveParams } from "../wellknown/mod.ts";
import type { AppState } from "../runtime.ts";
import { parseJson, readBodyText, requireJson } from "./body.ts";
import { capRowSize } from "../compile/rowsize.ts";

/** What the handler needs per request. */
export interface SvcContext {
  cfg: Config;
  db: Database;
  state: AppState;
  who: RequestRole;
}

interface Resolved {
  node: RelationNode;
  params?: Record<string, unknown>;
  /** The query casts to row types, allowed by the role's privileges of this request: not cached. */
  rowTyped?: boolean;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/**
 * Resolves a query position (see {@link resolveQuery}); a query casting to row types is parsed
 * again once PostgreSQL has said which of them the role may SELECT (inside `tx` when given).
 */
async function resolve(
  ctx: SvcContext,
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
      : await ctx.db.transaction(ctx.who, (t) => selectableRelations(t, e.relations));
    return { ...resolveQuery(ctx, query, pointer, rowTypes), rowTyped: true };
  }
}

/**
 * Completes the "did you mean" hint of an unknown-name error with what the request's role holds
 * a privilege on (asked of PostgreSQL; when that fails, no hint naming a database object).
 */
async function settleHint(ctx: SvcContext, e: unknown): Promise<void> {
  if (!(e instanceof SuggestingError) || e.settled) return;
  const candidates = e.suggest.candidates;
  let usable = new Set<Candidate>(candidates.filter((c) => c.need === undefined));
  if (usable.size < candidates.length) {
    try {
      const ok = await ctx.db.transaction(ctx.who, (tx) => usableCandidates(tx, candidates));
      usable = new Set(candidates.filter((c, i) => c.need === undefined || ok.has(i)));
    } catch { /* no hint */ }
  }
  e.settle((c) => usable.has(c));
}

/** Resolves a query position: an ad-hoc Relation or `{wellknown, params}`. */
function resolveQuery(
  ctx: SvcContext,
  query: unknown,
  pointer: string,
  rowTypes?: ReadonlySet<number>,
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
    return { node: wk.node, params: resolveParams(wk, query.params ?? {}, pointer) };
  }
  const node = parseQuery(ctx.state.schema, query, {
    maxDepth: ctx.cfg.pg.query.max_depth,
    pointer,
    role: ctx.who.role,
    rowTypes,
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

/** Joins in a query tree, at every depth. */
function countJoins(node: RelationNode): number {
  let n = 0;
  for (const j of node.joins) n += 1 + countJoins(j.node);
  return n;
}

/** A compiled plain read and whether it fits one fetch batch. */
export interface CachedRead extends Statement {
  small: boolean;
  /** The cache's insertion count when the entry was last moved to the young end. */
  at?: number;
}

/**
 * Compiled plain reads by (state, role, request text): a repeated request skips parsing,
 * validation and SQL generation. Bounded by entries and by estimated bytes
 * ({@link readCacheEntryBytes}), nearly LRU: a hit moves its entry to the young end only once half
 * the cache was inserted since its last move (so a hot entry is never the oldest, and most hits
 * cost one lookup); emptied when a reload swaps the state.
 */
export class ReadCache {
  #state: AppState | null = null;
  #map = new Map<string, CachedRead>();
  #bytes = 0;
  #inserted = 0;

  /** A cache of at most `max` entries and `maxBytes` estimated bytes. */
  constructor(readonly max = 1000, readonly maxBytes = 8 * 1024 * 1024) {}

  /** The statement cached for `key` under `state` (a new state empties the cache first). */
  get(state: AppState, key: string): CachedRead | undefined {
    if (state !== this.#state) {
      this.#state = state;
      this.#map.clear();
      this.#bytes = 0;
      return undefined;
    }
    const hit = this.#map.get(key);
    if (hit && this.#inserted - (hit.at ?? 0) > this.max / 2) {
      this.#map.delete(key);
      this.#map.set(key, hit);
      hit.at = this.#inserted;
    }
    return hit;
  }

  /** Caches `stmt` for `key`, evicting the oldest entries to stay within bounds. */
  set(key: string, stmt: CachedRead): void {
    const bytes = readCacheEntryBytes(key, stmt);
    if (bytes > this.maxBytes) return;
    this.#drop(key);
    while (this.#map.size && (this.#map.size >= this.max || this.#bytes + bytes > this.maxBytes)) {
      this.#drop(this.#map.keys().next().value!);
    }
    stmt.at = ++this.#inserted;
    this.#map.set(key, stmt);
    this.#bytes += bytes;
  }

  /** Entries and their estimated bytes. */
  stats(): { size: number; bytes: number } {
    return { size: this.#map.size, bytes: this.#bytes };
  }

  #drop(key: string): void {
    const old = this.#map.get(key);
    if (old === undefined) return;
    this.#map.delete(key);
    this.#bytes -= readCacheEntryBytes(key, old);
  }
}

/**
 * Estimated memory of a read-cache entry: key and SQL text (one byte per character), the bound
 * values (their text never exceeds the key's, which holds them), and a fixed overhead.
 */
export function readCacheEntryBytes(key: string, stmt: Statement): number {
  return 2 * key.length + stmt.sql.length + 16 * stmt.params.length + 256;
}

const readCache = new ReadCache();

/** The compiled-read cache's entries and estimated bytes. */
export function readCacheStats(): { size: number; bytes: number } {
  return readCache.stats();
}
/** Requests longer than this are not cached. */
const CACHE_MAX_KEY = 4096;

function jsonResponse(body: Uint8Array | string | ReadableStream<Uint8Array>): Response {
  return new Response(body as BodyInit, { headers: { "content-type": "application/json" } });
}

/** A plain read answered from raw JSON rows: one round trip, streamed when large. */
async function plainRead(ctx: SvcContext, r: Resolved, cacheKey?: string): Promise<Response> {
  const stmt: CachedRead = {
    ...capRowSize(compileRead(r.node, { params: r.params }).rows, ctx.cfg.pg.query.max_row_size),
    small: isSmall(r.node),
  };
  if (cacheKey !== undefined && !r.rowTyped) readCache.set(cacheKey, stmt);
  return jsonResponse(
    await readJson(ctx.db, ctx.who, stmt.sql, stmt.params, { small: stmt.small }),
  );
}

/** Whether a read returns at most one fetch batch: a small limit, or a unique key pinned by `=`. */
export function isSmall(node: RelationNode): boolean {
  if (node.limit !== null && node.limit <= FETCH_BATCH) return true;
  if (node.source.kind !== "relation" || node.where === null || node.distinctOn.length > 0) {
    return false;
  }
  const rel = node.source.relation;
  const conjuncts = node.where.kind === "op" && node.where.op === "and"
    ? node.where.args
    : [node.where];
  const pinned = new Set<string>();
  for (const c of conjuncts) {
    if (c.kind !== "op" || c.op !== "=" || c.args.length !== 2) continue;
    const [a, b] = c.args;
    const value = (e: typeof a) => e.kind === "literal" || e.kind === "param";
    const col = a.kind === "column" && value(b) ? a : b.kind === "column" && value(a) ? b : null;
    if (col && col.kind === "column" && col.scope === node.sqlAlias) pinned.add(col.column.name);
  }
  const keys = rel.primaryKey.length ? [rel.primaryKey, ...rel.unique] : rel.unique;
  return keys.some((k) => k.length > 0 && k.every((c) => pinned.has(c)));
}

/** A cached plain read, when this exact request was compiled before for this role and state. */
async function cachedRead(ctx: SvcContext, key: string): Promise<Response | undefined> {
  const stmt = readCache.get(ctx.state, key);
  if (!stmt) return undefined;
  return jsonResponse(
    await readJson(ctx.db, ctx.who, stmt.sql, stmt.params, { small: stmt.small }),
  );
}

function parseRows(rows: Record<string, unknown>[]): unknown[] {
  return rows.map((row) => (typeof row.j === "string" ? JSON.parse(row.j) : row.j));
}

async function explain(tx: RequestTx, sql: string, params: unknown[]): Promise<unknown> {
  const rows = await tx.query(`explain (format json) ${sql}`, params, { prepare: false });
  const plan = rows[0]["QUERY PLAN"];
  const parsed = typeof plan === "string" ? JSON.parse(plan) : plan;
  return Array.isArray(parsed) ? parsed[0] : parsed;
}

/** Runs one ComplexQuery inside the transaction; returns the bare selection or the envelope. */
async function runOne(
  ctx: SvcContext,
  tx: RequestTx,
  q: ComplexQuery,
  pointer: string,
  pre?: PlannedWrite,
): Promise<unknown> {
  const allow = ctx.cfg.pg.query;
  if (q.rollback && !allow.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const r = pre?.r ?? await resolve(
    ctx,
    q.query,
    `${pointer}${q.complex || q.data !== undefined ? "/query" : ""}`,
    tx,
  );
  const isWrite = q.data !== undefined;
  const want = wanted(ctx, q);
  const out: Record<string, unknown> = {};
  if (q.rollback) tx.send("savepoint svc_rollback");
  if (!isWrite) {
    const compiled = compileRead(r.node, { params: r.params, count: want.count });
    const capped = capRowSize(compiled.rows, ctx.cfg.pg.query.max_row_size);
    const rows = parseRows(await tx.query(capped.sql, capped.params));
    if (q.returns !== "none") out.result = rows;
    if (q.count) {
      if (want.count && compiled.count) {
        const c = await tx.query(compiled.count.sql, compiled.count.params);
        out.count = Number(c[0].count);
      }
      out.offset = r.node.offset ?? 0;
    }
    if (r.node.limit !== null) out.limit = r.node.limit; // SPEC: echoed whenever set
    if (q.query_plan) {
      out.query_plan = want.plan
        ? [await explain(tx, compiled.rows.sql, compiled.rows.params)]
        : [];
    }
    if (q.sql) out.sql = want.sql ? [{ path: [], select: compiled.rows.sql }] : [];
  } else {
    const plan = pre?.plan ??
      planWrite(r.node, q.data, `${pointer}/data`, { readBack: q.returns !== "none" });
    const cte = want.plan ? null : pre ? pre.cte : compileCteWrite(plan);
    if (cte) {
      // One statement, and the read-back pipelined right behind it.
      const back = readBack(r, plan, q, ctx.cfg.pg.query.max_row_size);
      const settled = await Promise.allSettled([
        tx.query(cte.sql, cte.params),
        ...(back ? [tx.query(back.sql, back.params)] : []),
      ]);
      const [wrote, read] = settled;
      if (wrote.status === "rejected") throw cte.error(wrote.reason);
      if (read?.status === "rejected") throw read.reason;
      const wr = resultOfCte(cte, wrote.value[0], { sql: want.sql, queryPlan: false });
      writeOutput(out, q, want, wr, back, read?.status === "fulfilled" ? read.value : []);
    } else {
      const wr = await executeWrite(tx, plan, { sql: want.sql, queryPlan: want.plan });
      let back: { sql: string; params: unknown[] } | null = null;
      let rows: Record<string, unknown>[] = [];
      if (q.returns !== "none") {
        back = capRowSize(
          compileRead(r.node, { params: r.params, rootKeys: wr.rootKeys }).rows,
          ctx.cfg.pg.query.max_row_size,
        );
        rows = await tx.query(back.sql, back.params);
      }
      writeOutput(out, q, want, wr, back, rows);
    }
  }
  if (q.rollback) tx.send("rollback to savepoint svc_rollback");
  return q.complex ? out : out.result;
}

/** What a ComplexQuery asks for and the configuration allows. */
function wanted(ctx: SvcContext, q: ComplexQuery) {
  const allow = ctx.cfg.pg.query;
  return {
    count: !!q.count && allow.allow_count,
    stats: !!q.stats && allow.allow_stats,
    plan: !!q.query_plan && allow.allow_query_plan,
    sql: !!q.sql && allow.allow_sql,
  };
}

/** A write resolved and planned ahead of its transaction; `cte` when it runs as one statement. */
interface PlannedWrite {
  r: Resolved;
  plan: WritePlan;
  cte: CteWrite | null;
}

/**
 * The read-back of a one-statement write: root keys from the setting the write stored. Its plan
 * is generic (the keys are not parameters): a plan made while a table was tiny may scan it until
 * autovacuum's next analyze invalidates the plan.
 */
function readBack(r: Resolved, plan: WritePlan, q: ComplexQuery, maxRowSize: number) {
  if (q.returns === "none") return null;
  return capRowSize(
    compileRead(r.node, {
      params: r.params,
      rootKeys: { columns: [...plan.root.keyColumns], rows: [], setting: ROOT_KEYS_SETTING },
    }).rows,
    maxRowSize,
  );
}

/** Fills the response of a write: result, stats, sql, query_plan. */
function writeOutput(
  out: Record<string, unknown>,
  q: ComplexQuery,
  want: ReturnType<typeof wanted>,
  wr: WriteResult,
  back: { sql: string } | null,
  rows: Record<string, unknown>[],
): void {
  const sqlOut: unknown[] = [...wr.sql];
  if (back) {
    out.result = parseRows(rows);
    if (want.sql) sqlOut.push({ path: [], select: back.sql });
  }
  if (q.stats) out.stats = want.stats ? wr.stats : [];
  if (q.sql) out.sql = want.sql ? sqlOut : [];
  if (q.query_plan) out.query_plan = want.plan ? [...wr.plans] : [];
}

/**
 * A single write request. A plan that runs as one statement is sent with begin, the role switch,
 * its read-back and commit (rollback, when the request asks for it: nothing else is in the
 * transaction) in one round trip; any other takes the transaction path (`runOne`), planned once.
 */
async function singleWrite(ctx: SvcContext, q: ComplexQuery): Promise<unknown> {
  if (q.rollback && !ctx.cfg.pg.query.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const want = wanted(ctx, q);
  const r = await resolve(ctx, q.query, "/query");
  const plan = planWrite(r.node, q.data, "/data", { readBack: q.returns !== "none" });
  const cte = want.plan ? null : compileCteWrite(plan);
  if (!cte) {
    return await ctx.db.transaction(ctx.who, (tx) => runOne(ctx, tx, q, "", { r, plan, cte }));
  }
  const back = readBack(r, plan, q, ctx.cfg.pg.query.max_row_size);
  let results: Record<string, unknown>[][];
  try {
    const end = q.rollback ? "rollback" : "commit";
    results = await ctx.db.pipeline(ctx.who, back ? [cte, back] : [cte], end);
  } catch (e) {
    throw cte.error(e);
  }
  const out: Record<string, unknown> = {};
  const wr = resultOfCte(cte, results[0][0], { sql: want.sql, queryPlan: false });
  writeOutput(out, q, want, wr, back, results[1] ?? []);
  return q.complex ? out : out.result;
}

/** POST /svc. */
export async function handlePost(ctx: SvcContext, req: Request): Promise<Response> {
  try {
    return await post(ctx, req);
  } catch (e) {
    await settleHint(ctx, e);
    throw e;
  }
}

async function post(ctx: SvcContext, req: Request): Promise<Response> {
  requireJson(req);
  const text = await readBodyText(
    req,
    ctx.cfg.http.max_body_size,
    ctx.cfg.http.body_timeout * 1000,
  );
  const key = text.length <= CACHE_MAX_KEY ? `${ctx.who.role}\0P${text}` : undefined;
  const cached = key === undefined ? undefined : await cachedRead(ctx, key);
  if (cached) return cached;
  const parsed = parseBody(parseJson(text, ctx.cfg.http.max_json_depth));
  if (parsed.kind === "batch" && parsed.items.length > ctx.cfg.http.max_batch) {
    throw new SvcError(
      "QUERY_INVALID",
      `a batch holds at most ${ctx.cfg.http.max_batch} queries (http.max_batch)`,
      { details: { pointer: "", limit: "http.max_batch" } },
    );
  }
  if (parsed.kind === "single") {
    const q = parsed.query;
    if (!q.complex && q.data === undefined && !q.rollback) {
      return plainRead(ctx, await resolve(ctx, q.query, ""), key);
    }
    if (q.data !== undefined) {
      return jsonResponse(JSON.stringify(await singleWrite(ctx, q)));
    }
    const result = await ctx.db.transaction(ctx.who, (tx) => runOne(ctx, tx, q, ""));
    return jsonResponse(JSON.stringify(result));
  }
  const results = await ctx.db.transaction(ctx.who, async (tx) => {
    const out: unknown[] = [];
    for (let i = 0; i < parsed.items.length; i++) {
      try {
        out.push(await runOne(ctx, tx, parsed.items[i], `/${i}`));
      } catch (e) {
        if (e instanceof SvcError) {
          e.details = { ...(isObject(e.details) ? e.details : { cause: e.details }), index: i };
        } else if (e instanceof Error) {
          (e as Error & { batchIndex?: number }).batchIndex = i;
        }
        throw e;
      }
    }
    return out;
  });
  return jsonResponse(JSON.stringify(results));
}

/** GET /svc: the same read from the query string. */
export async function handleGet(ctx: SvcContext, url: URL): Promise<Response> {
  try {
    return await get(ctx, url);
  } catch (e) {
    await settleHint(ctx, e);
    throw e;
  }
}

async function get(ctx: SvcContext, url: URL): Promise<Response> {
  const key = url.search.length <= CACHE_MAX_KEY ? `${ctx.who.role}\0G${url.search}` : undefined;
  const cached = key === undefined ? undefined : await cachedRead(ctx, key);
  if (cached) return cached;
  const g = parseGetQuery(url.searchParams);
  if (g.wellknown !== undefined) {
    return plainRead(
      ctx,
      resolveQuery(ctx, { wellknown: g.wellknown, params: g.params ?? {} }, ""),
    );
  }
  return plainRead(ctx, await resolve(ctx, g.tree, ""));
}
