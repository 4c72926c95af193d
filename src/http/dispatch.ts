/**
 * The fourth step of every request (src/http/server.ts): the one dispatch table. In order:
 * declared routes and the middleware ahead of a path (src/http/routes/; never for `/auth…` and
 * `/svc/health…`), the fixed paths (`/svc`, `/svc/health…`, `/svc/database.json`,
 * `/svc/database.ts`, `/svc/metrics`, `/svc/playground`, `/auth…`), then static files; anything
 * else is 404 HTTP_NOT_FOUND. HEAD is answered by a fixed path's GET handler.
 *
 * @module
 */
import type { ReadTargets } from "../db/replicas.ts";
import type { Config } from "../config/load.ts";
import type { Database } from "../db/pool.ts";
import { transaction } from "../db/run_as.ts";
import type { HealthProbe } from "../db/health.ts";
import type { Sessions } from "../auth/session.ts";
import { checkRole, type RequestRole } from "../auth/roles.ts";
import { SvcError } from "../svc_error.ts";
import type { PathKind } from "../observe/access.ts";
import type { Runtime } from "../state/runtime.ts";
import { routeInfo } from "../state/route_table.ts";
import { databaseJson } from "../client/database_json.ts";
import { databaseTsResponse } from "../client/endpoint.ts";
import { schemaOids, View, visibleTo } from "../client/visible.ts";
import { wellKnownUsable } from "../wellknown/usable.ts";
import type { Sso } from "../sso/endpoints.ts";
import { errorResponse } from "./error_response.ts";
import { metricsOnMain, metricsResponse } from "./metrics_endpoint.ts";
import { playgroundResponse } from "./playground.ts";
import { routeHandler } from "./routes/handle.ts";
import type { RouteHooks } from "./routes/request.ts";
import { isStaticFile, serveStatic, staticDirs } from "./static.ts";
import { handleGet, handlePost, queryContext, type SvcContext } from "./svc_endpoint.ts";
import { BodyBudget, ReceiveBudget } from "../request/body_budget.ts";
import type { PlainAnswer } from "./plain_answer.ts";
import type { PoolStats } from "../db/pool.ts";

/** `Allow` of a fixed path (but /svc, which answers every method) and of a static file. */
const GET_ONLY = "GET, HEAD";

/** A request being dispatched; handlers may set `kind` and clear `setCookie`. */
export interface Call {
  req: Request;
  /** The request's method (HEAD included). */
  method: string;
  /** The decoded path. */
  path: string;
  who: RequestRole;
  anonymous: boolean;
  /** The access log's and metrics' path kind (a declared route sets "route"). */
  kind: PathKind;
  /** The session renewal to send; null once an answer carries its own session cookie. */
  setCookie: string | null;
  /** Set when the answer itself set or cleared the session cookie (a route's or middleware's `jwt`). */
  sessionAnswer: boolean;
}

/** What a worker asks its supervisor for (src/process/). */
export interface Cluster {
  /** Number of workers. */
  count: number;
  /** Pool figures summed over every worker. */
  poolStats(): Promise<PoolStats>;
  /** The Prometheus text of every worker and the supervisor, aggregated. */
  metricsText(): Promise<string>;
}

/** What the dispatch table needs. */
export interface DispatchDeps {
  cfg: Config;
  db: Database;
  runtime: Runtime;
  sessions: Sessions;
  health: HealthProbe;
  /** Template rendering and multipart decoding for declared routes (optional). */
  routeHooks?: RouteHooks;
  /** Single sign-on endpoints under /auth/ (src/sso/endpoints.ts). */
  sso?: Sso;
  /** Set when this server is one worker of several: health and metrics cover every worker. */
  cluster?: Cluster;
  /** Read replicas (`pg.read_uri`): where reads run (src/db/replicas.ts). */
  reads?: ReadTargets;
}

/** A handler's answer: a Response, or a {@link PlainAnswer} the server makes one. */
export type Answer = Response | PlainAnswer;

type Handler = (call: Call) => Answer | Promise<Answer>;

/**
 * The dispatch of a configuration: the request's answer, or its promise (throws a failure, or
 * rejects with it).
 */
export function dispatcher(deps: DispatchDeps): (call: Call) => Answer | Promise<Answer> {
  const { cfg, db, runtime } = deps;
  const statics = staticDirs(cfg.http.static.path);
  const bodies = new BodyBudget(
    cfg.http.body_budget,
    new ReceiveBudget(cfg.http.receive_budget),
  );
  const routes = routeHandler({
    cfg,
    db,
    sessions: deps.sessions,
    hooks: deps.routeHooks,
    reads: deps.reads,
    bodies,
  });

  /** The state and role for a request acting as its role, enforcing anonymous-access rules. */
  const svcContext = (call: Call): SvcContext => {
    const state = runtime.state;
    if (!state) throw new SvcError("PG_UNAVAILABLE", "the database is not available yet");
    checkRole(state, call.who, call.anonymous);
    const reads = deps.reads;
    const read = reads ? () => reads.forRead(call.req.headers, call.who.claims) : undefined;
    return queryContext(cfg, db, state, call.who, read);
  };

  // Health never waits for the request pool: live needs no database, ready asks through the
  // probe's own connection within 1 s. A pool whose every connection is overdue (leased past the
  // statement timeout without progress: wedged until the lease deadline closes them) is not ready.
  const ready: Handler = async () => {
    const cluster = deps.cluster;
    const pool = cluster ? await cluster.poolStats() : db.stats();
    const wedged = pool.overdue > 0 && pool.overdue >= pool.size;
    const ok = runtime.state !== null && !wedged && await deps.health.ready();
    return Response.json(
      {
        status: ok ? "ok" : "unavailable",
        loaded: runtime.state !== null,
        pool,
        ...(cluster ? { workers: cluster.count } : {}),
        // Informative: reads fall back to the primary, so a replica down never fails ready.
        ...(deps.reads ? { replicas: deps.reads.health() } : {}),
      },
      { status: ok ? 200 : 503 },
    );
  };

  /** Fixed paths → method (HEAD: its GET) → handler; `*`: any other method. */
  const fixed = new Map<string, Record<string, Handler>>();
  fixed.set("/svc", {
    POST: (call) => handlePost(svcContext(call), call.req, bodies),
    GET: (call) => handleGet(svcContext(call), new URL(call.req.url)),
    "*": (call) =>
      errorResponse(
        new SvcError("QUERY_METHOD_NOT_ALLOWED", "use GET or POST on /svc"),
        { dev: cfg.dev, anonymous: call.anonymous },
        { allow: "GET, HEAD, POST" },
      ),
  });
  fixed.set("/svc/health/live", { GET: () => Response.json({ status: "ok" }) });
  fixed.set("/svc/health/ready", { GET: ready });
  fixed.set("/svc/health", { GET: ready });
  fixed.set("/svc/database.json", {
    GET: async (call) => {
      const ctx = svcContext(call);
      const schema = ctx.state.schema;
      const on = ctx.read?.() ?? db;
      const visible = await transaction(on, ctx.who, (tx) => visibleTo(tx, ...schemaOids(schema)));
      // Only the well-known queries the role may run (src/wellknown/usable.ts).
      const can = new View(schema, visible);
      const wk = ctx.state.wellknown;
      return Response.json(
        databaseJson(
          schema,
          visible,
          wk.list().filter((w) => wellKnownUsable(schema, wk.get(w.name).node, can)),
          routeInfo(ctx.state.routes),
        ),
      );
    },
  });
  if (cfg.http.typescript.enable) {
    fixed.set("/svc/database.ts", {
      GET: async (call) => {
        const ctx = svcContext(call);
        const url = new URL(call.req.url);
        const etag = call.req.headers.get("if-none-match") ?? undefined;
        // What the role may use, asked of PostgreSQL as for database.json (src/client/visible.ts).
        const on = ctx.read?.() ?? db;
        const schema = ctx.state.schema;
        const visible = await transaction(
          on,
          ctx.who,
          (tx) => visibleTo(tx, ...schemaOids(schema)),
        );
        return databaseTsResponse(cfg, ctx.state, visible, url, etag);
      },
    });
  }
  if (metricsOnMain(cfg)) {
    fixed.set("/svc/metrics", { GET: () => metricsResponse(deps.cluster?.metricsText) });
  }
  if (cfg.http.playground.enable) fixed.set("/svc/playground", { GET: playgroundResponse });

  // Single sign-on (src/sso/): the callback's own session cookie replaces a renewal.
  const auth: Handler = async (call) => {
    if (!deps.sso) throw new SvcError("HTTP_NOT_FOUND", "not found");
    const out = await deps.sso.handle(call.req, call.who, call.anonymous);
    if (out.sessionCookieSet) call.setCookie = null;
    return out.response;
  };

  /** The fixed paths, then static files; anything else is 404. */
  const fixedOrStatic = (call: Call): Answer | Promise<Answer> => {
    const methods = fixed.get(call.path);
    if (methods) {
      const handler = methods[call.method === "HEAD" ? "GET" : call.method] ?? methods["*"];
      if (handler) return handler(call);
      return notAllowed(call, GET_ONLY);
    }
    return staticOr404(call);
  };

  /** 405 HTTP_METHOD_NOT_ALLOWED with `Allow` (a known path asked with another method). */
  const notAllowed = (call: Call, allow: string): Answer =>
    errorResponse(
      new SvcError("HTTP_METHOD_NOT_ALLOWED", `${call.method} is not allowed here; use ${allow}`),
      { dev: cfg.dev, anonymous: call.anonymous },
      { allow },
    );

  const staticOr404 = async (call: Call): Promise<Answer> => {
    const file = await serveStatic(statics, call.req);
    if (file) return file;
    if (call.method !== "GET" && call.method !== "HEAD" && await isStaticFile(statics, call.req)) {
      return notAllowed(call, GET_ONLY);
    }
    throw new SvcError("HTTP_NOT_FOUND", "not found");
  };

  /** Declared routes, then middleware ahead of /svc and static files (docs/routes.md). */
  const routed = async (call: Call, state: NonNullable<Runtime["state"]>): Promise<Answer> => {
    const request = { request: call.req, who: call.who, anonymous: call.anonymous };
    const route = await routes.route(state, request);
    if (route) call.kind = "route";
    const done = route ?? await routes.ahead(state, request);
    if (done) {
      if (done.session) {
        call.setCookie = null;
        call.sessionAnswer = true;
      }
      return done.response;
    }
    return await fixedOrStatic(call);
  };

  // Not an async function: a fixed path's handler is called at once and its answer (or promise)
  // returned as it is, one promise less per request; the caller awaits it, and catches what a
  // handler throws synchronously alike.
  return (call) => {
    const path = call.path;
    const isAuth = path === "/auth" || path.startsWith("/auth/");
    const state = runtime.state;
    if (
      state !== null && !isAuth && !path.startsWith("/svc/health") &&
      (state.routes.routes.length > 0 || state.routes.middleware.length > 0)
    ) {
      return routed(call, state);
    }
    if (isAuth) return auth(call);
    return fixedOrStatic(call);
  };
}
