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
import { markBatchIndex, SvcError } from "../errors.ts";
import type { RelationNode, Statement } from "../compile/ast.ts";
import { parseQuery } from "../compile/parse.ts";
import { NeedRowTypes } from "../compile/parse_common.ts";
import { selectableRelations, usableCandidates } from "../db/privileges.ts";
import { type Candidate, SuggestingError } from "../util/suggest.ts";
import { compileRead } from "../compile/sql.ts";
import { type ComplexQuery, parseBody } from "../compile/complex.ts";
import { parseGetQuery } from "../compile/get.ts";
import { planWrite } from "../write/plan.ts";
import { executeWrite, toSend, type WriteResult, writeResult } from "../write/execute.ts";
import { type CompiledWrite, compileWrite } from "../write/compile.ts";
import { resolveParams } from "../wellknown/mod.ts";
import type { AppState } from "../runtime.ts";
import { parseJson, readBodyText, requireJson } from "./body.ts";
import { capRowSize } from "../compile/rowsize.ts";
import { markStreamed } from "./disconnect.ts";

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

/** Requests longer than this are not cached. */
const CACHE_MAX_KEY = 4096;

/**
 * Parsed write queries by (state, role, pointer, query text): a repeated write skips parsing and
 * validating its query (its SQL per payload shape is cached on the parsed tree, see
 * src/write/compile.ts). Emptied when a reload swaps the state; the oldest entry goes first.
 */
class WriteQueryCache {
  #state: AppState | null = null;
  #map = new Map<string, RelationNode>();

  /** A cache of at most `max` entries. */
  constructor(readonly max = 256) {}

  /** The tree cached for `key` under `state` (a new state empties the cache first). */
  get(state: AppState, key: string): RelationNode | undefined {
    if (state !== this.#state) {
      this.#state = state;
      this.#map.clear();
      return undefined;
    }
    return this.#map.get(key);
  }

  /** Caches `node` for `key`. */
  set(key: string, node: RelationNode): void {
    if (this.#map.size >= this.max) this.#map.delete(this.#map.keys().next().value!);
    this.#map.set(key, node);
  }
}

const writeQueries = new WriteQueryCache();

/**
 * Resolves a write's query position (see {@link resolve}), an ad-hoc one through
 * {@link writeQueries} (not one casting to row types: that depends on the role's privileges).
 */
async function resolveWrite(
  ctx: SvcContext,
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

/** Read-backs by query and root-key setting (their text and values depend on nothing else). */
const readBacks = new WeakMap<RelationNode, Map<string, Statement>>();

function jsonResponse(body: Uint8Array | string | ReadableStream<Uint8Array>): Response {
  const res = new Response(body as BodyInit, { headers: { "content-type": "application/json" } });
  return body instanceof ReadableStream ? markStreamed(res) : res;
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

/** A write resolved and compiled ahead of its transaction. */
interface PlannedWrite {
  r: Resolved;
  w: CompiledWrite;
}

/** A query of a POST body, resolved (a write also planned) before its transaction starts. */
interface Planned {
  q: ComplexQuery;
  r: Resolved;
  /** Set for a write. */
  write?: PlannedWrite;
}

/**
 * Resolves a query of a POST body at `pointer` (and plans it, for a write): every 4xx it can
 * cause is thrown here, before any SQL runs.
 */
async function planQuery(ctx: SvcContext, q: ComplexQuery, pointer: string): Promise<Planned> {
  if (q.rollback && !ctx.cfg.pg.query.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const isWrite = q.data !== undefined;
  // A row-type cast asks PostgreSQL what the role may select (resolve), before the transaction.
  const at = `${pointer}${q.complex || isWrite ? "/query" : ""}`;
  if (!isWrite) return { q, r: await resolve(ctx, q.query, at) };
  const r = await resolveWrite(ctx, q.query, at);
  const readBackWanted = q.returns !== "none";
  const w = compileWrite(
    planWrite(r.node, q.data, `${pointer}/data`, { readBack: readBackWanted }),
    { params: r.params, readBack: readBackWanted },
  );
  return { q, r, write: { r, w } };
}

/** Runs one planned write inside the transaction; returns the bare selection or the envelope. */
async function runWrite(
  ctx: SvcContext,
  tx: RequestTx,
  q: ComplexQuery,
  { r, w }: PlannedWrite,
): Promise<unknown> {
  const want = wanted(ctx, q);
  const out: Record<string, unknown> = {};
  if (q.rollback) tx.send("savepoint svc_rollback");
  // The statements and the read-back pipelined: one round trip.
  const back = readBack(r, w, q, ctx.cfg.pg.query.max_row_size);
  const wr = await executeWrite(tx, w, { sql: want.sql, queryPlan: want.plan }, back ? [back] : []);
  writeOutput(out, q, want, wr, back, wr.after[0] ?? []);
  if (q.rollback) tx.send("rollback to savepoint svc_rollback");
  return q.complex ? withWarnings(ctx, q, out) : out.result;
}

/**
 * Streams a read's rows into `sink` as one JSON array (`sink` null: runs it and drops the rows),
 * {@link FETCH_BATCH} rows at a time, each batch fetched once the previous one was taken.
 */
async function streamRows(
  tx: RequestTx,
  stmt: { sql: string; params: unknown[] },
  sink: AnswerSink | null,
): Promise<void> {
  let first = true;
  await tx.rows(stmt.sql, stmt.params, FETCH_BATCH, async (rows) => {
    if (!sink) return;
    for (const row of rows) {
      sink.push(first ? OPEN : COMMA);
      sink.push(row);
      first = false;
      const taken = sink.flush();
      if (taken) await taken;
    }
  });
  sink?.push(first ? EMPTY : CLOSE);
}

/**
 * Runs one planned read inside the transaction and streams its answer into `sink`: the bare rows,
 * or the ComplexResult envelope (its `result` streamed, its other members after it).
 */
async function streamRead(
  ctx: SvcContext,
  tx: RequestTx,
  { q, r }: Planned,
  sink: AnswerSink,
): Promise<void> {
  const want = wanted(ctx, q);
  if (q.rollback) tx.send("savepoint svc_rollback");
  const compiled = compileRead(r.node, { params: r.params, count: want.count });
  const capped = capRowSize(compiled.rows, ctx.cfg.pg.query.max_row_size);
  if (!q.complex) {
    await streamRows(tx, capped, sink);
  } else {
    const withResult = q.returns !== "none";
    if (withResult) sink.push(RESULT);
    await streamRows(tx, capped, withResult ? sink : null);
    const out: Record<string, unknown> = {};
    if (q.count) {
      if (want.count && compiled.count) {
        const c = await tx.query(compiled.count.sql, compiled.count.params);
        out.count = Number(c[0].count);
      }
      out.offset = r.node.offset ?? 0;
    }
    if (r.node.limit !== null) out.limit = r.node.limit; // echoed whenever set (docs/query.md "ComplexQuery and ComplexResult")
    if (q.query_plan) {
      out.query_plan = want.plan
        ? [await explain(tx, compiled.rows.sql, compiled.rows.params)]
        : [];
    }
    if (q.sql) out.sql = want.sql ? [{ path: [], select: compiled.rows.sql }] : [];
    const rest = JSON.stringify(withWarnings(ctx, q, out));
    sink.push(
      encoder.encode(withResult ? (rest === "{}" ? "}" : `,${rest.slice(1)}`) : rest),
    );
  }
  if (q.rollback) tx.send("rollback to savepoint svc_rollback");
}

const encoder = new TextEncoder();
const OPEN = encoder.encode("[");
const COMMA = encoder.encode(",");
const CLOSE = encoder.encode("]");
const EMPTY = encoder.encode("[]");
const NULL = encoder.encode("null");
const RESULT = encoder.encode('{"result":');

/**
 * Bytes of an answer built by {@link answer} that are held before it is streamed: an answer that
 * ends within them goes out in one piece, with the status of its outcome.
 */
const ANSWER_BUFFER = 1024 * 1024;

/** Streamed chunks are about this large (small pieces are joined first). */
const CHUNK = 256 * 1024;

function concat(parts: Uint8Array[], n: number): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/**
 * The bytes of an answer as they are produced: held while they fit {@link ANSWER_BUFFER}, then
 * streamed to the client with backpressure ({@link flush} resolves once the client took enough).
 */
class AnswerSink {
  #parts: Uint8Array[] = [];
  #size = 0;
  #writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
  /** The last write to the client (its failure: the client is gone). */
  #last: Promise<void> = Promise.resolve();

  /** `stream` is called once, with the body, when the answer outgrows the buffer. */
  constructor(readonly stream: (body: ReadableStream<Uint8Array>) => void) {}

  /** Whether bytes were handed to the client already (the status is then sent). */
  get streaming(): boolean {
    return this.#writer !== null;
  }

  /** Appends bytes (never written to afterwards). */
  push(b: Uint8Array): void {
    this.#parts.push(b);
    this.#size += b.length;
  }

  /** Streams what is held once there is enough of it; resolves when the client can take more. */
  flush(): Promise<void> | undefined {
    if (this.#writer ? this.#size < CHUNK : this.#size <= ANSWER_BUFFER) return undefined;
    if (!this.#writer) {
      const ts = new TransformStream<Uint8Array, Uint8Array>(undefined, { highWaterMark: 4 }, {
        highWaterMark: 4,
      });
      this.#writer = ts.writable.getWriter();
      this.stream(ts.readable);
    }
    return this.#send();
  }

  /** Resolves when every byte handed to the client was taken; rejects when the client is gone. */
  settled(): Promise<void> {
    return this.#last;
  }

  /** The whole answer, when it never outgrew the buffer. */
  bytes(): Uint8Array {
    return concat(this.#parts, this.#size);
  }

  /** Sends what is left and ends the stream. */
  async end(): Promise<void> {
    await this.#send();
    await this.#writer!.close();
  }

  /** Ends the stream with an error: the client sees a truncated answer. */
  abort(e: unknown): void {
    this.#writer?.abort(e).catch(() => {});
  }

  #send(): Promise<void> {
    const chunk = concat(this.#parts, this.#size);
    this.#parts = [];
    this.#size = 0;
    const sent = this.#writer!.write(chunk);
    this.#last = sent;
    sent.catch(() => {}); // reported through `settled` or the next write
    return sent;
  }
}

/**
 * Runs planned queries in one transaction and answers with their results (a JSON array when
 * `batch`, else the one result), each streamed as it is produced: one query's rows are in memory
 * at a time. An answer that fits {@link ANSWER_BUFFER} is sent whole once committed (a failure
 * gets its own status); a larger one starts streaming with status 200, and a failure after that
 * rolls back and ends the stream with an error (truncated JSON), like a streamed read. The closing
 * bytes are sent only after the commit.
 */
function answer(ctx: SvcContext, items: Planned[], batch: boolean): Promise<Response> {
  const { promise, resolve, reject } = Promise.withResolvers<Response>();
  const sink = new AnswerSink((body) => resolve(jsonResponse(body)));
  const run = ctx.db.transaction(ctx.who, async (tx) => {
    if (batch) sink.push(OPEN);
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (i) sink.push(COMMA);
      try {
        if (item.write) {
          const result = await runWrite(ctx, tx, item.q, item.write);
          sink.push(result === undefined ? NULL : encoder.encode(JSON.stringify(result)));
        } else {
          await streamRead(ctx, tx, item, sink);
        }
        await sink.flush();
      } catch (e) {
        if (batch) markBatchIndex(e, i);
        throw e;
      }
    }
    // Never commit an answer the client did not take.
    await sink.settled();
  });
  run.then(async () => {
    if (batch) sink.push(CLOSE);
    if (!sink.streaming) return resolve(jsonResponse(sink.bytes()));
    await sink.end().catch(() => {});
  }, (e) => {
    if (!sink.streaming) return reject(e);
    sink.abort(e);
  });
  return promise;
}

/**
 * The envelope with `warnings` naming each flag the request set that the configuration disables
 * (outside dev mode `count`, `stats`, `query_plan` and `sql` are off unless enabled): a disabled
 * flag is not an error, but never silent either.
 */
function withWarnings(
  ctx: SvcContext,
  q: ComplexQuery,
  out: Record<string, unknown>,
): Record<string, unknown> {
  const allow = ctx.cfg.pg.query;
  const off: string[] = [];
  if (q.count && !allow.allow_count) off.push("count is disabled (pg.query.allow_count)");
  if (q.stats && !allow.allow_stats) off.push("stats is disabled (pg.query.allow_stats)");
  if (q.query_plan && !allow.allow_query_plan) {
    off.push("query_plan is disabled (pg.query.allow_query_plan)");
  }
  if (q.sql && !allow.allow_sql) off.push("sql is disabled (pg.query.allow_sql)");
  if (off.length) out.warnings = off;
  return out;
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

/**
 * The read-back of a write: the query's select over the root keys in payload order (known ones
 * bound, the others from the setting the root's last statement stored). Its plan is generic when
 * the keys come from the setting (they are not parameters): a plan made while a table was tiny
 * may scan it until autovacuum's next analyze invalidates the plan.
 */
function readBack(
  r: Resolved,
  w: CompiledWrite,
  q: ComplexQuery,
  maxRowSize: number,
): Statement | null {
  if (q.returns === "none") return null;
  // Rows come back as JSON text, answered as they are (never parsed and serialized again).
  const compile = () => {
    const read = capRowSize(
      compileRead(r.node, { params: r.params, rootKeys: w.rootKeys }).rows,
      maxRowSize,
    );
    return { ...read, sql: `SELECT "svc_b"."j"::text AS "j" FROM (${read.sql}) AS "svc_b"` };
  };
  const setting = w.rootKeys.setting;
  if (setting === undefined || r.params !== undefined) return compile();
  let bySetting = readBacks.get(r.node);
  if (!bySetting) readBacks.set(r.node, bySetting = new Map());
  const key = `${setting}\0${maxRowSize}`;
  let stmt = bySetting.get(key);
  if (!stmt) bySetting.set(key, stmt = compile());
  return stmt;
}

/**
 * Fills the response of a write: result (parsed, unless `raw`: the caller answers the rows' JSON
 * texts as they are), stats, sql, query_plan.
 */
function writeOutput(
  out: Record<string, unknown>,
  q: ComplexQuery,
  want: ReturnType<typeof wanted>,
  wr: WriteResult,
  back: { sql: string } | null,
  rows: Record<string, unknown>[],
  raw = false,
): void {
  const sqlOut: unknown[] = [...wr.sql];
  if (back) {
    if (!raw) out.result = parseRows(rows);
    if (want.sql) sqlOut.push({ path: [], select: back.sql });
  }
  if (q.stats) out.stats = want.stats ? wr.stats : [];
  if (q.sql) out.sql = want.sql ? sqlOut : [];
  if (q.query_plan) out.query_plan = want.plan ? [...wr.plans] : [];
}

/**
 * A single write request: begin, the role switch, every statement of the write, its read-back and
 * commit (rollback, when the request asks for it: nothing else is in the transaction) sent in one
 * round trip.
 */
async function singleWrite(ctx: SvcContext, q: ComplexQuery): Promise<string> {
  if (q.rollback && !ctx.cfg.pg.query.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const want = wanted(ctx, q);
  const r = await resolveWrite(ctx, q.query, "/query");
  const readBackWanted = q.returns !== "none";
  const w = compileWrite(
    planWrite(r.node, q.data, "/data", { readBack: readBackWanted }),
    { params: r.params, readBack: readBackWanted },
  );
  const opts = { sql: want.sql, queryPlan: want.plan };
  const back = readBack(r, w, q, ctx.cfg.pg.query.max_row_size);
  const sent = toSend(w, opts);
  let results: Record<string, unknown>[][];
  try {
    const end = q.rollback ? "rollback" : "commit";
    results = await ctx.db.pipeline(ctx.who, back ? [...sent, back] : sent, end);
  } catch (e) {
    throw w.error(e);
  }
  const out: Record<string, unknown> = {};
  const wr = writeResult(w, results.slice(0, sent.length), opts);
  const rows = results[sent.length] ?? [];
  writeOutput(out, q, want, wr, back, rows, true);
  // The read-back's rows are JSON texts: joined, not parsed and serialized again.
  const result = back ? `[${rows.map((row) => row.j).join(",")}]` : undefined;
  if (!q.complex) return result ?? "null";
  const rest = JSON.stringify(withWarnings(ctx, q, out));
  if (result === undefined) return rest;
  return `{"result":${result}${rest === "{}" ? "" : `,${rest.slice(1, -1)}`}}`;
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
      return jsonResponse(await singleWrite(ctx, q));
    }
    return await answer(ctx, [await planQuery(ctx, q, "")], false);
  }
  const items: Planned[] = [];
  for (let i = 0; i < parsed.items.length; i++) {
    try {
      items.push(await planQuery(ctx, parsed.items[i], `/${i}`));
    } catch (e) {
      markBatchIndex(e, i);
      throw e;
    }
  }
  return await answer(ctx, items, true);
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
