/**
 * The SQL of one route request (pure builders) and its execution. Middleware and the route are
 * one statement each, pipelined with `begin`, the role switch and `commit` on a reserved
 * connection: one round trip. A middleware that terminates sets the transaction-local
 * `svc.route_stop`; every later statement is guarded by it (a CASE whose untaken branch is never
 * evaluated), so nothing after a terminating middleware runs.
 */
import { isExactNumber } from "../../formats/json.ts";
import { SvcError } from "../../svc_error.ts";
import type { Database } from "../../db/pool.ts";
import { pipeline } from "../../db/run_as.ts";
import type { RequestRole } from "../../auth/roles.ts";
import { callNotation, type Func, type FunctionArg, ident } from "../../db/schema.ts";
import type { Route } from "../../state/route_table.ts";
import { UNSAFE_REDIRECT_SQL, unsafeRedirect } from "./response.ts";

/** A statement with its bind parameters. */
export interface Statement {
  sql: string;
  params: unknown[];
}

const STOP = "coalesce(current_setting('svc.route_stop', true), '') = ''";

function fnName(fn: Func): string {
  return `${ident(fn.schema)}.${ident(fn.name)}`;
}

/** The marker of a jwt minted by a function `http.functions.allowed_auth` does not match. */
const DENY = "svc:jwt-not-allowed";
/** The marker of an unsafe `redirect` (docs/routes.md). */
const UNSAFE = "svc:unsafe-redirect";
/**
 * Fails the statement when the resp's redirect, or a `Location` in its headers (any case, alone
 * or in an array), is unsafe, so its transaction rolls back.
 */
const UNSAFE_CHECK = `, 'unsafe', case when jsonb_typeof(r.resp) = 'object' and ((` +
  `jsonb_typeof(r.resp->'redirect') = 'string' and ` +
  UNSAFE_REDIRECT_SQL.replaceAll("$v", "(r.resp->>'redirect')") +
  `) or (jsonb_typeof(r.resp->'headers') = 'object' and exists (select from ` +
  `jsonb_each(r.resp->'headers') h(k, v), jsonb_array_elements(case jsonb_typeof(h.v) ` +
  `when 'array' then h.v else jsonb_build_array(h.v) end) l(x) where lower(h.k) = 'location' ` +
  `and jsonb_typeof(l.x) = 'string' and ` +
  UNSAFE_REDIRECT_SQL.replaceAll("$v", "(l.x #>> '{}')") +
  `))) then ('${UNSAFE}' || left(r.resp::text, 0))::int end`;

/**
 * The statement calling a full-control function (middleware or route) with `req`. A middleware
 * whose resp is not null sets `svc.route_stop`. When the function may not mint a session
 * (`allowJwt` false), a resp carrying a non-null `jwt` fails the statement (a cast error carrying
 * a marker, turned into AUTH_JWT_NOT_ALLOWED), so the transaction rolls back with commit still
 * pipelined. `jwt: null` (logout, revocation) is never refused.
 * An unsafe `redirect` fails it the same way (HTTP_UNSAFE_REDIRECT).
 */
export function envelopeStatement(
  fn: Func,
  req: unknown,
  middleware: boolean,
  allowJwt = true,
): Statement {
  const stop = middleware
    ? `, 'stop', set_config('svc.route_stop', case when r.resp is null or r.resp = 'null'::jsonb then '' else '1' end, true)`
    : "";
  const deny = allowJwt
    ? ""
    : `, 'deny', case when jsonb_typeof(r.resp) = 'object' and jsonb_typeof(r.resp->'jwt') <> 'null' then ('${DENY}' || left(r.resp::text, 0))::int end`;
  const call =
    `(select json_build_object('resp', r.resp, 'content', r.content${stop}${deny}${UNSAFE_CHECK}) ` +
    `from ${fnName(fn)}($1::text::jsonb) r limit 1)`;
  return {
    sql: `select (case when ${STOP} then ${call} end)::text`,
    params: [JSON.stringify(req)],
  };
}

/** Whether an error is the marker of a refused jwt. */
function isDenied(e: unknown): boolean {
  return (e as { code?: string }).code === "22P02" &&
    String((e as Error).message).includes(DENY);
}

/** Whether an error is the marker of an unsafe redirect. */
function isUnsafe(e: unknown): boolean {
  return (e as { code?: string }).code === "22P02" &&
    String((e as Error).message).includes(UNSAFE);
}

/** Whether an error is PostgreSQL refusing an object for an argument that takes no row. */
function isNotRowType(e: unknown): boolean {
  return (e as { code?: string }).code === "42804" &&
    String((e as Error).message).includes("jsonb_populate_record");
}

/** Where a simple route's argument values come from, in precedence order. */
export interface ArgSources {
  params: Record<string, string>;
  query: Record<string, string | string[]>;
  /** The decoded JSON (or form) body object, or null. */
  body: Record<string, unknown> | null;
}

/** How one argument is passed: text cast to the type, or JSON converted to it. */
function argExpr(arg: FunctionArg, n: number, value: unknown): { expr: string; param: string } {
  const t = arg.type;
  if (typeof value === "string") return { expr: `$${n}::text::${t}`, param: value };
  // A number a double cannot hold, kept exact (src/formats/json.ts): its text, as written.
  if (isExactNumber(value) && !isJson(arg)) {
    return { expr: `$${n}::text::${t}`, param: value.rawJSON };
  }
  const json = JSON.stringify(value);
  if (isJson(arg)) return { expr: `$${n}::text::jsonb::${t}`, param: json };
  if (Array.isArray(value) && t.endsWith("[]")) {
    return {
      expr:
        `(select coalesce(array_agg(x), '{}') from jsonb_array_elements_text($${n}::text::jsonb) x)::${t}`,
      param: json,
    };
  }
  if (value !== null && typeof value === "object") {
    return { expr: `jsonb_populate_record(null::${t}, $${n}::text::jsonb)`, param: json };
  }
  return { expr: `($${n}::text::jsonb #>> '{}')::${t}`, param: json };
}

/** Whether an argument takes a JSON value as it is (an array or object included). */
function isJson(arg: FunctionArg): boolean {
  return arg.type === "jsonb" || arg.type === "json";
}

/**
 * 400 for several values given to an argument that takes one: a repeated query-string key (or a
 * repeated form key, an array in a JSON body) where the argument is not an array (nor, from a
 * body, json), named rather than left to PostgreSQL's cast of svc's own SQL.
 */
function oneValue(fn: Func, arg: FunctionArg, from: "query" | "body"): SvcError {
  const name = arg.name!;
  const what = `argument "${name}" of ${fn.schema}.${fn.name} takes one value (${arg.type})`;
  return from === "query"
    ? new SvcError("QUERY_INVALID", `query-string key "${name}" is repeated: ${what}`, {
      details: { argument: name },
    })
    : new SvcError("QUERY_INVALID", `${what}, not an array`, {
      details: { argument: name, pointer: `/${name}` },
    });
}

/**
 * The statement calling a simple route: named arguments from path params, then the query string,
 * then the body, each cast by PostgreSQL; an absent argument with a default is left out; a missing
 * required one is 400 naming it; a VARIADIC one takes the whole array (a VARIADIC function with
 * arguments left to their defaults is called by position: {@link callNotation}). A repeated
 * query-string key is an array: an array argument takes its values as elements, any other is 400
 * naming it (an array in the body likewise, json and jsonb arguments taking it as it is). Unknown
 * query-string keys are ignored; unknown body keys are 400. The result is one JSON text: a set →
 * array, else the value.
 */
export function simpleStatement(fn: Func, src: ArgSources): Statement {
  const named = new Set(fn.inArgs.map((a) => a.name).filter((n) => n));
  if (src.body) {
    for (const k of Object.keys(src.body)) {
      if (!named.has(k)) {
        throw new SvcError("QUERY_INVALID", `${fn.schema}.${fn.name} has no argument "${k}"`, {
          details: { pointer: `/${k}` },
        });
      }
    }
  }
  const given: { arg: FunctionArg; value: unknown }[] = [];
  fn.inArgs.forEach((arg, i) => {
    const name = arg.name;
    let value: unknown = undefined;
    if (name) {
      if (Object.hasOwn(src.params, name)) value = src.params[name];
      else if (Object.hasOwn(src.query, name)) {
        value = src.query[name];
        if (Array.isArray(value) && !arg.type.endsWith("[]")) throw oneValue(fn, arg, "query");
      } else if (src.body && Object.hasOwn(src.body, name)) {
        value = src.body[name];
        if (Array.isArray(value) && !arg.type.endsWith("[]") && !isJson(arg)) {
          throw oneValue(fn, arg, "body");
        }
      }
    }
    if (value === undefined) {
      if (arg.hasDefault) return;
      throw new SvcError(
        "QUERY_INVALID",
        `missing required argument "${name ?? `$${i + 1}`}" of ${fn.schema}.${fn.name}`,
        { details: { argument: name ?? `$${i + 1}` } },
      );
    }
    given.push({ arg, value });
  });
  // A VARIADIC function with arguments left to their defaults is called by position.
  const how = callNotation(fn, new Set(given.map((g) => g.arg.name!)));
  if (how.kind === "impossible") {
    throw new SvcError("QUERY_INVALID", how.reason, { details: { arguments: how.missing } });
  }
  const parts: string[] = [];
  const params: unknown[] = [];
  for (const { arg, value } of given) {
    // A VARIADIC argument (always the last one) is passed whole: `VARIADIC "xs" => <array>`.
    const label = `${arg.mode === "variadic" ? "VARIADIC " : ""}${
      how.kind === "named" ? `${ident(arg.name!)} => ` : ""
    }`;
    if (value === null) {
      parts.push(`${label}null::${arg.type}`);
      continue;
    }
    const { expr, param } = argExpr(arg, params.length + 1, value);
    params.push(param);
    parts.push(`${label}${expr}`);
  }
  const call = `${fnName(fn)}(${parts.join(", ")})`;
  let sql: string;
  if (fn.returns.type === "void" && !fn.returns.set) sql = `select null::text from ${call}`;
  // `r.*`: the call's whole row (or its one value); a bare `r` would name a result column "r".
  else if (fn.returns.set) sql = `select coalesce(json_agg(r.*), '[]')::text from ${call} r`;
  else sql = `select to_json(r.*)::text from ${call} r`;
  return { sql, params };
}

/** Wraps a statement so it only runs when no middleware terminated. */
export function guarded(s: Statement): Statement {
  return { sql: `select (case when ${STOP} then (${s.sql}) end)::text`, params: s.params };
}

/** What one middleware or route statement answered. */
export interface Envelope {
  resp: unknown;
  content: unknown;
}

/** The outcome of a request's chain. */
export type ChainResult =
  | { kind: "middleware"; by: Route; envelope: Envelope }
  | { kind: "route"; envelope: Envelope }
  | { kind: "simple"; json: string | null }
  | { kind: "pass" };

/** What to run: the middleware chain, then (optionally) the route statement. */
export interface ChainPlan {
  middleware: { route: Route; statement: Statement }[];
  route: { route: Route; statement: Statement } | null;
}

function parseEnvelope(text: string | null): Envelope & { stop?: string } | null {
  if (text === null) return null;
  return JSON.parse(text);
}

/**
 * Runs a chain as `who` in one transaction on a reserved connection: begin, role switch, every
 * statement and commit, all pipelined: one round trip.
 */
export async function runChain(
  db: Database,
  who: RequestRole,
  plan: ChainPlan,
): Promise<ChainResult> {
  const statements = [
    ...plan.middleware.map((m) => m.statement),
    ...(plan.route
      ? [plan.middleware.length ? guarded(plan.route.statement) : plan.route.statement]
      : []),
  ];
  let rows: Record<string, unknown>[][];
  try {
    rows = await pipeline(db, who, statements);
  } catch (e) {
    const i = (e as { statementIndex?: number } | null)?.statementIndex ?? -1;
    if (i >= 0 && isDenied(e)) {
      const r = i < plan.middleware.length ? plan.middleware[i].route : plan.route!.route;
      throw jwtNotAllowed(r.id);
    }
    if (i >= 0 && isUnsafe(e)) throw unsafeRedirect();
    if (i >= 0 && isNotRowType(e)) {
      // PostgreSQL refused svc's conversion when it parsed the statement: nothing ran.
      throw new SvcError(
        "QUERY_INVALID",
        "a JSON object was given for an argument whose type is not a row (composite) type: " +
          "send that value as a string or a number",
      );
    }
    throw e;
  }
  const texts = rows.map((r) => {
    const row = r[0] as Record<string, string | null> | undefined;
    return row ? Object.values(row)[0] ?? null : null;
  });
  return interpret(plan, texts);
}

function interpret(plan: ChainPlan, texts: (string | null)[]): ChainResult {
  for (let i = 0; i < plan.middleware.length; i++) {
    const env = parseEnvelope(texts[i]);
    if (env && env.resp !== null) {
      return { kind: "middleware", by: plan.middleware[i].route, envelope: env };
    }
  }
  if (!plan.route) return { kind: "pass" };
  const text = texts[plan.middleware.length];
  if (plan.route.route.fullControl) {
    return { kind: "route", envelope: parseEnvelope(text) ?? { resp: null, content: null } };
  }
  return { kind: "simple", json: text };
}

/** AUTH_JWT_NOT_ALLOWED for a function not matched by `http.functions.allowed_auth`. */
export function jwtNotAllowed(id: string): SvcError {
  return new SvcError(
    "AUTH_JWT_NOT_ALLOWED",
    `${id} may not set the session (http.functions.allowed_auth)`,
  );
}
