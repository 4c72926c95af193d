/**
 * The query stage: coordinates one POST /svc body or GET /svc query string, after the HTTP layer
 * read it. Pipeline: parse/validate → plan (pure) → SQL → execute as the request's role → the
 * answer's body. A repeated plain read comes from the read cache; a plain read is answered
 * straight from PostgreSQL's JSON rows (streamed when large); a single write is one round trip;
 * ComplexQuery flags and batches run in one transaction, their answer streamed as produced.
 *
 * @module
 */
import { FETCH_BATCH, pipeline, type RequestTx, transaction } from "../db/run_as.ts";
import { markBatchIndex, SvcError } from "../svc_error.ts";
import type { RelationNode, Statement } from "../compile/ast.ts";
import { compileRead } from "../compile/sql.ts";
import { type ComplexQuery, parseBody } from "../request/complex.ts";
import { checkQueryString, inGetTerms, parseGetQuery } from "../request/query_string.ts";
import { parseJson } from "../request/body.ts";
import { planAndCompileWrite, type PlanCompileOptions } from "../write/template.ts";
import {
  executeWrite,
  explained,
  planEntry,
  toSend,
  type WriteResult,
  writeResult,
} from "../write/execute.ts";
import type { CompiledWrite } from "../write/compile.ts";
import { capRowSize } from "../compile/rowsize.ts";
import { redactMarkers } from "../util/markers.ts";
import { CACHE_MAX_KEY, type CachedRead, readCache } from "./cache.ts";
import {
  aheadQuestion,
  hideUnreadable,
  type Position,
  resolve,
  type Resolved,
  resolveQuery,
  resolveWrite,
  settleHint,
} from "./resolve.ts";
import { isSmall } from "./small.ts";
import { readOnlyTree } from "./read_target.ts";
import type { Database } from "../db/pool.ts";
import type { AnswerSink, Body, QueryContext } from "./context.ts";

/** Where a read of `nodes` runs: a replica when configured and no node calls a VOLATILE function. */
function readTarget(ctx: QueryContext, nodes: RelationNode[]): Database {
  if (!ctx.read || !nodes.every((n) => readOnlyTree(n, ctx.state.schema))) return ctx.db;
  return ctx.read();
}

/** Read-backs by query and root-key setting (their text and values depend on nothing else). */
const readBacks = new WeakMap<RelationNode, Map<string, Statement>>();

/**
 * A plain read answered from raw JSON rows: one round trip, streamed when large. Its row-size cap
 * is svc's client's (an oversized row refused from its DataRow header, its bytes skipped: nothing
 * for PostgreSQL to compute), unless the read calls a VOLATILE function: a refusal must then roll
 * back what the function did, so PostgreSQL refuses the row (the SQL cap, src/compile/rowsize.ts).
 */
async function plainRead(ctx: QueryContext, r: Resolved, cacheKey?: string): Promise<Body> {
  const cap = ctx.cfg.pg.query.max_row_size;
  const readOnly = readOnlyTree(r.node, ctx.state.schema);
  const rows = compileRead(r.node, { params: r.params }).rows;
  const small = isSmall(r.node);
  const clientCap = readOnly && cap > 0;
  const stmt: CachedRead = {
    ...(clientCap ? rows : capRowSize(rows, cap)),
    // A read calling a VOLATILE function keeps no record, so it is never tried as one batch first
    // (the try would commit what the function did, and the read would run again).
    read: clientCap
      ? { small, maxRowBytes: Math.floor(cap), seen: {} }
      : { small, seen: readOnly ? {} : undefined },
    replica: ctx.read !== undefined && readOnly,
  };
  if (cacheKey !== undefined && !r.rowTyped) readCache.set(cacheKey, stmt);
  const db = stmt.replica ? ctx.read!() : ctx.db;
  return await ctx.readJson(db, ctx.who, stmt.sql, stmt.params, stmt.read);
}

/**
 * A cached plain read, when this exact request was compiled before for this role and state (its
 * answer's promise; undefined at once on a miss).
 */
function cachedRead(ctx: QueryContext, key: string): Promise<Body> | undefined {
  const stmt = readCache.get(ctx.state, key);
  if (!stmt) return undefined;
  const db = stmt.replica && ctx.read ? ctx.read() : ctx.db;
  return ctx.readJson(db, ctx.who, stmt.sql, stmt.params, stmt.read);
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
  /** The JSON pointer of its query (`q.query`). */
  at: string;
  r: Resolved;
  /** Set for a write. */
  write?: PlannedWrite;
}

/**
 * Resolves a query of a POST body at `pointer` (and plans it, for a write): every 4xx it can
 * cause is thrown here, before any SQL runs.
 */
async function planQuery(ctx: QueryContext, q: ComplexQuery, pointer: string): Promise<Planned> {
  if (q.rollback && !ctx.cfg.pg.query.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const isWrite = q.data !== undefined;
  // A row-type cast asks PostgreSQL what the role may select (resolve), before the transaction.
  const at = `${pointer}${q.complex || isWrite ? "/query" : ""}`;
  if (!isWrite) return { q, at, r: await resolve(ctx, q.query, at) };
  const r = await resolveWrite(ctx, q.query, at);
  const w = planAndCompileWrite(r.node, q.data, `${pointer}/data`, writeOptions(ctx, q, r));
  return { q, at, r, write: { r, w } };
}

/**
 * How a write is planned: read back unless `returns` is none, and answered from its own
 * `RETURNING` when the write allows it (src/write/compile.ts `answersFromReturning`) — never under
 * `query_plan`, whose statements answer their plans.
 */
function writeOptions(ctx: QueryContext, q: ComplexQuery, r: Resolved): PlanCompileOptions {
  const readBack = q.returns !== "none";
  const answer = readBack && !wanted(ctx, q).plan
    ? { maxRowSize: ctx.cfg.pg.query.max_row_size }
    : undefined;
  return { params: r.params, readBack, answer };
}

/** Runs one planned write inside the transaction; returns the bare selection or the envelope. */
async function runWrite(
  ctx: QueryContext,
  tx: RequestTx,
  q: ComplexQuery,
  { r, w }: PlannedWrite,
): Promise<unknown> {
  const want = wanted(ctx, q);
  const out: Record<string, unknown> = {};
  if (q.rollback) tx.send("savepoint svc_rollback");
  // The statements and the read-back pipelined: one round trip.
  const back = readBack(r, w, q, ctx.cfg.pg.query.max_row_size);
  const after = back
    ? (want.plan ? [back, explained(back, readOnlyTree(r.node, ctx.state.schema))] : [back])
    : [];
  const wr = await executeWrite(tx, w, { sql: want.sql, queryPlan: want.plan }, after);
  writeOutput(out, q, want, wr, back, wr.answer ?? wr.after[0] ?? [], false, wr.after[1]);
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
  const n = await tx.rows(stmt.sql, stmt.params, FETCH_BATCH, async (pieces) => {
    if (!sink) return;
    // Pieces of `[row,row,…` up to 256 KiB each, streamed as they are. Each is let go of as it is
    // handed on: a piece the client took is then garbage at once, not kept by the rest of its
    // batch through the scavenges of the time the batch takes to stream (docs/performance.md,
    // "Memory").
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i];
      pieces[i] = NO_BYTES;
      sink.push(piece);
      const taken = sink.flush();
      if (taken) await taken;
    }
  });
  sink?.push(n === 0 ? EMPTY : CLOSE);
}

/**
 * Runs one planned read inside the transaction and streams its answer into `sink`: the bare rows,
 * or the ComplexResult envelope (its `result` streamed, its other members after it).
 */
async function streamRead(
  ctx: QueryContext,
  tx: RequestTx,
  { q, r }: Planned,
  sink: AnswerSink,
): Promise<void> {
  const want = wanted(ctx, q);
  // The count is a second statement over the same rows: a VOLATILE function in the tree (it may
  // write) would run twice.
  if (want.count && !readOnlyTree(r.node, ctx.state.schema)) {
    throw new SvcError(
      "QUERY_INVALID",
      "count runs the query a second time, so not with a VOLATILE function (it would run twice)",
      { details: { pointer: "/count" } },
    );
  }
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
    // `offset` goes with `count` (docs/query.md, the envelope): a disabled count has neither.
    if (q.count && want.count && compiled.count) {
      const c = await tx.query(compiled.count.sql, compiled.count.params);
      out.count = Number(c[0].count);
      out.offset = r.node.offset ?? 0;
    }
    if (r.node.limit !== null) out.limit = r.node.limit; // echoed whenever set (docs/query.md "ComplexQuery and ComplexResult")
    if (q.query_plan) {
      out.query_plan = want.plan
        ? [await explain(tx, compiled.rows.sql, compiled.rows.params)]
        : [];
    }
    if (q.sql) out.sql = want.sql ? [{ path: [], select: compiled.rows.sql }] : [];
    const rest = redactMarkers(JSON.stringify(withWarnings(ctx, q, out)));
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
/** What a streamed piece's slot holds once the piece was handed on. */
const NO_BYTES = new Uint8Array(0);
const RESULT = encoder.encode('{"result":');

/**
 * Runs planned queries in one transaction and answers with their results (a JSON array when
 * `batch`, else the one result), each streamed as it is produced: one query's rows are in memory
 * at a time. An answer that fits {@link ANSWER_BUFFER} is sent whole once committed (a failure
 * gets its own status); a larger one starts streaming with status 200, and a failure after that
 * rolls back and ends the stream with an error (truncated JSON), like a streamed read. The closing
 * bytes are sent only after the commit.
 */
function answer(ctx: QueryContext, items: Planned[], batch: boolean): Promise<Body> {
  const { promise, resolve, reject } = Promise.withResolvers<Body>();
  const answerSink = ctx.sink(resolve);
  let sink = answerSink;
  // Only reads, none with rollback: a replica may answer (svc's own lookups stay on ctx.db).
  const db = items.every((i) => !i.write && !i.q.rollback)
    ? readTarget(ctx, items.map((i) => i.r.node))
    : ctx.db;
  // A batch asks which sources its later items name the role may use before any byte streams
  // (src/query/resolve.ts aheadQuestion): sent ahead of the first item, no round trip of its own.
  const ahead = batch && items.length > 1
    ? aheadQuestion(
      ctx,
      items.slice(1).map((it, k) => ({ query: it.q.query, pointer: it.at, index: k + 1 })),
    )
    : null;
  const run = transaction(db, ctx.who, async (tx) => {
    if (ahead) {
      const gate = tx.query(ahead.sql, ahead.params).then((rows) => {
        const hidden = ahead.hidden(rows);
        if (hidden) throw indexed(hidden);
      });
      gate.catch(() => {}); // met at the first flush that would stream, if any
      sink = gated(answerSink, gate);
    }
    answerSink.watchBy(tx, ctx.who.requestId);
    if (batch) sink.push(OPEN);
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (i) sink.push(COMMA);
      try {
        if (item.write) {
          const result = await runWrite(ctx, tx, item.q, item.write);
          sink.push(
            result === undefined ? NULL : encoder.encode(redactMarkers(JSON.stringify(result))),
          );
        } else {
          await streamRead(ctx, tx, item, sink);
        }
        await sink.flush();
      } catch (e) {
        if (batch && !hasOwnIndex.has(e as object)) markBatchIndex(e, i);
        throw e;
      }
    }
    // Never commit an answer the client did not take.
    await sink.settled();
  });
  run.then(async () => {
    if (batch) sink.push(CLOSE);
    if (!sink.streaming) return resolve(sink.bytes());
    await sink.end().catch(() => {});
  }, (e) => {
    if (!sink.streaming) return reject(e);
    sink.abort(e);
  });
  return promise;
}

/** Errors that carry the batch index of the item they are about, not the one running. */
const hasOwnIndex = new WeakSet<object>();

function indexed(e: SvcError): SvcError {
  hasOwnIndex.add(e);
  return e;
}

/**
 * `sink`, whose answer starts streaming only once `gate` resolved (a batch's question about its
 * later items, {@link aheadQuestion}); a rejected gate fails the flush that would have streamed.
 * Before that, a flush waits for the gate; after, the sink is used as it is.
 */
function gated(sink: AnswerSink, gate: Promise<void>): AnswerSink {
  let open = false;
  gate.then(() => (open = true), () => {});
  return {
    get streaming() {
      return sink.streaming;
    },
    push: (b) => sink.push(b),
    flush: () => (open ? sink.flush() : gate.then(() => sink.flush())),
    settled: () => sink.settled(),
    bytes: () => sink.bytes(),
    end: () => sink.end(),
    abort: (e) => sink.abort(e),
    watchBy: (w, id) => sink.watchBy(w, id),
  };
}

/**
 * The envelope with `warnings` naming each flag the request set that the configuration disables
 * (outside dev mode `count`, `stats`, `query_plan` and `sql` are off unless enabled): a disabled
 * flag is not an error, but never silent either.
 */
function withWarnings(
  ctx: QueryContext,
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
function wanted(ctx: QueryContext, q: ComplexQuery) {
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
  if (q.returns === "none" || w.answer !== undefined) return null;
  // Rows come back as JSON text, answered as they are (never parsed and serialized again).
  const compile = () => {
    const read = capRowSize(
      compileRead(r.node, { params: r.params, rootKeys: w.rootKeys }).rows,
      maxRowSize,
    );
    return { ...read, sql: `SELECT "svc_b"."j"::text AS "j" FROM (${read.sql}) AS "svc_b"` };
  };
  const setting = w.rootKeys.settings &&
    `${w.rootKeys.settings.join(",")}${w.rootKeys.single ? "\0single" : ""}`;
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
  backPlan?: Record<string, unknown>[],
): void {
  const sqlOut: unknown[] = [...wr.sql];
  if ((back || wr.answer) && !raw) out.result = parseRows(rows);
  if (back && want.sql) sqlOut.push({ path: [], select: back.sql });
  if (q.stats) out.stats = want.stats ? wr.stats : [];
  if (q.sql) out.sql = want.sql ? sqlOut : [];
  if (q.query_plan) {
    out.query_plan = !want.plan
      ? []
      : backPlan
      ? [...wr.plans, planEntry([], backPlan)]
      : [...wr.plans];
  }
}

/**
 * A single write request: begin, the role switch, every statement of the write, its read-back and
 * commit (rollback, when the request asks for it: nothing else is in the transaction) sent in one
 * round trip.
 */
async function singleWrite(ctx: QueryContext, q: ComplexQuery): Promise<string> {
  if (q.rollback && !ctx.cfg.pg.query.allow_rollback) {
    throw new SvcError(
      "QUERY_ROLLBACK_NOT_GRANTED",
      "rollback is disabled (pg.query.allow_rollback)",
    );
  }
  const want = wanted(ctx, q);
  const r = await resolveWrite(ctx, q.query, "/query");
  const w = planAndCompileWrite(r.node, q.data, "/data", writeOptions(ctx, q, r));
  const opts = { sql: want.sql, queryPlan: want.plan };
  const back = readBack(r, w, q, ctx.cfg.pg.query.max_row_size);
  const sent = toSend(w, opts);
  let results: Record<string, unknown>[][];
  try {
    const end = q.rollback ? "rollback" : "commit";
    const after = back
      ? (want.plan ? [back, explained(back, readOnlyTree(r.node, ctx.state.schema))] : [back])
      : [];
    results = await pipeline(ctx.db, ctx.who, [...sent, ...after], end);
  } catch (e) {
    throw w.error(e);
  }
  const out: Record<string, unknown> = {};
  const wr = writeResult(w, results.slice(0, sent.length), opts);
  const rows = wr.answer ?? results[sent.length] ?? [];
  writeOutput(
    out,
    q,
    want,
    wr,
    back,
    rows,
    true,
    back && want.plan ? results[sent.length + 1] : undefined,
  );
  // The answer's rows are JSON texts: joined, not parsed and serialized again.
  const result = back || wr.answer ? `[${rows.map((row) => row.j).join(",")}]` : undefined;
  if (!q.complex) return result ?? "null";
  const rest = redactMarkers(JSON.stringify(withWarnings(ctx, q, out)));
  if (result === undefined) return rest;
  return `{"result":${result}${rest === "{}" ? "" : `,${rest.slice(1, -1)}`}}`;
}

/**
 * A POST /svc body (its text, as read by the HTTP layer): the answer's body. Not an async
 * function: the answer's promise gets a rejection handler, and no suspended frame of its own is
 * kept alive across the round trip (measured: ≈ 290 bytes less per primary-key read).
 */
export function runPost(ctx: QueryContext, text: string): Promise<Body> {
  let answer: Promise<Body>;
  try {
    answer = post(ctx, text);
  } catch (e) {
    return postFailed(ctx, text, e);
  }
  return answer.then(undefined, (e) => postFailed(ctx, text, e));
}

/** A failed POST body's error as answered: hidden when unreadable, with its hint settled. */
async function postFailed(ctx: QueryContext, text: string, e: unknown): Promise<never> {
  const answered = await hideUnreadable(ctx, e, () => postPositions(ctx, text));
  await settleHint(ctx, answered);
  throw answered;
}

/** The query positions of a POST /svc body, at the pointers its errors carry. */
function postPositions(ctx: QueryContext, text: string): Position[] {
  const parsed = parseBody(parseJson(text, ctx.cfg.http.max_json_depth));
  const at = (q: ComplexQuery, base: string) =>
    `${base}${q.complex || q.data !== undefined ? "/query" : ""}`;
  if (parsed.kind === "single") {
    return [{ query: parsed.query.query, pointer: at(parsed.query, "") }];
  }
  return parsed.items.map((q, i) => ({ query: q.query, pointer: at(q, `/${i}`), index: i }));
}

/** A POST body's answer: a cached read's at once (no async step of its own), else compiled. */
function post(ctx: QueryContext, text: string): Promise<Body> {
  const key = text.length <= CACHE_MAX_KEY ? `${ctx.who.role}\0P${text}` : undefined;
  const cached = key === undefined ? undefined : cachedRead(ctx, key);
  return cached ?? compiledPost(ctx, text, key);
}

async function compiledPost(
  ctx: QueryContext,
  text: string,
  key: string | undefined,
): Promise<Body> {
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
    if (q.data !== undefined) return await singleWrite(ctx, q);
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

/** A GET /svc request's URL (its query string): the answer's body. */
export async function runGet(ctx: QueryContext, url: URL): Promise<Body> {
  try {
    return await get(ctx, url);
  } catch (e) {
    const answered = await hideUnreadable(ctx, e, () => {
      const g = parseGetQuery(url.searchParams, ctx.cfg.http.max_json_depth);
      return [{ query: g.tree, pointer: "" }];
    });
    await settleHint(ctx, answered);
    throw inGetTerms(answered);
  }
}

async function get(ctx: QueryContext, url: URL): Promise<Body> {
  const key = url.search.length <= CACHE_MAX_KEY ? `${ctx.who.role}\0G${url.search}` : undefined;
  const cached = key === undefined ? undefined : cachedRead(ctx, key);
  if (cached) return await cached;
  checkQueryString(url.search);
  const g = parseGetQuery(url.searchParams, ctx.cfg.http.max_json_depth);
  if (g.wellknown !== undefined) {
    return plainRead(
      ctx,
      resolveQuery(ctx, { wellknown: g.wellknown, params: g.params ?? {} }, ""),
    );
  }
  return plainRead(ctx, await resolve(ctx, g.tree, ""));
}
