/**
 * The route request flow: match → access precheck (before the body is read) → `req` → the SQL
 * chain (middleware, route) in one round trip → response. Also the middleware that runs ahead of
 * `/svc` and static files (in a transaction of its own, just before the request proper).
 */
import { removeUploads } from "../uploads.ts";
import { isCrossSite } from "./cross_site.ts";
import { canAssume, roleInvalid } from "../../auth/roles.ts";
import type { Config } from "../../config/load.ts";
import type { Database } from "../../db/pool.ts";
import type { RequestRole } from "../../auth/roles.ts";
import type { Schema } from "../../db/schema.ts";
import type { Sessions } from "../../auth/session.ts";
import { SvcError } from "../../svc_error.ts";
import { errorResponse } from "../error_response.ts";
import type { Route, RouteTable } from "../../state/route_table.ts";
import { matchRoute, middlewareFor } from "./match.ts";
import {
  buildRequest,
  decodeReadBody,
  readBody,
  type RouteHooks,
  type RouteRequest,
} from "./request.ts";
import type { BodyBudget } from "../../request/body_budget.ts";
import {
  type ChainPlan,
  type ChainResult,
  envelopeStatement,
  runChain,
  simpleStatement,
  type Statement,
} from "./call.ts";
import { type Applied, buildResponse, mayAuth } from "./response.ts";
import { readOnlyFunctions, type ReadTargets } from "../../db/replicas.ts";

/** What the route flow needs from the server. */
export interface RouteDeps {
  cfg: Config;
  db: Database;
  sessions: Sessions;
  hooks?: RouteHooks;
  /** Read replicas: routes of STABLE/IMMUTABLE functions run there (src/db/replicas.ts). */
  reads?: ReadTargets;
  /**
   * The worker's budget of large bodies, shared with POST /svc: a route's large body is decoded
   * and its call run once it admits it (src/request/body_budget.ts).
   */
  bodies?: BodyBudget;
}

/** The live state a request reads (a subset of AppState). */
export interface RouteState {
  schema: Schema;
  routes: RouteTable;
  anonymousExists: boolean;
}

/** One request as the server resolved it. */
export interface RouteCall {
  request: Request;
  who: RequestRole;
  anonymous: boolean;
}

/** The request handler of declared routes and middleware. */
export interface RouteHandler {
  /** Answers a declared route (or its 405), or null when no route matches the path. */
  route(state: RouteState, call: RouteCall): Promise<Applied | null>;
  /**
   * Runs the middleware covering a path that is not a route (`/svc`, static files, 404): the
   * terminating middleware's response, or null to proceed.
   */
  ahead(state: RouteState, call: RouteCall): Promise<Applied | null>;
}

/** Creates the route handler for a configuration. */
export function routeHandler(deps: RouteDeps): RouteHandler {
  const { cfg, db, sessions } = deps;
  const hooks = deps.hooks ?? {};
  const allowedAuth = cfg.http.functions.allowed_auth
    ? new RegExp(cfg.http.functions.allowed_auth)
    : null;
  const applyBase = {
    sessions,
    sessionCookieName: cfg.jwt.cookie_name,
    cookiesMaxAge: cfg.http.cookies_max_age,
    allowedAuth,
    hooks,
  };

  /** Where a chain runs: a replica when every function in it is STABLE or IMMUTABLE. */
  const target = (call: RouteCall, plan: ChainPlan): Database => {
    const fns = plan.middleware.map((m) => m.route.fn);
    if (plan.route) fns.push(plan.route.route.fn);
    if (!deps.reads || !readOnlyFunctions(fns)) return db;
    return deps.reads.forRead(call.request.headers, call.who.claims);
  };

  const checkAccess = (state: RouteState, call: RouteCall, route: Route | null) => {
    if (call.anonymous) {
      if (!state.anonymousExists) {
        throw new SvcError("AUTH_ANONYMOUS_DISABLED", "anonymous access is disabled; log in first");
      }
      if (route && !route.anonymousReachable) {
        throw new SvcError(
          "AUTH_ROUTE_NOT_REACHABLE",
          "this route needs a session: the anonymous role holds no EXECUTE grant of its own on " +
            "its function (a grant to PUBLIC alone does not count: grant EXECUTE to the anonymous " +
            "role to open it; docs/routes.md, Reachability)",
        );
      }
    } else if (!canAssume(state.schema, call.who.role)) {
      throw roleInvalid(state.schema, call.who.role);
    }
  };

  const middlewarePlan = (chain: Route[], req: RouteRequest) =>
    chain.map((route) => ({
      route,
      statement: envelopeStatement(route.fn, req, true, mayAuth(allowedAuth, route.id)),
    }));

  // A HEAD answer is built as its GET's: the runtime sends its headers (the body's length
  // included) without the body.
  const respond = async (
    result: ChainResult,
    route: Route | null,
    request: Request,
  ): Promise<Applied | null> => {
    // Asked only of an answer minting a session.
    const crossSite = () =>
      isCrossSite(request, cfg.http.cors.allowed_origins, cfg.http.public_host);
    if (result.kind === "middleware") {
      return await buildResponse(result.envelope.resp, result.envelope.content, {
        ...applyBase,
        authId: result.by.id,
        crossSite,
      });
    }
    if (result.kind === "route") {
      return await buildResponse(result.envelope.resp, result.envelope.content, {
        ...applyBase,
        authId: route!.id,
        template: route!.template,
        crossSite,
      });
    }
    if (result.kind === "simple") {
      const fn = route!.fn;
      if (fn.returns.type === "void" && !fn.returns.set) {
        return { response: new Response(null, { status: 204 }), session: false };
      }
      return {
        response: new Response(result.json ?? "null", {
          status: 200,
          headers: { "content-type": "application/json" },
        }),
        session: false,
      };
    }
    return null;
  };

  return {
    async route(state, call) {
      const url = new URL(call.request.url);
      const m = matchRoute(state.routes, call.request.method, url.pathname);
      if (m.kind === "none") return null;
      if (m.kind === "method") {
        const err = new SvcError(
          "HTTP_METHOD_NOT_ALLOWED",
          `${call.request.method} is not allowed here; use ${m.allow.join(", ")}`,
        );
        return {
          response: errorResponse(err, { dev: cfg.dev, anonymous: call.anonymous }, {
            allow: m.allow.join(", "),
          }),
          session: false,
        };
      }
      const route = m.route;
      // The precheck: before a byte of the body is read.
      checkAccess(state, call, route);
      const req = buildRequest(call.request, url, m.params, call.who.claims, cfg.jwt.cookie_name);
      const body = await readBody(
        call.request,
        route,
        cfg.http.max_body_size,
        hooks,
        cfg.http.body_timeout * 1000,
        deps.bodies?.receiving,
      );
      const run = async (): Promise<Applied | null> => {
        req.body = decodeReadBody(body, cfg.http.max_json_depth);
        let statement: Statement;
        if (route.fullControl) {
          statement = envelopeStatement(route.fn, req, false, mayAuth(allowedAuth, route.id));
        } else {
          if (req.body !== null && (typeof req.body !== "object" || Array.isArray(req.body))) {
            throw new SvcError(
              "QUERY_INVALID",
              "the body of this route must be a JSON object of named arguments",
            );
          }
          statement = simpleStatement(route.fn, {
            params: m.params,
            query: req.query,
            body: req.body as Record<string, unknown> | null,
          });
        }
        const chain = middlewareFor(state.routes, url.pathname);
        const plan: ChainPlan = {
          middleware: middlewarePlan(chain, req),
          route: { route, statement },
        };
        // A request that fails, that a middleware ends, or whose answer is an error keeps none of
        // its streamed uploads (the files svc wrote for this body: src/http/uploads.ts): no one
        // else learns their paths.
        let applied: Applied | null;
        try {
          const result = await runChain(target(call, plan), call.who, plan);
          applied = await respond(result, route, call.request);
          if (result.kind === "middleware" || (applied?.response.status ?? 500) >= 400) {
            await removeUploads(req.body);
          }
        } catch (e) {
          await removeUploads(req.body);
          throw e;
        }
        return applied;
      };
      // A large body is decoded and called within the worker's budget, as POST /svc's are (a
      // body's decoded value and the call's parameter cost several times its bytes).
      if (!deps.bodies || !("bytes" in body)) return await run();
      const timeout = cfg.pg.query.statement_timeout;
      return await deps.bodies.run(
        body.bytes.length,
        timeout > 0 ? timeout : Infinity,
        call.request.signal,
        run,
      );
    },

    async ahead(state, call) {
      const url = new URL(call.request.url);
      const chain = middlewareFor(state.routes, url.pathname);
      if (chain.length === 0) return null;
      checkAccess(state, call, null);
      const req = buildRequest(call.request, url, {}, call.who.claims, cfg.jwt.cookie_name);
      const plan: ChainPlan = {
        middleware: middlewarePlan(chain, req),
        route: null,
      };
      const result = await runChain(target(call, plan), call.who, plan);
      return await respond(result, null, call.request);
    },
  };
}
