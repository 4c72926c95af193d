/**
 * The query endpoint's HTTP side: POST /svc (reads, writes, ComplexQuery flags, batches; JSON
 * body) and GET /svc (the read-only query-string form). Reads the request, hands it to the query
 * stage (src/query/run.ts) and answers its body as JSON.
 *
 * @module
 */
import { decodeUtf8, readBodyBytes, requireJson } from "../request/body.ts";
import { type BodyBudget, LARGE_BODY } from "../request/body_budget.ts";
import type { Body, QueryContext } from "../query/context.ts";
import { runGet, runPost } from "../query/run.ts";
import { StreamingAnswer } from "./answer_body.ts";
import { readJson } from "./json_body.ts";
import { PlainAnswer } from "./plain_answer.ts";

/** What the endpoint needs per request: the query stage's context without the body makers. */
export type SvcContext = Omit<QueryContext, "sink" | "readJson">;

const newSink: QueryContext["sink"] = (stream) => new StreamingAnswer(stream);

/** A request's query context: its {@link SvcContext} with the HTTP layer's body makers. */
export function queryContext(
  cfg: QueryContext["cfg"],
  db: QueryContext["db"],
  state: QueryContext["state"],
  who: QueryContext["who"],
  read: QueryContext["read"],
): QueryContext {
  return { cfg, db, state, who, read, sink: newSink, readJson };
}

/** A JSON answer of a body, its headers added by the server (src/http/plain_answer.ts). */
function jsonAnswer(body: Body): PlainAnswer {
  return new PlainAnswer(body, "application/json");
}

/**
 * POST /svc. A large body is parsed, planned and run once `budget` admits it (read first: a slow
 * sender holds no room; src/request/body_budget.ts).
 */
export async function handlePost(
  ctx: SvcContext,
  req: Request,
  budget?: BodyBudget,
): Promise<PlainAnswer> {
  requireJson(req);
  // The bytes decoded here (readBodyText's work without its own async step and promise).
  const bytes = await readBodyBytes(
    req,
    ctx.cfg.http.max_body_size,
    ctx.cfg.http.body_timeout * 1000,
    budget?.receiving,
  );
  // A small body (every primary-key read) takes no part in the budget: no closure, no await.
  if (!budget || bytes.length < LARGE_BODY) {
    return jsonAnswer(await runPost(withBodies(ctx), decodeUtf8(bytes)));
  }
  const timeout = ctx.cfg.pg.query.statement_timeout;
  return await budget.run(
    bytes.length,
    timeout > 0 ? timeout : Infinity,
    req.signal,
    async () => jsonAnswer(await runPost(withBodies(ctx), decodeUtf8(bytes))),
  );
}

/**
 * GET /svc: the same read from the query string, in a read-only transaction: a browser follows a
 * link from any site with its `SameSite=Lax` cookie, so a GET must not be able to write (a VOLATILE
 * function that writes is 405 `PG_25006`; docs/security.md).
 */
export async function handleGet(ctx: SvcContext, url: URL): Promise<PlainAnswer> {
  const readOnly = { ...withBodies(ctx), who: { ...ctx.who, readOnly: true } };
  return jsonAnswer(await runGet(readOnly, url));
}

/** `ctx` as a query context: itself when {@link queryContext} made it, else a copy. */
function withBodies(ctx: SvcContext): QueryContext {
  const q = ctx as Partial<QueryContext>;
  return q.sink === newSink && q.readJson === readJson
    ? ctx as QueryContext
    : { ...ctx, sink: newSink, readJson };
}
