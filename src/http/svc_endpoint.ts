/**
 * The query endpoint's HTTP side: POST /svc (reads, writes, ComplexQuery flags, batches; JSON
 * body) and GET /svc (the read-only query-string form). Reads the request, hands it to the query
 * stage (src/query/run.ts) and answers its body as JSON.
 *
 * @module
 */
import { readBodyText, requireJson } from "../request/body.ts";
import type { Body, QueryContext } from "../query/context.ts";
import { runGet, runPost } from "../query/run.ts";
import { StreamingAnswer } from "./answer_body.ts";
import { readJson } from "./json_body.ts";
import { PlainAnswer } from "./plain_answer.ts";

/** What the endpoint needs per request: the query stage's context without the body makers. */
export type SvcContext = Omit<QueryContext, "sink" | "readJson">;

const newSink: QueryContext["sink"] = (stream) => new StreamingAnswer(stream);

/** A JSON answer of a body, its headers added by the server (src/http/plain_answer.ts). */
function jsonAnswer(body: Body): PlainAnswer {
  return new PlainAnswer(body, "application/json");
}

/** POST /svc. */
export async function handlePost(ctx: SvcContext, req: Request): Promise<PlainAnswer> {
  requireJson(req);
  const text = await readBodyText(
    req,
    ctx.cfg.http.max_body_size,
    ctx.cfg.http.body_timeout * 1000,
  );
  return jsonAnswer(await runPost({ ...ctx, sink: newSink, readJson }, text));
}

/** GET /svc: the same read from the query string. */
export async function handleGet(ctx: SvcContext, url: URL): Promise<PlainAnswer> {
  return jsonAnswer(await runGet({ ...ctx, sink: newSink, readJson }, url));
}
