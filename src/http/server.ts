/**
 * The HTTP application (Hono on Deno.serve): session resolution and access log around every
 * request, the /svc endpoints, health and database.json. Routes, static files and SSO plug in
 * here as they land.
 */
import { type Context, Hono } from "hono";
import type { HealthProbe } from "../db/health.ts";
import type { Config } from "../config/load.ts";
import type { Database, RequestRole } from "../db/pool.ts";
import type { Sessions } from "../auth/session.ts";
import { SvcError } from "../errors.ts";
import type { Runtime } from "../runtime.ts";
import { log } from "../log.ts";
import { errorResponse } from "./errors.ts";
import { handleGet, handlePost, type SvcContext } from "./svc.ts";
import { databaseJson } from "../typescript/json.ts";
import { routeHandler } from "./routes/handle.ts";
import type { RouteHooks } from "./routes/request.ts";
import { routeInfo } from "./routes/declare.ts";
import { checkAssumable } from "../auth/assume.ts";

/** Per-request values shared between middleware and handlers. */
type Env = {
  Variables: {
    who: RequestRole;
    anonymous: boolean;
    setCookie: string | null;
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
}

/** Builds the Hono application. */
export function createApp(deps: AppDeps): Hono<Env> {
  const { cfg, db, runtime, sessions } = deps;
  const app = new Hono<Env>();
  const errCtx = (anonymous: boolean) => ({ dev: cfg.dev, anonymous });

  // Access log, hold-during-reload, session resolution.
  app.use("*", async (c, next) => {
    const t0 = performance.now();
    const gate = await runtime.enter();
    c.set("anonymous", true);
    c.set("setCookie", null);
    try {
      const session = await sessions.resolve(c.req.header("cookie") ?? null);
      c.set("setCookie", session.setCookie);
      // A client that goes away cancels its statement, as reload and shutdown do.
      const signal = AbortSignal.any([gate.signal, c.req.raw.signal]);
      if (session.claims) {
        checkAssumable(session.claims.role, runtime.state?.schema.currentUser);
        c.set("who", { role: session.claims.role, claims: session.claims, signal });
        c.set("anonymous", false);
      } else {
        c.set("who", { role: cfg.pg.query.anonymous_role, claims: null, signal });
      }
      await next();
    } finally {
      gate.leave();
      const setCookie = c.get("setCookie");
      if (setCookie && c.res) c.res.headers.append("set-cookie", setCookie);
      log.info("{method} {path} {status} {duration_ms} ms {role}", {
        method: c.req.method,
        path: c.req.path,
        status: c.res?.status,
        duration_ms: Math.round((performance.now() - t0) * 100) / 100,
        role: c.get("who")?.role,
      });
    }
  });

  // Declared routes, then middleware ahead of /svc and static files (DECISIONS.md §6).
  const routes = routeHandler({ cfg, db, sessions, hooks: deps.routeHooks });
  app.use("*", async (c, next) => {
    const state = runtime.state;
    const path = c.req.path;
    if (
      !state || (state.routes.routes.length === 0 && state.routes.middleware.length === 0) ||
      path === "/auth" || path.startsWith("/auth/") || path.startsWith("/svc/health")
    ) {
      return await next();
    }
    const call = { request: c.req.raw, who: c.get("who"), anonymous: c.get("anonymous") };
    const done = await routes.route(state, call) ?? await routes.ahead(state, call);
    if (!done) return await next();
    if (done.session) c.set("setCookie", null);
    return done.response;
  });

  app.onError((e, c) => {
    if (!(e instanceof SvcError) && !(e as { code?: string }).code) {
      log.error("unhandled error: {error}", { error: (e as Error).stack ?? String(e) });
    }
    return errorResponse(e, errCtx(c.get("anonymous") ?? true));
  });

  // Health never waits for the request pool: live needs no database, ready asks through the
  // probe's own connection within 1 s.
  app.get("/svc/health/live", (c) => c.json({ status: "ok" }));
  const ready = async (c: Context<Env>) => {
    const ok = runtime.state !== null && await deps.health.ready();
    return c.json(
      { status: ok ? "ok" : "unavailable", loaded: runtime.state !== null, pool: db.stats() },
      ok ? 200 : 503,
    );
  };
  app.get("/svc/health/ready", ready);
  app.get("/svc/health", ready);

  /** The state and role for a query request, enforcing anonymous-access rules. */
  const svcContext = (anonymous: boolean, who: RequestRole): SvcContext => {
    const state = runtime.state;
    if (!state) throw new SvcError("PG_UNAVAILABLE", "the database is not available yet");
    if (anonymous && !state.anonymousExists) {
      throw new SvcError("AUTH_ANONYMOUS_DISABLED", "anonymous access is disabled; log in first");
    }
    if (!anonymous && !state.schema.roles.has(who.role)) {
      throw new SvcError("AUTH_ROLE_INVALID", "the session's role cannot be used");
    }
    return { cfg, db, state, who };
  };

  app.get("/svc/database.json", (c) => {
    const ctx = svcContext(c.get("anonymous"), c.get("who"));
    return c.json(
      databaseJson(
        ctx.state.schema,
        ctx.who.role,
        ctx.state.wellknown.list(),
        routeInfo(ctx.state.routes),
      ),
    );
  });

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

  app.notFound(() => {
    throw new SvcError("HTTP_NOT_FOUND", "not found");
  });
  return app;
}
