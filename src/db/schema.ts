/**
 * The Schema model: what introspection found, after the blacklist. Pure data plus lookups; the
 * compiler, the write planner, routes and the generators read it, never the catalogs.
 */

/** A column of a relation (or a field of a composite type). */
export interface Column {
  name: string;
  /** `format_type` text, e.g. `integer`, `character varying(160)`, `text[]`, `public.mood`. */
  type: string;
  /** Type OID. */
  typeOid: number;
  /** pg_type.typcategory: N numeric, S string, B boolean, D datetime, A array, C composite, E enum, U user… */
  category: string;
  /** For array columns, the element type's format_type; else null. */
  elementType: string | null;
  /** For composite-typed columns, the type OID (key of Schema.composites); else null. */
  compositeOid: number | null;
  nullable: boolean;
  hasDefault: boolean;
  identity: null | "always" | "by_default";
  generated: boolean;
  /** No other way to receive a value: not nullable, no default, not identity or generated. */
  mandatory: boolean;
  comment: string | null;
}

/** A foreign key, seen from the relation holding it. */
export interface ForeignKey {
  name: string;
  schema: string;
  relation: string;
  columns: string[];
  references: { schema: string; relation: string; columns: string[] };
}

/** Kinds of relations. */
export type RelationKind =
  | "table"
  | "view"
  | "materialized_view"
  | "partitioned_table"
  | "foreign_table";

/** A computed field: a function taking one row of the relation. */
export interface ComputedField {
  name: string;
  schema: string;
  /** The function's OID. */
  oid: number;
  type: string;
  set: boolean;
}

/** A table, view, materialized view, partitioned or foreign table. */
export interface Relation {
  schema: string;
  name: string;
  oid: number;
  kind: RelationKind;
  comment: string | null;
  columns: Column[];
  columnMap: Map<string, Column>;
  primaryKey: string[];
  unique: string[][];
  /** Foreign keys this relation holds (outgoing). */
  foreignKeys: ForeignKey[];
  /** Foreign keys other relations hold that point at this one (incoming). */
  referencedBy: ForeignKey[];
  insertable: boolean;
  updatable: boolean;
  deletable: boolean;
  computedFields: Map<string, ComputedField>;
  /** Roles (direct grantees, "" = PUBLIC) holding SELECT, and the owner. */
  selectGrantees: Set<string>;
  owner: string;
  /** Row-level security is enabled (`pg_class.relrowsecurity`). */
  rowSecurity: boolean;
  /** It has a trigger of its own (`pg_trigger` with `not tgisinternal`: not a foreign key's). */
  userTriggers: boolean;
  /** It has rules (`pg_class.relhasrules`; a view: rules besides the `_RETURN` that makes it one). */
  hasRules: boolean;
  /**
   * A view: whether it leaves rows of its relation out (a `WHERE`, `LIMIT` or `OFFSET` of its own
   * or of a view under it; src/db/view_keys.ts); undefined when svc cannot tell.
   */
  filtersRows?: boolean;
  /**
   * A view each of whose rows is one row of one table, written through as PostgreSQL writes
   * auto-updatable views (no trigger or rule of its own): its columns carry the facts of the
   * table's columns they show (nullable, default, identity, generated), and a column that shows
   * none is read-only (`generated`). src/db/view_keys.ts.
   */
  columnsFromTable?: boolean;
}

/** A function argument. */
export interface FunctionArg {
  name: string | null;
  type: string;
  typeOid: number;
  mode: "in" | "out" | "inout" | "variadic" | "table";
  hasDefault: boolean;
}

/** A database function. */
export interface Func {
  schema: string;
  name: string;
  oid: number;
  /** Every argument, including OUT/TABLE ones. */
  args: FunctionArg[];
  /** Input arguments only (in, inout, variadic), in order. */
  inArgs: FunctionArg[];
  returns: {
    type: string;
    typeOid: number;
    set: boolean;
    /** When the function returns rows of a relation (or composite type): its columns. */
    columns: Column[] | null;
    /** Relation whose row type is returned, if any. */
    relation: { schema: string; name: string } | null;
  };
  volatility: "immutable" | "stable" | "volatile";
  comment: string | null;
  owner: string;
  /** Direct EXECUTE grantees ("" = PUBLIC). */
  executeGrantees: Set<string>;
}

/** A composite type (standalone or a relation's row type). */
export interface CompositeType {
  oid: number;
  schema: string;
  name: string;
  fields: Column[];
}

/** An enum type. */
export interface EnumType {
  schema: string;
  name: string;
  labels: string[];
}

/** A type a cast may target. */
export interface CastTarget {
  /** The schema the type lives in. */
  schema: string;
  /** Its SQL spelling (schema-qualified and quoted outside pg_catalog). */
  sql: string;
  /**
   * For a relation's row type (or a domain or range over one): the relation's OID. The type is a
   * target only for a role that may SELECT the relation, asked of PostgreSQL per request.
   */
  relation?: number;
}

/** The introspected database, after the blacklist. */
export interface Schema {
  relations: Map<string, Relation>;
  /** Functions by `schema.name` (overloads share a key). */
  functions: Map<string, Func[]>;
  composites: Map<number, CompositeType>;
  enums: EnumType[];
  /** Every known type name usable in a cast (format_type text and plain names). */
  typeNames: Set<string>;
  /**
   * Type names a cast may target (the data types of pg_catalog, the types of other schemas and
   * the row types of relations; never `oid`, `reg*`, `aclitem` or catalog-internal types).
   * Absent: every name of typeNames.
   */
  castTargets?: Map<string, CastTarget>;
  /** Text search configuration names (plain and schema-qualified). */
  tsConfigs?: Set<string>;
  /**
   * Roles the connecting role can switch to (`pg_has_role(session_user, role, 'MEMBER')`).
   * Absent: every role.
   */
  switchableRoles?: Set<string>;
  /** Every role name. */
  roles: Set<string>;
  /** role → roles it is a member of (transitively, inheriting), including itself and PUBLIC (""). */
  memberOf: Map<string, Set<string>>;
  /** Schemas with USAGE per role set: schema → direct grantees ("" = PUBLIC) plus owner. */
  schemaUsage: Map<string, Set<string>>;
  /** Every introspected schema name. */
  schemas: string[];
  /** The connecting user. */
  currentUser: string;
  /** What the connecting user may beyond grants: `SUPERUSER`, `BYPASSRLS` (none: empty). */
  currentUserPowers?: string[];
  /** Server version number (e.g. 150018). */
  serverVersion: number;
  /** Milliseconds introspection took. */
  durationMs: number;
}

/** Key of a relation or function in the model's maps. */
export function qualified(schema: string, name: string): string {
  return `${schema}.${name}`;
}

/**
 * How a call of a function naming the input arguments `given` is written. PostgreSQL matches a
 * named call of a VARIADIC function only when every argument is given (the variadic one as
 * `VARIADIC "xs" => …`); when some are left to their defaults, the given ones must go by position,
 * which needs them to be the leading ones (`missing`: those before the last given one that are
 * not given, `$n` when unnamed; `reason`: the message saying so).
 */
export type CallNotation =
  | { kind: "named" }
  | { kind: "positional" }
  | { kind: "impossible"; missing: string[]; reason: string };

/** The {@link CallNotation} of a call of `fn` naming the input arguments `given`. */
export function callNotation(fn: Func, given: ReadonlySet<string>): CallNotation {
  const last = fn.inArgs.at(-1);
  if (last?.mode !== "variadic" || given.size === 0) return { kind: "named" };
  const at = fn.inArgs.map((a, i) => (a.name !== null && given.has(a.name) ? i : -1));
  if (at.every((i) => i !== -1)) return { kind: "named" };
  const end = Math.max(...at) + 1;
  const missing = fn.inArgs.slice(0, end).flatMap((a, i) =>
    at[i] === -1 ? [a.name ?? `$${i + 1}`] : []
  );
  if (missing.length === 0) return { kind: "positional" };
  const list = missing.map((m) => `"${m}"`).join(", ");
  return {
    kind: "impossible",
    missing,
    reason: `${fn.schema}.${fn.name} is VARIADIC: PostgreSQL calls it by name only with every ` +
      `argument given, else takes the given ones by position, so give ${list} too`,
  };
}

/** Quotes an identifier for SQL. */
export function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes); it truncates longer ones. */
export const MAX_IDENTIFIER_BYTES = 63;

const utf8 = new TextEncoder();

/** The length of `name` as PostgreSQL's identifier limit counts it: bytes of UTF-8. */
export function identifierBytes(name: string): number {
  return utf8.encode(name).length;
}

/** Finds a relation by name; schema defaults to the first match in `public`, then any schema. */
export function findRelation(schema: Schema, name: string, ns?: string): Relation | undefined {
  if (ns !== undefined) return schema.relations.get(qualified(ns, name));
  return schema.relations.get(qualified("public", name)) ??
    [...schema.relations.values()].find((r) => r.name === name);
}

/** Finds functions by name; schema defaults to `public`, then any schema. */
export function findFunctions(schema: Schema, name: string, ns?: string): Func[] {
  if (ns !== undefined) return schema.functions.get(qualified(ns, name)) ?? [];
  const pub = schema.functions.get(qualified("public", name));
  if (pub) return pub;
  for (const [k, v] of schema.functions) if (k.endsWith(`.${name}`) && v[0].name === name) return v;
  return [];
}

/** The roles whose privileges `role` holds (itself, inherited memberships, PUBLIC). */
export function effectiveRoles(schema: Schema, role: string): Set<string> {
  return schema.memberOf.get(role) ?? new Set([role, ""]);
}

/** Whether `role` may execute a function; `ignorePublic` drops grants to PUBLIC. */
export function canExecute(schema: Schema, role: string, fn: Func, ignorePublic = false): boolean {
  const roles = effectiveRoles(schema, role);
  if (roles.has(fn.owner)) return true;
  const usage = schema.schemaUsage.get(fn.schema);
  if (usage && ![...usage].some((g) => roles.has(g))) return false;
  for (const g of fn.executeGrantees) {
    if (g === "" && ignorePublic) continue;
    if (roles.has(g)) return true;
  }
  return false;
}

/** Whether `role` holds USAGE on a schema (directly, inherited or PUBLIC), or owns it. */
export function hasSchemaUsage(schema: Schema, role: string, ns: string): boolean {
  const usage = schema.schemaUsage.get(ns);
  if (!usage) return false;
  const roles = effectiveRoles(schema, role);
  return [...usage].some((g) => roles.has(g));
}
