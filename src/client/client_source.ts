/**
 * The fixed part of the generated database.ts: the query-following types (result and write
 * types derived from a query object), the builders, the Querier, `configure` and `SvcError`.
 * The schema-derived part (interfaces `Relations`, `Functions`, `WellKnowns` and the runtime
 * `META` table) is appended by generate.ts. No imports; runs on fetch only.
 */

/** The `"-name"` order term's type: a template literal type, which String.raw cannot hold. */
const DESC = "`-${N}`";

/** TypeScript source of the fixed part (kept free of backticks and placeholders but DESC's). */
export const CLIENT_SOURCE = String.raw`
/** Any JSON value. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

// ---------------------------------------------------------------------------------------------
// Schema shapes (filled in by the generated interfaces below)

/** Cardinality of a join: incoming (array), outgoing NOT NULL (object), outgoing nullable. */
export type Card = "many" | "one" | "maybe";

/** A relation-like entry: result row, write row, mandatory columns, computed fields, joins. */
export interface Ent {
  row: object;
  w: object;
  req: string;
  cf: object;
  j: object;
}

declare const SVC: unique symbol;

/** A join created by a join builder: target relation, cardinality, FK columns, its query. */
export interface JoinSpec<T extends string, C extends Card, F extends string, Q> {
  readonly [SVC]: { t: T; c: C; f: F; q: Q };
}
type AnyJoin = JoinSpec<string, Card, string, unknown>;

/** Write modes. */
export type WriteMode = "insert" | "upsert" | "merge" | "merge-new" | "readonly";

type Op =
  | "and" | "or" | "not" | "=" | "<>" | "<" | "<=" | ">" | ">=" | "is_distinct_from"
  | "is_not_distinct_from" | "like" | "ilike" | "not_like" | "not_ilike" | "~" | "~*" | "in"
  | "not_in" | "between" | "is_null" | "is_not_null" | "arr" | "@>" | "<@" | "&&" | "fts"
  | "+" | "-" | "*" | "/" | "||";
type Cmp =
  | "and" | "or" | "not" | "=" | "<>" | "<" | "<=" | ">" | ">=" | "is_distinct_from"
  | "is_not_distinct_from" | "like" | "ilike" | "not_like" | "not_ilike" | "~" | "~*" | "in"
  | "not_in" | "between" | "is_null" | "is_not_null" | "@>" | "<@" | "&&" | "fts";
type AggFn = "count" | "sum" | "avg" | "min" | "max" | "bool_and" | "bool_or" | "array_agg";

/**
 * An expression over names N (columns, computed fields) and join aliases J; X holds the forms
 * that reach into joins ([".", alias, column] and ["agg", fn, [alias, column?]]), checked
 * against each joined relation.
 */
export type Expr<N extends string, J extends string, X = never> =
  | N
  | number
  | boolean
  | null
  | readonly [string]
  | X
  | readonly [".", N, string]
  | readonly ["cast", Expr<N, J, X>, string]
  | readonly ["$param", string, string?]
  | readonly ["->" | "->>", Expr<N, J, X>, readonly [string] | number]
  | readonly [Op, ...Expr<N, J, X>[]];

type OrderTerm<N extends string, J extends string, X> =
  | Expr<N, J, X>
  | ${DESC}
  | readonly ["asc" | "desc", Expr<N, J, X>, ("nulls_first" | "nulls_last")?];

/** The join-reaching expression forms allowed by a query's joins. */
export type Refs<J> = {
  [A in keyof J & string]: J[A] extends JoinSpec<infer T, infer C, string, unknown>
    ? C extends "many" ? readonly [
        "agg",
        AggFn,
        readonly [A] | readonly [A, (keyof Rel<T>["row"] & string) | readonly unknown[]],
        unknown?,
      ]
    : readonly [".", A, keyof Rel<T>["row"] & string]
    : never;
}[keyof J & string];

type Cols<E extends Ent> = keyof E["row"] & string;
type Names<E extends Ent> = Cols<E> | (keyof E["cf"] & string);
/** Aliases of the joins of a query. */
export type JKeys<Q> = Q extends { join: infer J } ? keyof J & string : never;

type SelectOf<E extends Ent, J extends string, X> =
  | "full"
  | "own"
  | readonly (Names<E> | J | "own")[]
  | {
    readonly [k: string]:
      | J
      | Expr<Names<E>, J, X>
      | readonly ["get", Expr<Names<E>, J, X>]
      | readonly ["set", Cols<E>];
  };

/** A query on entry E whose join aliases are J. */
export interface QueryFor<E extends Ent, J extends string, X = never> {
  schema?: string;
  alias?: string;
  where?: Expr<Names<E>, J, X>;
  join?: { readonly [alias: string]: AnyJoin };
  select?: SelectOf<E, J, X>;
  order_by?: readonly OrderTerm<Names<E>, J, X>[];
  distinct_on?: readonly Expr<Names<E>, J, X>[];
  limit?: number;
  offset?: number;
  write_mode?: WriteMode;
  on_conflict?: readonly Cols<E>[];
}

type Rel<T> = T extends keyof Relations ? Relations[T] : never;
type JoinDefOf<E extends Ent, K> = K extends keyof E["j"] ? E["j"][K] : never;

/** The join builder scoped to entry E: one method per relation reachable through a foreign key. */
export type Joins<E extends Ent> = {
  [K in keyof E["j"]]: JoinDefOf<E, K> extends { t: infer T extends string; c: infer C extends Card; f: infer F extends string }
    ? <const Q extends QueryFor<Rel<T>, JKeys<Q>, Refs<JoinsOf<Q>>> = Record<never, never>>(
      query?: Q | ((join: Joins<Rel<T>>) => Q),
    ) => JoinSpec<T, C, F, Q>
    : never;
};

// ---------------------------------------------------------------------------------------------
// Result types

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type JoinsOf<Q> = Q extends { join: infer J } ? J : Record<never, never>;

type JoinRes<S> = S extends JoinSpec<infer T, infer C, string, infer Q>
  ? C extends "many" ? Result<Rel<T>, Q>[]
  : C extends "maybe" ? Result<Rel<T>, Q> | null
  : Result<Rel<T>, Q>
  : never;

type Full<E extends Ent, J> = E["row"] & { -readonly [K in keyof J]: JoinRes<J[K]> };

type NameT<E extends Ent, J, K> = K extends keyof J ? JoinRes<J[K]>
  : K extends keyof E["row"] ? E["row"][K]
  : K extends keyof E["cf"] ? E["cf"][K]
  : never;

type DotT<J, A, C> = A extends keyof J
  ? J[A] extends JoinSpec<infer T, infer Cd, string, unknown>
    ? C extends keyof Rel<T>["row"]
      ? Cd extends "one" ? Rel<T>["row"][C] : Cd extends "maybe" ? Rel<T>["row"][C] | null : never
    : never
  : never
  : Json;

type AggT<J, F, A, X> = F extends "count" ? number
  : F extends "sum" | "avg" ? number | null
  : F extends "bool_and" | "bool_or" ? boolean | null
  : A extends keyof J
    ? J[A] extends JoinSpec<infer T, string & Card, string, unknown>
      ? X extends keyof Rel<T>["row"]
        ? F extends "array_agg" ? Rel<T>["row"][X][] | null : Rel<T>["row"][X] | null
      : Json
    : Json
  : Json;

type CastT<T> = T extends "integer" | "int" | "int4" | "smallint" | "int2" | "bigint" | "int8" | "numeric" | "real" | "double precision" | "float8" | "float4" ? number | null
  : T extends "text" | "varchar" | "date" | "timestamp" | "timestamptz" | "uuid" ? string | null
  : T extends "boolean" | "bool" ? boolean | null
  : Json;

type ValT<E extends Ent, J, V> = V extends string ? NameT<E, J, V>
  : V extends number ? number
  : V extends boolean ? boolean
  : V extends null ? null
  : V extends readonly [string] ? string
  : V extends readonly [".", infer A, infer C] ? DotT<J, A, C>
  : V extends readonly ["agg", infer F, readonly [infer A, ...infer R], ...unknown[]]
    ? AggT<J, F, A, R extends readonly [infer X] ? X : never>
  : V extends readonly ["cast", unknown, infer T] ? CastT<T>
  : V extends readonly ["->>", ...unknown[]] ? string | null
  : V extends readonly [infer O, ...unknown[]]
    ? O extends Cmp ? boolean | null
    : O extends "+" | "-" | "*" | "/" ? number | null
    : O extends "||" ? string | null
    : Json
  : Json;

type SelRes<E extends Ent, J, S> = S extends "full" ? Full<E, J>
  : S extends "own" ? E["row"]
  : S extends readonly (infer X)[]
    ? ("own" extends X ? E["row"] : unknown) & {
      -readonly [K in X & string as K extends "own" ? never : K]: NameT<E, J, K>;
    }
  : {
    -readonly [K in keyof S as S[K] extends readonly ["set", unknown] ? never : K]: ValT<
      E,
      J,
      S[K] extends readonly ["get", infer V] ? V : S[K]
    >;
  };

/** The row type a query on entry E returns. */
export type Result<E extends Ent, Q> = Simplify<
  Q extends { select: infer S } ? SelRes<E, JoinsOf<Q>, S> : Full<E, JoinsOf<Q>>
>;

// ---------------------------------------------------------------------------------------------
// Write types

type OutFk<J> = {
  [K in keyof J]: J[K] extends JoinSpec<string, "one" | "maybe", infer F, unknown> ? F : never;
}[keyof J];

type JoinW<S> = S extends JoinSpec<infer T, infer C, infer F, infer Q>
  ? C extends "many" ? readonly WriteRowOf<Rel<T>, Q, F>[]
  : C extends "maybe" ? WriteRowOf<Rel<T>, Q, never> | null
  : WriteRowOf<Rel<T>, Q, never>
  : never;

type ColsW<E extends Ent, C, O> =
  & { [K in C & keyof E["w"] as K extends E["req"] ? (K extends O ? never : K) : never]: E["w"][K] }
  & { [K in C & keyof E["w"] as K extends E["req"] ? (K extends O ? K : never) : K]?: E["w"][K] };

type JoinsW<J, X> = { [K in X & keyof J]?: JoinW<J[K]> };

type ObjCol<V> = V extends readonly ["set", infer C] ? C : V extends string ? V : never;
type ReqKey<E extends Ent, V, O> = [ObjCol<V>] extends [infer C]
  ? [C] extends [never] ? "none" : [C] extends [keyof E["w"]] ? [C] extends [E["req"]] ? [C] extends [O] ? "opt" : "req" : "opt"
    : "none"
  : "none";

type SelW<E extends Ent, J, S, O> = S extends "full" ? ColsW<E, keyof E["w"], O> & JoinsW<J, keyof J>
  : S extends "own" ? ColsW<E, keyof E["w"], O>
  : S extends readonly (infer X)[]
    ? ColsW<E, "own" extends X ? keyof E["w"] : X, O> & JoinsW<J, X>
  : 
    & { -readonly [K in keyof S as ReqKey<E, S[K], O> extends "req" ? K : never]: E["w"][ObjCol<S[K]> & keyof E["w"]] }
    & { -readonly [K in keyof S as ReqKey<E, S[K], O> extends "opt" ? K : never]?: E["w"][ObjCol<S[K]> & keyof E["w"]] }
    & { -readonly [K in keyof S as S[K] extends keyof J ? K : never]?: JoinW<J[S[K] & keyof J]> };

/** The row type a write through a query on entry E accepts (O: columns the server fills in). */
export type WriteRowOf<E extends Ent, Q, O = never> = Simplify<
  Q extends { select: infer S } ? SelW<E, JoinsOf<Q>, S, O | OutFk<JoinsOf<Q>>>
    : ColsW<E, keyof E["w"], O | OutFk<JoinsOf<Q>>> & JoinsW<JoinsOf<Q>, keyof JoinsOf<Q>>
>;

// ---------------------------------------------------------------------------------------------
// Querier, options, errors

/** Per-relation write counts of a write (ComplexResult.stats). */
export interface Stat {
  path: string[];
  table: string;
  submitted: number;
  inserted: number;
  updated: number;
  deleted: number;
}

/** SQL text run for a path (ComplexResult.sql). */
export interface SqlResult {
  path: string[];
  select: string;
}

/** The ComplexResult envelope. */
export interface ComplexResult<T> {
  result?: T[];
  count?: number;
  /** With count: the request's offset (0 when unset). */
  offset?: number;
  /** The request's limit, when set. */
  limit?: number;
  stats?: Stat[];
  sql?: SqlResult[];
  query_plan?: Json[];
  /** Flags the server has switched off (their keys then come back empty). */
  warnings?: string[];
}

/** Flags of a read. Any of count, sql, query_plan turns the answer into a ComplexResult. */
export interface ReadOptions {
  count?: boolean;
  sql?: boolean;
  query_plan?: boolean;
  returns?: "none" | "results";
}

/** Options of a write: root write mode, rollback and ComplexQuery flags. */
export interface WriteOptions {
  mode?: WriteMode;
  rollback?: boolean;
  stats?: boolean;
  sql?: boolean;
  query_plan?: boolean;
  returns?: "none" | "results";
}

type Envelope<O> = O extends { count: true } | { stats: true } | { sql: true } | { query_plan: true }
  ? true
  : false;

/** A prepared query: read it with get(), write rows through it with write(). */
export interface Querier<T, W> {
  /** The JSON query tree sent to POST /svc. */
  readonly query: { [key: string]: unknown };
  /** Reads the rows. */
  get(): Promise<T[]>;
  /** Reads with ComplexQuery flags. */
  get<const O extends ReadOptions>(opts: O): Promise<Envelope<O> extends true ? ComplexResult<T> : T[]>;
  /** Writes rows (one transaction); answers the read-back of the query's select. */
  write(data: readonly W[]): Promise<T[]>;
  /** Writes with a mode, rollback or ComplexQuery flags. */
  write<const O extends WriteOptions>(
    data: readonly W[],
    opts: O,
  ): Promise<Envelope<O> extends true ? ComplexResult<T> : T[]>;
}

/** An error answered by svc (or a network failure, code HTTP_FETCH_FAILED, status 0). */
export class SvcError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: unknown;
  readonly hint: string | undefined;
  /** Creates an error from svc's error body. */
  constructor(code: string, status: number, message: string, details?: unknown, hint?: string) {
    super(message);
    this.name = "SvcError";
    this.code = code;
    this.status = status;
    this.details = details;
    this.hint = hint;
  }
}

/** Client settings. */
export interface ClientConfig {
  /** Origin (and path prefix) of svc, e.g. "http://localhost:8080"; "" = same origin. */
  baseUrl: string;
  fetch: typeof fetch;
  headers: Record<string, string>;
  credentials: RequestCredentials | undefined;
}

const settings: ClientConfig = {
  baseUrl: defaultBase(),
  fetch: (input, init) => globalThis.fetch(input, init),
  headers: {},
  credentials: "include",
};

function defaultBase(): string {
  try {
    const u = new URL(import.meta.url);
    if (u.protocol === "http:" || u.protocol === "https:") return u.origin;
  } catch { /* not a URL */ }
  return "";
}

/** Changes client settings (base URL, fetch, extra headers, credentials mode). */
export function configure(c: Partial<ClientConfig>): void {
  Object.assign(settings, c);
}

/** Sends one POST /svc body; parses the answer or throws SvcError. */
export async function send(body: unknown): Promise<unknown> {
  let res: Response;
  try {
    res = await settings.fetch(settings.baseUrl.replace(/\/$/, "") + "/svc", {
      method: "POST",
      headers: { "content-type": "application/json", ...settings.headers },
      body: JSON.stringify(body),
      ...(settings.credentials ? { credentials: settings.credentials } : {}),
    });
  } catch (e) {
    throw new SvcError("HTTP_FETCH_FAILED", 0, String((e as Error)?.message ?? e));
  }
  const text = await res.text();
  if (!res.ok) {
    let b: { code?: string; message?: string; details?: unknown; hint?: string } = {};
    try {
      b = JSON.parse(text);
    } catch { /* not JSON */ }
    throw new SvcError(
      b.code ?? res.headers.get("x-svc-errorcode") ?? "HTTP_" + res.status,
      res.status,
      b.message ?? text,
      b.details,
      b.hint,
    );
  }
  return text === "" ? null : JSON.parse(text);
}

type Tree = { [key: string]: unknown };
/**
 * How a function argument is sent (by its PostgreSQL type): 0 as it is, "j" as JSON text, ["a", e]
 * as an array literal, ["c", fields] as a record literal. Absent: 0.
 */
type Enc = 0 | "j" | readonly ["a", Enc] | readonly ["c", readonly (readonly [string, Enc])[]];
type Meta = {
  r: { [key: string]: [string, string, { [join: string]: [string, { [c: string]: string }] }] };
  f: { [key: string]: [string, string, string | null, { [arg: string]: Enc }?] };
};

const joinCache: { [key: string]: { [join: string]: (q?: unknown) => Tree } } = {};

function joinBuilder(key: string): { [join: string]: (q?: unknown) => Tree } {
  let b = joinCache[key];
  if (!b) {
    b = {};
    for (const [alias, [target, on]] of Object.entries(META.r[key]?.[2] ?? {})) {
      b[alias] = (q?: unknown) => ({ ...tree(target, q), on });
    }
    joinCache[key] = b;
  }
  return b;
}

function resolve(key: string, q: unknown): Tree {
  const v = typeof q === "function" ? q(joinBuilder(key)) : q;
  return (v ?? {}) as Tree;
}

function tree(key: string, q: unknown): Tree {
  const m = Object.hasOwn(META.r, key) ? META.r[key] : undefined;
  if (!m) throw new SvcError("QUERY_UNKNOWN_RELATION", 404, "unknown relation '" + key + "'");
  return { relation: m[1], schema: m[0], ...resolve(key, q) };
}

function querier(query: Tree): Querier<never, never> {
  const flags = (o: object | undefined) => o && Object.keys(o).some((k) => k !== "mode");
  return {
    query,
    get(opts?: ReadOptions) {
      return send(opts && flags(opts) ? { query, ...opts } : query);
    },
    write(data: readonly unknown[], opts?: WriteOptions) {
      const { mode, ...rest } = opts ?? {};
      const q = mode ? { ...query, write_mode: mode } : query;
      return send({ query: q, data, ...rest });
    },
  } as unknown as Querier<never, never>;
}

/** A read/write of a relation; query is a query object or a callback receiving the join builder. */
export function relation<
  K extends keyof Relations & string,
  const Q extends QueryFor<Relations[K], JKeys<Q>, Refs<JoinsOf<Q>>> = Record<never, never>,
>(
  name: K,
  query?: Q | ((join: Joins<Relations[K]>) => Q),
): Querier<Result<Relations[K], Q>, WriteRowOf<Relations[K], Q>> {
  return querier(tree(name, query));
}

/** A read of a function's rows (named arguments); query as for relation(). */
export function func<
  K extends keyof Functions & string,
  const Q extends QueryFor<Functions[K]["e"], JKeys<Q>, Refs<JoinsOf<Q>>> = Record<never, never>,
>(
  name: K,
  args: Functions[K]["args"],
  query?: Q | ((join: Joins<Functions[K]["e"]>) => Q),
): Querier<Result<Functions[K]["e"], Q>, WriteRowOf<Functions[K]["e"], Q>> {
  const m = Object.hasOwn(META.f, name) ? META.f[name] : undefined;
  if (!m) throw new SvcError("QUERY_UNKNOWN_RELATION", 404, "unknown function '" + name + "'");
  const q = typeof query === "function"
    ? (query as (j: unknown) => Q)(m[2] ? joinBuilder(m[2]) : {})
    : query;
  const values = argValues(args, m[3]);
  return querier({ function: m[1], schema: m[0], arguments: values, ...(q ?? {}) });
}

/**
 * A function's arguments as /svc reads values: a bare string there is a column name, so every
 * string goes as the literal ["…"]; JSON, arrays and records as the text their type reads.
 */
function argValues(args: unknown, enc: { [arg: string]: Enc } | undefined): unknown {
  if (Array.isArray(args)) return args.map((v) => argValue(v, 0));
  if (args === null || typeof args !== "object") return args;
  const out: [string, unknown][] = [];
  for (const [k, v] of Object.entries(args)) {
    const e = enc && Object.hasOwn(enc, k) ? enc[k] : undefined;
    if (v !== undefined) out.push([k, argValue(v, e ?? 0)]);
  }
  return Object.fromEntries(out);
}

/** One argument: null, a finite number or a boolean as it is; anything else as a literal. */
function argValue(v: unknown, e: Enc): unknown {
  if (v === null) return null;
  if (e === 0 && (typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v)))) {
    return v;
  }
  return [pgText(v, e)];
}

/** The text PostgreSQL's input function reads a value from (an array or record literal, JSON). */
function pgText(v: unknown, e: Enc): string {
  if (e === "j") return JSON.stringify(v);
  if (e !== 0 && e[0] === "a" && Array.isArray(v)) {
    const el = e[1];
    const item = (x: unknown): string =>
      x === null || x === undefined
        ? "NULL"
        : Array.isArray(x) && el !== "j"
        ? pgText(x, e)
        : quoted(pgText(x, el));
    return "{" + v.map(item).join(",") + "}";
  }
  if (e !== 0 && e[0] === "c" && v !== null && typeof v === "object" && !Array.isArray(v)) {
    const fields = e[1].map(([name, fe]) => {
      const x = Object.hasOwn(v, name) ? (v as Tree)[name] : null;
      return x === null || x === undefined ? "" : quoted(pgText(x, fe));
    });
    return "(" + fields.join(",") + ")";
  }
  if (typeof v === "string") return v;
  return v !== null && typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** A double-quoted element of an array or record literal. */
function quoted(s: string): string {
  return '"' + s.replace(/["\\]/g, "\\$&") + '"';
}

/** A well-known query with its typed parameters. */
export function wellknown<K extends keyof WellKnowns & string>(
  name: K,
  ...params: WellKnowns[K]["params"] extends Record<never, never>
    ? Partial<WellKnowns[K]["params"]> extends WellKnowns[K]["params"]
      ? [params?: WellKnowns[K]["params"]]
      : [params: WellKnowns[K]["params"]]
    : [params: WellKnowns[K]["params"]]
): Querier<WellKnowns[K]["row"], { [key: string]: unknown }> {
  return querier({ wellknown: name, params: params[0] ?? {} });
}
`;
