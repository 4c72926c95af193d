/**
 * The HTTP application (Hono on Deno.serve): session resolution and access log around every
 * request, the /svc endpoints, health and database.json. Routes, static files and SSO plug in
 * here as they land.
 */
import { type Context, Hono } from "hono";
import type { HealthProbe } from "../db/health.ts";
import type { Config } from "../config/load.ts";
import type { Database, PoolStats, RequestRole } from "../db/pool.ts";
import type { Sessions } from "../auth/session.ts";
import { SvcError } from "../errors.ts";
import type { AppState, Runtime } from "../runtime.ts";
import { log } from "../log.ts";
import { errorResponse } from "./errors.ts";
import { handleGet, handlePost, type SvcContext } from "./svc.ts";
import { databaseJson } from "../typescript/json.ts";
import { routeHandler } from "./routes/handle.ts";
import type { RouteHooks } from "./routes/request.ts";
import { routeInfo } from "./routes/declare.ts";
import { databaseTsResponse, helperPathHook } from "../typescript/serve.ts";
import { checkRole } from "./role.ts";
import { schemaOids, visibleTo } from "../typescript/visible.ts";
import type { Sso } from "../sso/mod.ts";
import { type PathKind, pathKind, requestId } from "./access.ts";
import { bindMetricSources, observeDbError, observeRequest } from "../metrics.ts";
import { uncaughtErrors } from "../guard.ts";
import { metricsOnMain, metricsRecorded, metricsResponse } from "./metrics.ts";
import { playgroundResponse } from "./playground.ts";
import { httpSurface, surfaceAnswer, surfaceDecorate } from "./surface.ts";
import { serveStatic, staticDirs } from "./static.ts";
import { checkAssumable } from "../auth/assume.ts";
import { type ClientWatch, isStreamed } from "./disconnect.ts";

/** Per-request values shared between middleware and handlers. */
type Env = {
  Variables: {
    who: RequestRole;
    anonymous: boolean;
    setCookie: string | null;
    /** The request's X-Request-Id (echoed or generated). */
    requestId: string;
    /** The access log's and metrics' path kind; routes and static files may set their own. */
    kind: PathKind;
  };
};

/** Everything the app needs. */
export interface AppDeps {
  cfg: Config;
  db: Database;
  runtime: Runtime;
  sessions: Sessions;
  health: HealthProbe;
  /** Template rendering and multipart decoding for declared routes (optional). */
  routeHooks?: RouteHooks;
  /** Single sign-on endpoints under /auth/ (src/sso/mod.ts). */
  sso?: Sso;
  /** Set when this app is one worker of several: health and metrics cover every worker. */
  cluster?: Cluster;
  /** Watches requests' connections for clients the HTTP server does not report gone. */
  clientWatch?: ClientWatch;
}

/** What a worker asks its supervisor for (src/workers/). */
export interface Cluster {
  /** Number of workers. */
  count: number;
  /** Pool figures summed over every worker. */
  poolStats(): Promise<PoolStats>;
  /** The Prometheus text of every worker and the supervisor, aggregated. */
  metricsText(): Promise<string>;
}

/** The gate of requests that a reload never holds (health checks). */
const UNGATED = { signal: new AbortController().signal, leave: () => {} };

/** Builds the Hono application. */
export function createApp(deps: AppDeps): Hono<Env> {
  const { cfg, db, runtime, sessions } = deps;
  const app = new Hono<Env>();
  const errCtx = (anonymous: boolean) => ({ dev: cfg.dev, anonymous });
  bindMetricSources({
    pool: () => db.stats(),
    wellknown: () => {
      const wk = runtime.state?.wellknown;
      if (!wk) return null;
      return { active: wk.size, deactivated: wk.warnings.filter((w) => w.name).length };
    },
    tokenCache: () => sessions.cacheStats(),
    uncaught: uncaughtErrors,
  });
  // HTTP surface (static files, CORS, CSP, limits): src/http/{surface,static,cors,csp}.ts.
  const statics = staticDirs(cfg.http.static.path);
  app.use("*", httpSurface(cfg));

  // Access log, hold-during-reload, session resolution: shared by the Hono middleware below and
  // the direct path of GET/POST /svc (at the end).
  /**
   * The request's identity: its session's role and claims, and its cancel signal; `unwatch` stops
   * watching its connection.
   */
  const identify = async (
    req: Request,
    rid: string,
    gate: { signal: AbortSignal },
    info: Deno.ServeHandlerInfo | undefined,
  ): Promise<
    {
      who: RequestRole;
      anonymous: boolean;
      setCookie: string | null;
      unwatch: (() => void) | undefined;
    }
  > => {
    const session = await sessions.resolve(req.headers.get("cookie"));
    // A client that goes away cancels its statement, as reload and shutdown do (also while a
    // large answer streams). A plain controller fed by two listeners: AbortSignal.any measured
    // dearer per request. Both sources belong to this request alone (the shared UNGATED one of
    // health requests never aborts and gets no listener), so nothing outlives the request.
    const ac = new AbortController();
    const signal = ac.signal;
    const client = req.signal;
    const onAbort = (e: Event) => ac.abort((e.target as AbortSignal).reason);
    if (gate.signal.aborted) ac.abort(gate.signal.reason);
    else if (client.aborted) ac.abort(client.reason);
    else {
      if (gate !== UNGATED) gate.signal.addEventListener("abort", onAbort, { once: true });
      client.addEventListener("abort", onAbort, { once: true });
    }
    // The server aborts `req.signal` only for requests whose body came with their head
    // (src/http/disconnect.ts): the others' connections are watched while they run.
    const unwatch = gate === UNGATED ? undefined : deps.clientWatch?.watch(
      info,
      () => ac.abort(new DOMException("the client went away", "AbortError")),
    );
    const claims = session.claims;
    return {
      who: claims
        ? { role: claims.role, claims, signal, requestId: rid }
        : { role: cfg.pg.query.anonymous_role, claims: null, signal, requestId: rid },
      anonymous: !claims,
      setCookie: session.setCookie,
      unwatch,
    };
  };
  const recording = metricsRecorded(cfg);
  /**
   * Adds the session cookie and the request id to a response (copying one whose headers are
   * immutable), counts it and writes the access line. Returns the response to send.
   */
  const finishRequest = (
    res: Response,
    t: {
      t0: number;
      rid: string;
      kind: PathKind;
      method: string;
      path: string;
      setCookie: string | null;
      role: string | undefined;
    },
  ): Response => {
    if (t.setCookie) res.headers.append("set-cookie", t.setCookie);
    try {
      res.headers.set("x-request-id", t.rid);
    } catch {
      // Immutable headers (e.g. Response.redirect): copy the response to add ours.
      res = new Response(res.body, res);
      res.headers.set("x-request-id", t.rid);
    }
    const ms = performance.now() - t.t0;
    if (recording) observeRequest(t.kind, res.status, ms / 1000);
    log.info("{method} {path} {status} {duration_ms} ms {role} {request_id}", {
      method: t.method,
      path: t.path,
      kind: t.kind,
      status: res.status,
      duration_ms: Math.round(ms * 100) / 100,
      role: t.role,
      request_id: t.rid,
    });
    return res;
  };

  app.use("*", async (c, next) => {
    const t0 = performance.now();
    const rid = requestId(c.req.header("x-request-id"));
    c.set("requestId", rid);
    c.set("kind", pathKind(c.req.method, c.req.path));
    // Health is never held by a reload or a drain (an orchestrator must always get its answer).
    const gate = c.req.path.startsWith("/svc/health") ? UNGATED : await runtime.enter();
    c.set("anonymous", true);
    c.set("setCookie", null);
    let unwatch: (() => void) | undefined;
    try {
      const id = await identify(c.req.raw, rid, gate, c.env as Deno.ServeHandlerInfo | undefined);
      unwatch = id.unwatch;
      c.set("setCookie", id.setCookie);
      c.set("who", id.who);
      c.set("anonymous", id.anonymous);
      try {
        // A token naming the connecting role would run as the authenticator itself.
        if (!id.anonymous) checkAssumable(id.who.role, runtime.state?.schema.currentUser);
        await next();
      } catch (e) {
        // Thrown past the handlers (not found): answer here so the access line has the status.
        c.res = onError(e as Error, c.get("anonymous"));
      }
    } finally {
      gate.leave();
      const res = c.res;
      // A streamed answer's statements run on: its connection stays watched until it is sent.
      if (unwatch && !isStreamed(res)) unwatch();
      const out = finishRequest(res, {
        t0,
        rid,
        kind: c.get("kind"),
        method: c.req.method,
        path: c.req.path,
        setCookie: c.get("setCookie"),
        role: c.get("who")?.role,
      });
      if (out !== res) {
        c.res = undefined;
        c.res = out;
      }
    }
  });

  // Declared routes, then middleware ahead of /svc and static files (docs/routes.md).
  const routes = routeHandler({ cfg, db, sessions, hooks: deps.routeHooks });
  /** Whether declared routes or middleware may apply to a path. */
  const routed = (state: AppState | null, path: string): state is AppState =>
    state !== null &&
    (state.routes.routes.length > 0 || state.routes.middleware.length > 0) &&
    path !== "/auth" && !path.startsWith("/auth/") && !path.startsWith("/svc/health");
  /** A declared route's answer, or the answer of middleware ahead of the path; null: neither. */
  const routeOrAhead = async (
    state: AppState,
    call: { request: Request; who: RequestRole; anonymous: boolean },
  ) => {
    const route = await routes.route(state, call);
    if (route) return { done: route, route: true };
    const done = await routes.ahead(state, call);
    return done ? { done, route: false } : null;
  };
  app.use("*", async (c, next) => {
    const state = runtime.state;
    if (!routed(state, c.req.path)) return await next();
    const call = { request: c.req.raw, who: c.get("who"), anonymous: c.get("anonymous") };
    const answer = await routeOrAhead(state, call);
    if (!answer) return await next();
    if (answer.route) c.set("kind", "route");
    const done = answer.done;
    if (done.session) c.set("setCookie", null);
    return done.response;
  });
  app.onError((e, c) => onError(e, c.get("anonymous")));
  function onError(e: Error, anonymous: boolean | undefined): Response {
    if (!(e instanceof SvcError) && !(e as { code?: string }).code) {
      log.error("unhandled error: {error}", { error: (e as Error).stack ?? String(e) });
    }
    observeDbError((e as { code?: unknown }).code);
    return errorResponse(e, errCtx(anonymous ?? true));
  }

  // Health never waits for the request pool: live needs no database, ready asks through the
  // probe's own connection within 1 s. A pool whose every connection is overdue (leased past the
  // statement timeout without progress: wedged until the lease deadline closes them) is not ready.
  app.get("/svc/health/live", (c) => c.json({ status: "ok" }));
  const ready = async (c: Context<Env>) => {
    const cluster = deps.cluster;
    const pool = cluster ? await cluster.poolStats() : db.stats();
    const wedged = pool.overdue > 0 && pool.overdue >= pool.size;
    const ok = runtime.state !== null && !wedged && await deps.health.ready();
    return c.json(
      {
        status: ok ? "ok" : "unavailable",
        loaded: runtime.state !== null,
        pool,
        ...(cluster ? { workers: cluster.count } : {}),
      },
      ok ? 200 : 503,
    );
  };
  app.get("/svc/health/ready", ready);
  app.get("/svc/health", ready);

  /** The state and role for a query request, enforcing anonymous-access rules. */
  const svcContext = (anonymous: boolean, who: RequestRole): SvcContext => {
    const state = runtime.state;
    if (!state) throw new SvcError("PG_UNAVAILABLE", "the database is not available yet");
    checkRole(state, who, anonymous);
    return { cfg, db, state, who };
  };

  app.get("/svc/database.json", async (c) => {
    const ctx = svcContext(c.get("anonymous"), c.get("who"));
    const schema = ctx.state.schema;
    const visible = await db.transaction(ctx.who, (tx) => visibleTo(tx, ...schemaOids(schema)));
    return c.json(
      databaseJson(
        schema,
        ctx.who.role,
        ctx.state.wellknown.list(),
        routeInfo(ctx.state.routes),
        visible,
      ),
    );
  });

  if (cfg.http.typescript.enable) {
    app.get("/svc/database.ts", (c) => {
      const ctx = svcContext(c.get("anonymous"), c.get("who"));
      const url = new URL(c.req.url);
      return databaseTsResponse(cfg, ctx.state, ctx.who.role, url, c.req.header("if-none-match"));
    });
  }
  // With workers the supervisor writes the helper once per load.
  if (cfg.typescript.helper_path && !deps.cluster) {
    runtime.hooks.push(helperPathHook(cfg, cfg.typescript.helper_path));
  }

  app.post("/svc", (c) => handlePost(svcContext(c.get("anonymous"), c.get("who")), c.req.raw));
  app.get(
    "/svc",
    (c) => handleGet(svcContext(c.get("anonymous"), c.get("who")), new URL(c.req.url)),
  );
  app.all("/svc", (c) =>
    errorResponse(
      new SvcError("QUERY_METHOD_NOT_ALLOWED", "use GET or POST on /svc"),
      errCtx(c.get("anonymous") ?? true),
      { allow: "GET, HEAD, POST" },
    ));

  // Single sign-on (src/sso/): the callback's own session cookie replaces a renewal.
  app.all("/auth/*", async (c) => {
    if (!deps.sso) throw new SvcError("HTTP_NOT_FOUND", "not found");
    const out = await deps.sso.handle(c.req.raw, c.get("who"), c.get("anonymous"));
    if (out.sessionCookieSet) c.set("setCookie", null);
    return out.response;
  });
  if (metricsOnMain(cfg)) {
    app.get("/svc/metrics", () => metricsResponse(deps.cluster?.metricsText));
  }
  if (cfg.http.playground.enable) {
    app.get("/svc/playground", () => playgroundResponse());
  }

  app.notFound(async (c) => {
    const file = await serveStatic(statics, c.req.raw);
    if (file) return file;
    throw new SvcError("HTTP_NOT_FOUND", "not found");
  });

  // GET and POST /svc directly: the steps of the middleware above (surface, access, routes and
  // middleware ahead of /svc) and of the handlers, in the same order, without Hono's router,
  // context and middleware chain. Every other request (HEAD, OPTIONS, /svc/…) goes through Hono.
  const direct = async (
    req: Request,
    method: "GET" | "POST",
    info: Deno.ServeHandlerInfo | undefined,
  ): Promise<Response> => {
    const path = "/svc";
    const early = surfaceAnswer(cfg, req, path);
    if (early) return early;
    const t0 = performance.now();
    const rid = requestId(req.headers.get("x-request-id"));
    let kind = pathKind(method, path);
    const gate = await runtime.enter();
    let anonymous = true;
    let setCookie: string | null = null;
    let who: RequestRole | undefined;
    let unwatch: (() => void) | undefined;
    let res: Response;
    try {
      const id = await identify(req, rid, gate, info);
      ({ who, anonymous, setCookie, unwatch } = id);
      if (!anonymous) checkAssumable(who.role, runtime.state?.schema.currentUser);
      const state = runtime.state;
      const answer = routed(state, path)
        ? await routeOrAhead(state, { request: req, who, anonymous })
        : null;
      if (answer?.route) kind = "route";
      const done = answer?.done;
      if (done) {
        if (done.session) setCookie = null;
        res = done.response;
      } else {
        const ctx = svcContext(anonymous, who);
        res = method === "POST"
          ? await handlePost(ctx, req)
          : await handleGet(ctx, new URL(req.url));
      }
    } catch (e) {
      res = onError(e as Error, anonymous);
    } finally {
      gate.leave();
    }
    if (unwatch && !isStreamed(res)) unwatch();
    res = finishRequest(res, { t0, rid, kind, method, path, setCookie, role: who?.role });
    return surfaceDecorate(cfg, req, path, res);
  };
  const viaHono = app.fetch;
  app.fetch = (req, env, executionCtx) => {
    const method = req.method;
    if ((method === "POST" || method === "GET") && isSvcUrl(req.url)) {
      return direct(req, method, env as Deno.ServeHandlerInfo | undefined);
    }
    return viaHono(req, env, executionCtx);
  };
  return app;
}

/** Whether a request URL's path is exactly `/svc` (a query string may follow). */
export function isSvcUrl(url: string): boolean {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0 || !url.startsWith("/svc", start)) return false;
  const end = start + 4;
  return end === url.length || url.charCodeAt(end) === 63; // "?"
}
