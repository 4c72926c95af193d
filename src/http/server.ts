/**
 * The HTTP server's one request path, every request alike:
 * `surface → enter → identify → dispatch → finish → decorate`, each step a plain function of its
 * own module here (surface.ts, enter.ts, identify.ts, dispatch.ts, finish.ts, decorate.ts).
 * Deno.serve calls {@link createApp}'s `fetch`; nothing else routes a request.
 *
 * @module
 */
import { checkAssumable } from "../auth/roles.ts";
import { requestAuth } from "../auth/bearer.ts";
import { pathKind, requestId } from "../observe/access.ts";
import { metricsRecorded } from "./metrics_endpoint.ts";
import { type ClientWatch, isStreamed, markStreamed } from "./disconnect.ts";
import { surface } from "./surface.ts";
import { enter } from "./enter.ts";
import { identify, type Identity } from "./identify.ts";
import { type Answer, type Call, type Cluster, type DispatchDeps, dispatcher } from "./dispatch.ts";
import { failure, finish, type Finished, finished, finishFields } from "./finish.ts";
import { decorate, decorateFields } from "./decorate.ts";
import { PlainAnswer } from "./plain_answer.ts";
import { recycleAnswer } from "./json_body.ts";
import { servedByRuntime } from "./answer_body.ts";

export type { Cluster };

/** Everything the server needs: what the dispatch table needs, and the client watch. */
export interface AppDeps extends DispatchDeps {
  /** Watches requests' connections for clients the HTTP server does not report gone. */
  clientWatch?: ClientWatch;
}

/** A request's {@link Call} (its role once identified) and its {@link Finished} figures. */
type Traced = Omit<Call, "who"> & Finished & { who: Call["who"] | undefined };

/** The HTTP application: the handler to give Deno.serve. */
export interface App {
  fetch(req: Request, info?: Deno.ServeHandlerInfo): Promise<Response>;
}

/** Builds the application of a configuration. */
export function createApp(deps: AppDeps): App {
  const { cfg, runtime } = deps;
  const dispatch = dispatcher(deps);
  const record = metricsRecorded(cfg);
  const auth = requestAuth(cfg.jwt, deps.sessions);
  // Every reload after the first load fetches jwt.jwks_url's keys again, in the background (held
  // requests never wait for an identity provider); the first load's fetch began with `auth`.
  if (cfg.jwt.jwks_url !== undefined) {
    let loaded = false;
    runtime.hooks.push(() => loaded ? auth.refresh() : void (loaded = true));
  }
  const who = {
    auth,
    anonymousRole: cfg.pg.query.anonymous_role,
    clientWatch: deps.clientWatch,
    dev: cfg.dev,
  };

  const fetch = async (req: Request, info?: Deno.ServeHandlerInfo): Promise<Response> => {
    const path = requestPath(req.url);
    const early = surface(cfg, req, path);
    if (early) return early;
    const t0 = performance.now();
    const rid = requestId(req.headers.get("x-request-id"));
    const method = req.method;
    // The dispatch's call and what the access line and metrics say of it (Finished), one object
    // with every field from the start.
    const call: Traced = {
      req,
      method,
      path,
      kind: pathKind(method, path),
      setCookie: null,
      sessionAnswer: false,
      who: undefined,
      anonymous: true,
      t0,
      requestId: rid,
      role: undefined,
    };
    // Steps that need no waiting return their value, not a promise: not awaited then.
    const entered = enter(runtime, path);
    const gate = entered instanceof Promise ? await entered : entered;
    let id: Identity | undefined;
    let answer: Answer;
    try {
      // Health checks read no credential (docs/endpoint.md): a probe never depends on one.
      const health = path === "/svc/health" || path.startsWith("/svc/health/");
      const identified = identify(req, rid, gate, info, who, !health);
      id = identified instanceof Promise ? await identified : identified;
      call.who = id.who;
      call.anonymous = id.anonymous;
      call.setCookie = id.setCookie;
      // A refused Bearer token is answered, never run as the anonymous role.
      if (id.credential.error) throw id.credential.error;
      // A token naming the connecting role would run as the authenticator itself.
      if (!id.anonymous) checkAssumable(id.who.role, runtime.state?.schema.currentUser);
      const dispatched = dispatch(call as Call);
      answer = dispatched instanceof Promise ? await dispatched : dispatched;
    } catch (e) {
      answer = failure(e as Error, cfg.dev, id?.anonymous ?? true);
    } finally {
      gate.leave();
    }
    call.role = id?.who.role;
    const t: Finished = call;
    // A Bearer request's plain answer is a success carrying no session cookie: nothing for
    // bearerAnswer to change (src/auth/bearer.ts), so it is built at once with all its headers.
    if (answer instanceof PlainAnswer && (!id?.credential.bearer || answer.status < 400)) {
      return plainResponse(answer, t, req, id);
    }
    let res = answer instanceof PlainAnswer ? responseOf(answer) : answer;
    // A Bearer request never gets the session cookie, whoever set it (src/auth/bearer.ts).
    if (id) res = auth.bearerAnswer(res, id.credential);
    // A streamed answer's statements run on: its connection stays watched until it is sent.
    if (id?.unwatch && !isStreamed(res)) id.unwatch.stop();
    res = finish(res, t, record);
    res = decorate(cfg, req, path, res);
    if (method !== "HEAD" || !isStreamed(res)) return res; // HEAD: the runtime sends no body
    // HEAD of a streamed answer: its statements stop; no length, as the GET's chunked answer.
    res.body?.cancel().catch(() => {});
    return new Response(noBody(), res);
  };

  /** A plain answer as its Response, every header given to the constructor (plain_answer.ts). */
  const plainResponse = (
    a: PlainAnswer,
    t: Finished,
    req: Request,
    id: Identity | undefined,
  ): Response => {
    const streamed = a.body instanceof ReadableStream;
    // A streamed answer's statements run on: its connection stays watched until it is sent.
    if (id?.unwatch && !streamed) id.unwatch.stop();
    const fields: Record<string, string> = { "content-type": a.contentType };
    finishFields(t, fields);
    decorateFields(cfg, req, t.path, a.contentType, fields);
    finished(t, a.status, record);
    if (t.method === "HEAD" && streamed) {
      // HEAD of a streamed answer: its statements stop; no length, as the GET's chunked answer.
      // Any other HEAD is answered as its GET: the runtime sends the headers (the length
      // included) without the body.
      (a.body as ReadableStream).cancel().catch(() => {});
      return new Response(noBody(), { status: a.status, headers: fields });
    }
    const res = withFields(a.body as BodyInit, a.status, fields);
    if (streamed) {
      // Returned to Deno.serve: the runtime reads the body (src/http/answer_body.ts).
      servedByRuntime(a.body as ReadableStream<Uint8Array>);
      return markStreamed(res);
    }
    // The Response copied the bytes: a read's answer buffer serves the next answer.
    if (a.body instanceof Uint8Array) recycleAnswer(a.body);
    return res;
  };
  return { fetch };
}

/**
 * A response of `body` and `status` with the header `fields` (distinct names, `content-type`
 * among them) added one by one: the same headers as giving them to the constructor, whose
 * conversion of a record measured twice as dear.
 */
function withFields(body: BodyInit, status: number, fields: Record<string, string>): Response {
  const res = status === 200 ? new Response(body) : new Response(body, { status });
  const h = res.headers;
  for (const k in fields) {
    // A string body came with a text content type: replaced, not doubled.
    if (k === "content-type") h.set(k, fields[k]);
    else h.append(k, fields[k]);
  }
  return res;
}

/** A plain answer as a Response of its own (the path that changes its headers afterwards). */
function responseOf(a: PlainAnswer): Response {
  const res = new Response(a.body as BodyInit, {
    status: a.status,
    headers: { "content-type": a.contentType },
  });
  return a.body instanceof ReadableStream ? markStreamed(res) : res;
}

/**
 * A request URL's path, percent-decoded as `decodeURI` does (`%25` kept; a malformed escape kept
 * as it is), so `/sv%63` is `/svc`.
 */
export function requestPath(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  let end = url.indexOf("?", start);
  const hash = url.indexOf("#", start);
  if (end < 0 || (hash >= 0 && hash < end)) end = hash;
  const path = end < 0 ? url.slice(start) : url.slice(start, end);
  if (!path.includes("%")) return path;
  const keep = (s: string) => s.replace(/%25/g, "%2525");
  try {
    return decodeURI(keep(path));
  } catch {
    return path.replace(/(?:%[0-9A-Fa-f]{2})+/g, (m) => {
      try {
        return decodeURI(keep(m));
      } catch {
        return m;
      }
    });
  }
}

/**
 * An empty body sent as a stream: a HEAD answer standing for a streamed GET carries no
 * Content-Length (a null body would be announced as `content-length: 0`).
 */
function noBody(): ReadableStream<Uint8Array> {
  return new ReadableStream({ start: (c) => c.close() });
}
