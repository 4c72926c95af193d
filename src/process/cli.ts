/**
 * Command-line actions that answer and exit before the server starts: `--help`, `--version`,
 * `--print-setup-sql`. Everything else on the command line is configuration (`--<key>=<value>`).
 */
import denoJson from "../../deno.json" with { type: "json" };
import { KEYS, type KeySpec } from "../config/keys.ts";
import { storeTable } from "../config/load.ts";

/** svc's version (deno.json `version`). */
export const VERSION: string = denoJson.version;

/** Where the full configuration reference lives. */
export const CONFIG_REFERENCE = "docs/configuration.md (in the svc repository)";

function kindText(k: KeySpec["kind"]): string {
  return typeof k === "object" ? k.enum.join("|") : k;
}

function defaultText(d: unknown): string {
  if (d === undefined) return "";
  if (d === "dev") return " (default: follows --dev)";
  if (Array.isArray(d)) return d.length ? ` (default: ${d.join(",")})` : "";
  return ` (default: ${String(d)})`;
}

/** The `--help` text: usage, the actions, and every configuration flag from the key table. */
export function helpText(): string {
  const lines = [
    `svc ${VERSION}: a PostgreSQL database over HTTP`,
    "",
    "Usage: svc [--<key>=<value> | --<key> <value> | --dev] …",
    "",
    "Actions:",
    "  --help              print this help and exit",
    "  --version           print the version and exit",
    "  --print-setup-sql   print the SQL that creates the anonymous role and the authenticator",
    "                      (NOINHERIT, granted the roles it may switch to), and the SSO replay",
    "                      store's table when sso.store is set, and exit",
    "",
    "Configuration flags (also SVC_<SECTION>__<KEY> environment variables, or a config file",
    `given by --config / SVC_CONFIG); reference: ${CONFIG_REFERENCE}`,
    "",
  ];
  for (const k of KEYS) {
    const flag = k.kind === "bool" ? `--${k.key}` : `--${k.key}=<${kindText(k.kind)}>`;
    lines.push(`  ${flag}`);
    // A description that already names its default ("… (default: dev).") is not told it twice.
    const told = /\(default: /.test(k.doc);
    lines.push(`      ${k.doc}${told ? "" : defaultText(k.default)}`);
  }
  return lines.join("\n");
}

/** The SQL creating the store's table (and its schema) for `table`, usable by `authenticator`. */
export function storeSetupSql(table: string, authenticator: string): string {
  const quoted = storeTable(table);
  const parts = table.split(".");
  const q = (s: string) => `"${s.replaceAll('"', '""')}"`;
  const schema = parts.length === 2 ? q(parts[0]) : null;
  const index = q(`${parts[parts.length - 1].slice(0, 50)}_expires_at`);
  const auth = q(authenticator);
  return `-- SSO replay store (sso.store = ${table}): consumed SAML assertion IDs and login states,
-- shared by every svc process and replica. svc claims and purges rows as the authenticator.
${
    schema
      ? `create schema if not exists ${schema};
revoke all on schema ${schema} from public;
grant usage on schema ${schema} to ${auth};
`
      : ""
  }create table if not exists ${quoted} (
  ns text not null,
  key text not null,
  expires_at timestamptz not null,
  primary key (ns, key)
);
create index if not exists ${index} on ${quoted} (expires_at);
revoke all on ${quoted} from public;
grant select, insert, delete on ${quoted} to ${auth};
`;
}

/** The roles --print-setup-sql names: the anonymous role and the authenticator (`pg.user`). */
export interface SetupRoles {
  /** `pg.query.anonymous_role`. */
  anonymousRole: string;
  /** The connecting user (`pg.user`, or the user of `pg.uri`); default `svc_authenticator`. */
  authenticator?: string;
  /** `pg.schemas`: the schemas the grants name (default `public`). */
  schemas?: string[];
}

/**
 * SQL creating the anonymous role and a NOINHERIT authenticator that can switch to it, and the
 * SSO replay store's table when `store` (`sso.store`) is given.
 */
export function setupSql(opts: SetupRoles & { store?: string }): string {
  const q = (s: string) => `"${s.replaceAll('"', '""')}"`;
  const lit = (s: string) => `'${s.replaceAll("'", "''")}'`;
  const anon = opts.anonymousRole;
  const auth = opts.authenticator ?? "svc_authenticator";
  // A configured name is always quoted (`user` is a reserved word); one holding a line break or
  // another control character would end the example's `--` comment: it is left out, with a note.
  const given = opts.schemas && opts.schemas.length > 0 ? opts.schemas : null;
  // deno-lint-ignore no-control-regex
  const control = /[\x00-\x1f\x7f]/;
  const schemas = given ? given.filter((n) => !control.test(n)) : ["public"];
  const left = given ? given.length - schemas.length : 0;
  /** A schema's name as SQL. */
  const ns = (name: string) => given ? q(name) : name;
  /** One line per exposed schema. */
  const each = (line: (schema: string) => string) =>
    schemas.map((name) => line(ns(name))).join("\n");
  const named = schemas.length === 1 ? `the ${schemas[0]} schema` : "the exposed schemas";
  return `-- svc production setup: run as a superuser (or a role with CREATEROLE), then adapt.
-- svc connects as the authenticator and switches to each request's role with
-- set_config('role', …): the authenticator must be a member of every such role, and NOINHERIT so
-- that it holds no privilege of its own.
do $$ begin
  if not exists (select from pg_roles where rolname = ${lit(anon)}) then
    create role ${q(anon)} nologin;
  end if;
  if not exists (select from pg_roles where rolname = ${lit(auth)}) then
    create role ${q(auth)} login noinherit password 'change-me';
  end if;
end $$;
grant ${q(anon)} to ${q(auth)};

${
    left > 0
      ? `-- ${left} schema name(s) of pg.schemas hold control characters: write their lines by hand.\n`
      : ""
  }-- What anonymous requests may do: grant only that (example: read ${named}).
${each((s) => `grant usage on schema ${s} to ${q(anon)};`)}
${each((s) => `-- grant select on all tables in schema ${s} to ${q(anon)};`)}

-- Every role a session token may carry (its "role" claim) must be granted to the authenticator.
-- An example to adapt, commented out like the line above (run this file with psql -d <db> in the
-- database svc serves: grants on a schema's tables and sequences apply to that database only):
-- create role app_user nologin;
${each((s) => `-- grant usage on schema ${s} to app_user;`)}
${each((s) => `-- grant select, insert, update, delete on all tables in schema ${s} to app_user;`)}
-- Inserting into a serial column calls nextval() on its sequence (identity columns need nothing):
${each((s) => `-- grant usage on all sequences in schema ${s} to app_user;`)}
-- "all tables" and "all sequences" mean those that exist now; for the ones created later by the
-- role running this file (add "for role <owner>" after "alter default privileges" for another):
${
    each((s) =>
      `-- alter default privileges in schema ${s} grant select, insert, update, delete on tables to app_user;`
    )
  }
${each((s) => `-- alter default privileges in schema ${s} grant usage on sequences to app_user;`)}
-- grant app_user to ${q(auth)};${
    opts.schemas && opts.schemas.length > 0
      ? `
-- Views with security_invoker over tables in an unexposed schema (docs/security.md) run with the
-- caller's privileges: each role also needs USAGE on that schema and its privileges on the
-- tables and sequences behind the views (the same lines with that schema's name).`
      : ""
  }

-- Then start svc with --pg.uri=postgres://${auth}:…@host/db (and --pg.query.anonymous_role=${anon}
-- if you chose another name).
${
    opts.store === undefined
      ? `
-- With SSO: add --sso.store=<schema.table> (e.g. svc_sso.used) to print the table that shares
-- replay protection between svc's processes, restarts and replicas.
`
      : `
${storeSetupSql(opts.store, auth)}`
  }`;
}

/**
 * Handles the exit-early actions. Returns true when one ran (the caller exits 0).
 * `roles` gives the configured anonymous role and authenticator and `store` the configured
 * `sso.store`, used by --print-setup-sql.
 */
export function runAction(
  args: string[],
  roles: () => SetupRoles,
  store: () => string | undefined = () => undefined,
): boolean {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(helpText());
    return true;
  }
  if (args.includes("--version")) {
    console.log(`svc ${VERSION}`);
    return true;
  }
  if (args.includes("--print-setup-sql")) {
    console.log(setupSql({ ...roles(), store: store() }));
    return true;
  }
  return false;
}
