/**
 * Introspection: a handful of catalog queries (never one per object) on one short-lived
 * connection, turned into the Schema model and filtered through the blacklist.
 */
import { Client } from "../pg/client.ts";
import type {
  CastTarget,
  Column,
  CompositeType,
  ComputedField,
  EnumType,
  ForeignKey,
  Func,
  FunctionArg,
  Relation,
  RelationKind,
  Schema,
} from "./schema.ts";
import { ident, qualified } from "./schema.ts";
import { Blacklist } from "./blacklist.ts";
import { type ViewOrigin, viewOrigins } from "./view_origins.ts";
import { deriveViewKeys, type TableForeignKey } from "./view_keys.ts";

const SYSTEM = `n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
  and n.nspname not like 'pg_temp_%' and n.nspname not like 'pg_toast_temp_%'`;

const Q_RELATIONS = `
select c.oid::int8 as oid, n.nspname as schema, c.relname as name, c.relkind as kind,
  obj_description(c.oid, 'pg_class') as comment, pg_get_userbyid(c.relowner) as owner,
  coalesce(c.relacl::text[], '{}') as acl,
  case when c.relkind in ('v','f') then pg_relation_is_updatable(c.oid, true) else 28 end as upd,
  c.relrowsecurity as rls,
  case when c.relkind = 'v'
    then exists (select from pg_rewrite w where w.ev_class = c.oid and w.rulename <> '_RETURN')
    else c.relhasrules end as rules,
  exists (select from pg_trigger g where g.tgrelid = c.oid and not g.tgisinternal) as triggers
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where c.relkind in ('r','v','m','p','f') and ${SYSTEM}`;

const Q_COLUMNS = `
select a.attrelid::int8 as rel, a.attnum::int as attnum, a.attname as name, format_type(a.atttypid, a.atttypmod) as type,
  a.atttypid::int8 as type_oid, t.typcategory as category, t.typtype as typtype,
  case when t.typcategory = 'A' then format_type(t.typelem, null) end as element_type,
  case when t.typtype = 'c' then a.atttypid::int8 end as composite_oid,
  not a.attnotnull as nullable, a.atthasdef as has_default, a.attidentity as identity,
  a.attgenerated as generated, col_description(a.attrelid, a.attnum) as comment
from pg_attribute a
join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
join pg_type t on t.oid = a.atttypid
where a.attnum > 0 and not a.attisdropped and c.relkind in ('r','v','m','p','f','c') and ${SYSTEM}
order by a.attrelid, a.attnum`;

const Q_CONSTRAINTS = `
select co.conname as name, co.contype as type, co.conrelid::int8 as rel, co.confrelid::int8 as frel,
  array(select a.attname from unnest(co.conkey) with ordinality k(n, o)
        join pg_attribute a on a.attrelid = co.conrelid and a.attnum = k.n order by k.o) as cols,
  array(select a.attname from unnest(co.confkey) with ordinality k(n, o)
        join pg_attribute a on a.attrelid = co.confrelid and a.attnum = k.n order by k.o) as fcols
from pg_constraint co join pg_namespace n on n.oid = co.connamespace
where co.contype in ('p','u','f') and ${SYSTEM} and co.conrelid <> 0
order by co.conrelid, co.conname`;

const Q_FUNCTIONS = `
select p.oid::int8 as oid, n.nspname as schema, p.proname as name,
  coalesce(p.proargnames, '{}') as arg_names,
  coalesce(p.proargmodes::text[], '{}') as arg_modes,
  array(select format_type(t, null) from unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) with ordinality u(t, o) order by o) as arg_types,
  array(select t::int8 from unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) with ordinality u(t, o) order by o) as arg_type_oids,
  p.pronargs as nargs, p.pronargdefaults as ndefaults,
  format_type(p.prorettype, null) as ret_type, p.prorettype::int8 as ret_oid, p.proretset as retset,
  rt.typrelid::int8 as ret_relid, p.provolatile as volatility,
  obj_description(p.oid, 'pg_proc') as comment, pg_get_userbyid(p.proowner) as owner,
  coalesce(p.proacl::text[], '{}') as acl
from pg_proc p join pg_namespace n on n.oid = p.pronamespace join pg_type rt on rt.oid = p.prorettype
where p.prokind = 'f' and ${SYSTEM}`;

const Q_TYPES = `
select t.oid::int8 as oid, n.nspname as schema, t.typname as name, t.typtype as typtype,
  t.typrelid::int8 as relid, format_type(t.oid, null) as formatted,
  case when t.typtype = 'd' then
      (select case when b.typcategory = 'A' then b.typelem else b.oid end from pg_type b
       where b.oid = t.typbasetype)
    when t.typtype in ('r', 'm') then
      (select r.rngsubtype from pg_range r where r.rngtypid = t.oid or r.rngmultitypid = t.oid)
  end::int8 as base,
  case when t.typtype = 'e' then array(select e.enumlabel::text from pg_enum e where e.enumtypid = t.oid order by e.enumsortorder) end as labels
from pg_type t join pg_namespace n on n.oid = t.typnamespace
where t.typtype in ('b','c','d','e','r','m') and t.typname not like '\\_%' and t.typisdefined
  and (n.nspname = 'pg_catalog' or (${SYSTEM}))`;

const Q_ROLES = `
select r.rolname as name, r.rolinherit as inherit,
  pg_has_role(session_user, r.oid, 'MEMBER') as switchable,
  array(select g.rolname from pg_auth_members m join pg_roles g on g.oid = m.roleid where m.member = r.oid) as member_of
from pg_roles r`;

const Q_SCHEMAS = `
select n.nspname as name, pg_get_userbyid(n.nspowner) as owner, coalesce(n.nspacl::text[], '{}') as acl
from pg_namespace n where ${SYSTEM}`;

const Q_UNIQUE_INDEXES = `
select i.indrelid::int8 as rel,
  array(select a.attname from unnest(i.indkey::int2[]) with ordinality k(n, o)
        join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.n order by k.o) as cols
from pg_index i join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace
where i.indisunique and not i.indisprimary and i.indpred is null and i.indexprs is null
  and i.indisvalid and ${SYSTEM}`;

// Each view's query tree (src/db/view_origins.ts reads where its columns come from).
const Q_VIEWS = `
select r.ev_class::int8 as rel, r.ev_action::text as action
from pg_rewrite r join pg_class c on c.oid = r.ev_class join pg_namespace n on n.oid = c.relnamespace
where c.relkind = 'v' and r.rulename = '_RETURN' and ${SYSTEM}`;

const Q_TS_CONFIGS = `
select n.nspname as schema, c.cfgname as name
from pg_ts_config c join pg_namespace n on n.oid = c.cfgnamespace`;

const Q_META = `select current_user as current_user,
  current_setting('server_version_num')::int as version,
  (select r.rolsuper from pg_roles r where r.rolname = current_user) as superuser,
  (select r.rolbypassrls from pg_roles r where r.rolname = current_user) as bypassrls`;

/** Parses aclitem texts (`grantee=privs/grantor`) into grantees holding `priv` ("" = PUBLIC). */
export function granteesWith(acl: string[], priv: string): Set<string> {
  const out = new Set<string>();
  for (const item of acl) {
    const eq = item.lastIndexOf("=", item.lastIndexOf("/"));
    let grantee = item.slice(0, eq);
    if (grantee.startsWith('"')) grantee = grantee.slice(1, -1).replaceAll('""', '"');
    const privs = item.slice(eq + 1, item.lastIndexOf("/"));
    if (privs.includes(priv)) out.add(grantee);
  }
  return out;
}

const KINDS: Record<string, RelationKind> = {
  r: "table",
  v: "view",
  m: "materialized_view",
  p: "partitioned_table",
  f: "foreign_table",
};

const MODES: Record<string, FunctionArg["mode"]> = {
  i: "in",
  o: "out",
  b: "inout",
  v: "variadic",
  t: "table",
};

type Row = Record<string, unknown>;

/** Introspects the database at `uri` into a Schema model, applying the blacklist. */
export async function introspect(uri: string, blacklist = new Blacklist()): Promise<Schema> {
  const t0 = performance.now();
  const client = new Client(uri, { applicationName: "svc-introspect", maxStatements: 0 });
  try {
    // All queries in one batch (one round trip) inside a repeatable-read snapshot.
    const results = await client.execute([
      { sql: "begin isolation level repeatable read read only" },
      ...[
        Q_RELATIONS,
        Q_COLUMNS,
        Q_CONSTRAINTS,
        Q_FUNCTIONS,
        Q_TYPES,
        Q_ROLES,
        Q_SCHEMAS,
        Q_META,
        Q_UNIQUE_INDEXES,
        Q_TS_CONFIGS,
        Q_VIEWS,
      ].map((sql) => ({ sql })),
      { sql: "commit" },
    ]);
    const [rels, cols, cons, fns, types, roles, schemas, meta, uniqueIndexes, tsConfigs, views] =
      results.slice(1, -1).map((r) => r.rows);
    const schema = buildSchema(
      { rels, cols, cons, fns, types, roles, schemas, meta, uniqueIndexes, tsConfigs, views },
      blacklist,
    );
    schema.durationMs = performance.now() - t0;
    return schema;
  } finally {
    await client.close();
  }
}

function toColumn(r: Row): Column {
  const nullable = r.nullable as boolean;
  const hasDefault = r.has_default as boolean;
  const identity = r.identity === "a" ? "always" : r.identity === "d" ? "by_default" : null;
  const generated = r.generated === "s";
  return {
    name: r.name as string,
    type: r.type as string,
    typeOid: Number(r.type_oid),
    category: r.category as string,
    elementType: (r.element_type as string | null) ?? null,
    compositeOid: r.composite_oid == null ? null : Number(r.composite_oid),
    nullable,
    hasDefault,
    identity,
    generated,
    mandatory: !nullable && !hasDefault && identity === null && !generated,
    comment: (r.comment as string | null) ?? null,
  };
}

/** Builds the model from catalog rows (pure; exported for tests and benchmarks). */
export function buildSchema(
  rows: {
    rels: Row[];
    cols: Row[];
    cons: Row[];
    fns: Row[];
    types: Row[];
    roles: Row[];
    schemas: Row[];
    meta: Row[];
    /** Non-partial, non-expression unique indexes (unique keys like UNIQUE constraints). */
    uniqueIndexes?: Row[];
    /** Text search configurations. */
    tsConfigs?: Row[];
    /** Views' `_RETURN` rules: `{rel, action}` (keys and foreign keys derived through views). */
    views?: Row[];
  },
  blacklist: Blacklist,
): Schema {
  const byOid = new Map<number, Relation>();
  const relations = new Map<string, Relation>();
  const compositeCols = new Map<number, Column[]>();
  for (const c of rows.cols) {
    const rel = Number(c.rel);
    let list = compositeCols.get(rel);
    if (!list) compositeCols.set(rel, list = []);
    list.push(toColumn(c));
  }
  for (const r of rows.rels) {
    const oid = Number(r.oid);
    const columns = compositeCols.get(oid) ?? [];
    const upd = Number(r.upd);
    const rel: Relation = {
      schema: r.schema as string,
      name: r.name as string,
      oid,
      kind: KINDS[r.kind as string],
      comment: (r.comment as string | null) ?? null,
      columns,
      columnMap: new Map(columns.map((c) => [c.name, c])),
      primaryKey: [],
      unique: [],
      foreignKeys: [],
      referencedBy: [],
      insertable: r.kind !== "m" && (upd & 8) !== 0,
      updatable: r.kind !== "m" && (upd & 4) !== 0,
      deletable: r.kind !== "m" && (upd & 16) !== 0,
      computedFields: new Map(),
      selectGrantees: granteesWith(r.acl as string[], "r"),
      owner: r.owner as string,
      rowSecurity: r.rls === true,
      userTriggers: r.triggers === true,
      hasRules: r.rules === true,
    };
    // A view's columns are never mandatory: their nullability is unknown to the catalogs.
    if (rel.kind === "view") { for (const c of columns) c.mandatory = false; }
    if ((r.acl as string[]).length === 0) rel.selectGrantees.add(rel.owner);
    byOid.set(oid, rel);
    if (!blacklist.relation(rel.schema, rel.name)) {
      relations.set(qualified(rel.schema, rel.name), rel);
    }
  }
  const tableFks: TableForeignKey[] = [];
  const exposed = (r: Relation) => relations.has(qualified(r.schema, r.name));
  for (const c of rows.cons) {
    const rel = byOid.get(Number(c.rel));
    if (!rel) continue;
    const cols = c.cols as string[];
    if (c.type === "p") rel.primaryKey = cols;
    else if (c.type === "u") rel.unique.push(cols);
    else {
      const target = byOid.get(Number(c.frel));
      if (!target) continue;
      const fcols = c.fcols as string[];
      tableFks.push({
        name: c.name as string,
        from: rel,
        columns: cols,
        to: target,
        refColumns: fcols,
      });
      const fk: ForeignKey = {
        name: c.name as string,
        schema: rel.schema,
        relation: rel.name,
        columns: cols,
        references: { schema: target.schema, relation: target.name, columns: fcols },
      };
      if (exposed(rel) && exposed(target)) {
        rel.foreignKeys.push(fk);
        target.referencedBy.push(fk);
      }
    }
  }
  for (const u of rows.uniqueIndexes ?? []) {
    const rel = byOid.get(Number(u.rel));
    const cols = u.cols as string[];
    if (!rel || cols.length === 0) continue;
    const same = (k: string[]) => k.length === cols.length && k.every((c) => cols.includes(c));
    if (same(rel.primaryKey) || rel.unique.some(same)) continue;
    rel.unique.push(cols);
  }
  if (rows.views && rows.views.length > 0) {
    const attNames = new Map<number, Map<number, string>>();
    for (const c of rows.cols) {
      const rel = Number(c.rel);
      let names = attNames.get(rel);
      if (!names) attNames.set(rel, names = new Map());
      names.set(Number(c.attnum), c.name as string);
    }
    const origins = new Map<number, ViewOrigin>();
    for (const v of rows.views) {
      const o = viewOrigins(v.action as string, Number(v.rel));
      if (o) origins.set(Number(v.rel), o);
    }
    deriveViewKeys(byOid, origins, attNames, tableFks, exposed);
  }
  const composites = new Map<number, CompositeType>();
  const enums: EnumType[] = [];
  const typeNames = new Set<string>();
  const castTargets = new Map<string, CastTarget>();
  const typeByOid = new Map(rows.types.map((t) => [Number(t.oid), t]));
  for (const t of rows.types) {
    const c = castable(t, typeByOid, byOid, relations, 0);
    if (c !== null) {
      const ns = t.schema as string;
      const target: CastTarget = ns === "pg_catalog"
        ? { schema: ns, sql: t.formatted as string }
        : { schema: ns, sql: `${ident(ns)}.${ident(t.name as string)}` };
      if (c.relation !== undefined) target.relation = c.relation;
      for (const key of [t.formatted as string, t.name as string, `${ns}.${t.name}`]) {
        if (!castTargets.has(key) || ns === "pg_catalog") castTargets.set(key, target);
      }
    }
    typeNames.add(t.formatted as string);
    typeNames.add(t.name as string);
    if (t.schema !== "pg_catalog") typeNames.add(`${t.schema}.${t.name}`);
    if (t.typtype === "c") {
      composites.set(Number(t.oid), {
        oid: Number(t.oid),
        schema: t.schema as string,
        name: t.name as string,
        fields: compositeCols.get(Number(t.relid)) ?? [],
      });
    } else if (t.typtype === "e") {
      enums.push({
        schema: t.schema as string,
        name: t.name as string,
        labels: t.labels as string[],
      });
    }
  }
  const relByRowType = new Map<number, Relation>();
  for (const t of rows.types) {
    const rel = byOid.get(Number(t.relid));
    if (t.typtype === "c" && rel) relByRowType.set(Number(t.oid), rel);
  }
  const functions = new Map<string, Func[]>();
  for (const f of rows.fns) {
    const names = f.arg_names as string[];
    const modes = f.arg_modes as string[];
    const types = f.arg_types as string[];
    const oids = (f.arg_type_oids as (number | string)[]).map(Number);
    const args: FunctionArg[] = types.map((type, i) => ({
      name: names[i] ? names[i] : null,
      type,
      typeOid: oids[i],
      mode: modes.length ? MODES[modes[i]] : "in",
      hasDefault: false,
    }));
    const inArgs = args.filter((a) =>
      a.mode === "in" || a.mode === "inout" || a.mode === "variadic"
    );
    const nd = Number(f.ndefaults);
    for (let i = inArgs.length - nd; i < inArgs.length; i++) inArgs[i].hasDefault = true;
    const retRel = relByRowType.get(Number(f.ret_oid));
    const retComposite = composites.get(Number(f.ret_oid));
    const outArgs = args.filter((a) =>
      a.mode === "out" || a.mode === "inout" || a.mode === "table"
    );
    let columns: Column[] | null = null;
    if (retRel) columns = retRel.columns;
    else if (retComposite) columns = retComposite.fields;
    else if (f.ret_type === "record" && outArgs.length > 0) {
      columns = outArgs.map((a) => ({
        name: a.name ?? "",
        type: a.type,
        typeOid: a.typeOid,
        category: "",
        elementType: null,
        compositeOid: null,
        nullable: true,
        hasDefault: false,
        identity: null,
        generated: false,
        mandatory: false,
        comment: null,
      }));
    }
    const fn: Func = {
      schema: f.schema as string,
      name: f.name as string,
      oid: Number(f.oid),
      args,
      inArgs,
      returns: {
        type: f.ret_type as string,
        typeOid: Number(f.ret_oid),
        set: f.retset as boolean,
        columns,
        relation: retRel ? { schema: retRel.schema, name: retRel.name } : null,
      },
      volatility: f.volatility === "i" ? "immutable" : f.volatility === "s" ? "stable" : "volatile",
      comment: (f.comment as string | null) ?? null,
      owner: f.owner as string,
      executeGrantees: (f.acl as string[]).length === 0
        ? new Set(["", f.owner as string]) // default ACL: PUBLIC may execute
        : granteesWith(f.acl as string[], "X"),
    };
    if (blacklist.func(fn.schema, fn.name)) continue;
    const key = qualified(fn.schema, fn.name);
    const list = functions.get(key);
    if (list) list.push(fn);
    else functions.set(key, [fn]);
    // Computed field: exactly one input argument, of a relation's row type.
    if (inArgs.length === 1 && !inArgs[0].hasDefault) {
      const rel = relByRowType.get(inArgs[0].typeOid);
      if (rel && !rel.columnMap.has(fn.name)) {
        const cf: ComputedField = {
          name: fn.name,
          schema: fn.schema,
          oid: fn.oid,
          type: fn.returns.type,
          set: fn.returns.set,
        };
        rel.computedFields.set(fn.name, cf);
      }
    }
  }
  const direct = new Map<string, { inherit: boolean; memberOf: string[] }>();
  for (const r of rows.roles) {
    direct.set(r.name as string, {
      inherit: r.inherit as boolean,
      memberOf: r.member_of as string[],
    });
  }
  const memberOf = new Map<string, Set<string>>();
  for (const name of direct.keys()) {
    const seen = new Set<string>([name, ""]);
    const stack = direct.get(name)!.inherit ? [...direct.get(name)!.memberOf] : [];
    while (stack.length) {
      const g = stack.pop()!;
      if (seen.has(g)) continue;
      seen.add(g);
      const d = direct.get(g);
      if (d?.inherit) stack.push(...d.memberOf);
    }
    memberOf.set(name, seen);
  }
  const schemaUsage = new Map<string, Set<string>>();
  for (const s of rows.schemas) {
    const acl = s.acl as string[];
    const g = acl.length ? granteesWith(acl, "U") : new Set<string>();
    g.add(s.owner as string);
    schemaUsage.set(s.name as string, g);
  }
  const meta = rows.meta[0];
  return {
    relations,
    functions,
    composites,
    enums,
    typeNames,
    castTargets,
    tsConfigs: new Set(
      (rows.tsConfigs ?? []).flatMap((c) => [c.name as string, `${c.schema}.${c.name}`]),
    ),
    switchableRoles: rows.roles.some((r) => r.switchable !== undefined)
      ? new Set(rows.roles.filter((r) => r.switchable === true).map((r) => r.name as string))
      : undefined,
    roles: new Set(direct.keys()),
    memberOf,
    schemaUsage,
    schemas: rows.schemas.map((s) => s.name as string).filter((n) => !blacklist.relation(n, "*")),
    currentUser: meta.current_user as string,
    currentUserPowers: [
      ...(meta.superuser === true ? ["SUPERUSER"] : []),
      ...(meta.bypassrls === true ? ["BYPASSRLS"] : []),
    ],
    serverVersion: Number(meta.version),
    durationMs: 0,
  };
}

/**
 * The pg_catalog base types a cast may target: the ones that carry data for a client. Everything
 * else there is refused like an unknown type: object identifiers (`oid`, `reg*`, which look names
 * up), `aclitem` (looks roles up), transaction and tuple ids, catalog-internal types
 * (`pg_node_tree`, `pg_ndistinct`, `pg_dependencies`, `pg_mcv_list`, BRIN summaries, `"char"`,
 * `int2vector`, `oidvector`), snapshots, `refcursor`, and any type a later PostgreSQL adds.
 * Pseudo-types (`anyelement`, `cstring`, `internal`, `record` …) are never introspected.
 */
const CATALOG_DATA_TYPES = new Set([
  "bool",
  "bytea",
  "name",
  "int2",
  "int4",
  "int8",
  "float4",
  "float8",
  "numeric",
  "money",
  "text",
  "varchar",
  "bpchar",
  "json",
  "jsonb",
  "jsonpath",
  "xml",
  "uuid",
  "date",
  "time",
  "timetz",
  "timestamp",
  "timestamptz",
  "interval",
  "bit",
  "varbit",
  "point",
  "lseg",
  "path",
  "box",
  "polygon",
  "line",
  "circle",
  "inet",
  "cidr",
  "macaddr",
  "macaddr8",
  "pg_lsn",
  "tsvector",
  "tsquery",
]);

/**
 * Whether a type may be a cast target (casts must not probe the catalogs nor describe what the
 * role cannot read), and the relation whose row type it is (SELECT on it is asked per request).
 * Allowed: the pg_catalog data types above and ranges over them; in other schemas base types,
 * enums, standalone composite types, ranges and domains over allowed types, and the row type of
 * a relation that survived the blacklist. Null: refused.
 */
function castable(
  t: Row,
  types: Map<number, Row>,
  byOid: Map<number, Relation>,
  relations: Map<string, Relation>,
  depth: number,
): { relation?: number } | null {
  if (depth > 8) return null;
  const catalog = t.schema === "pg_catalog";
  const base = () => {
    const b = t.base == null ? undefined : types.get(Number(t.base));
    return b ? castable(b, types, byOid, relations, depth + 1) : null;
  };
  switch (t.typtype) {
    case "b":
      return !catalog || CATALOG_DATA_TYPES.has(t.name as string) ? {} : null;
    case "e":
      return catalog ? null : {};
    case "d":
      return catalog ? null : base();
    case "r":
    case "m":
      return base();
    case "c": {
      const rel = byOid.get(Number(t.relid));
      if (rel) return relations.has(qualified(rel.schema, rel.name)) ? { relation: rel.oid } : null;
      return catalog ? null : {};
    }
  }
  return null;
}
