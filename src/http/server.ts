/**
 * The HTTP application (Hono on Deno.serve): session resolution and access log around every
 * request, the /svc endpoints, health and database.json. Routes, static files and SSO plug in
 * here as they land.
 */
import { Hono } from "hono";
import type { Config } from "../config/load.ts";
import type { Database, RequestRole } from "../db/pool.ts";
import type { Sessions } from "../auth/session.ts";
import { SvcError } from "../errors.ts";
import type { Runtime } from "../runtime.ts";
import { log } from "../log.ts";
import { errorResponse } from "./errors.ts";
import { handleGet, handlePost, type SvcContext } from "./svc.ts";
import { databaseJson } from "../typescript/json.ts";
import { httpSurface } from "./surface.ts";
import { serveStatic, staticDirs } from "./static.ts";
import { Templates } from "./templates.ts";

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
}

/** Builds the Hono application. */
export function createApp(deps: AppDeps): Hono<Env> {
  const { cfg, db, runtime, sessions } = deps;
  const app = new Hono<Env>();
  const errCtx = (anonymous: boolean) => ({ dev: cfg.dev, anonymous });
  // HTTP surface (static files, CORS, CSP, limits): src/http/{surface,static,cors,csp}.ts.
  const statics = staticDirs(cfg.http.static.path);
  const templates = new Templates(cfg.http.templates.path, cfg.dev);
  runtime.hooks.push(() => templates.reload());
  app.use("*", httpSurface(cfg));

  // Access log, hold-during-reload, session resolution.
  app.use("*", async (c, next) => {
    const t0 = performance.now();
    const gate = await runtime.enter();
    c.set("anonymous", true);
    c.set("setCookie", null);
    try {
      const session = await sessions.resolve(c.req.header("cookie") ?? null);
      c.set("setCookie", session.setCookie);
      if (session.claims) {
        c.set("who", { role: session.claims.role, claims: session.claims, signal: gate.signal });
        c.set("anonymous", false);
      } else {
        c.set("who", { role: cfg.pg.query.anonymous_role, claims: null, signal: gate.signal });
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

  app.onError((e, c) => {
    if (!(e instanceof SvcError) && !(e as { code?: string }).code) {
      log.error("unhandled error: {error}", { error: (e as Error).stack ?? String(e) });
    }
    return errorResponse(e, errCtx(c.get("anonymous") ?? true));
  });

  app.get("/svc/health", async (c) => {
    const ok = runtime.state !== null && await db.ping();
    return c.json({ status: ok ? "ok" : "unavailable" }, ok ? 200 : 503);
  });

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
    return c.json(databaseJson(ctx.state.schema, ctx.who.role, ctx.state.wellknown.list()));
  });

  app.post("/svc", (c) => handlePost(svcContext(c.get("anonymous"), c.get("who")), c.req.raw));
  app.get(
    "/svc",
    (c) => handleGet(svcContext(c.get("anonymous"), c.get("who")), new URL(c.req.url)),
  );
  app.all("/svc", () => {
    throw new SvcError("QUERY_METHOD_NOT_ALLOWED", "use GET or POST on /svc");
  });

  app.notFound(async (c) => {
    const file = await serveStatic(statics, c.req.raw);
    if (file) return file;
    throw new SvcError("HTTP_NOT_FOUND", "not found");
  });
  return app;
}
