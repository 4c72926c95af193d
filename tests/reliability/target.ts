/**
 * The reliability target: Chinook plus the compiler fixture, the routes fixture, a canary table
 * owned by another role (`canary_owner`, no grants to the request roles) and a NOINHERIT login
 * role `authenticator` (granted `~anonymous` and `app_user`) that svc connects as. Shared by the
 * bounded fuzz/injection/session tests and by `scripts/soak.ts --fuzz`.
 */
import { sqlClient } from "../helpers/sql.ts";
import { FIXTURE_SQL } from "../compile/fixture.ts";
import { chinookDb, psql } from "../helpers/db.ts";
import { now, startServer, token } from "../helpers/server.ts";
import { spawnSvc } from "../helpers/process.ts";

/** The text stored in the canary table; no response may ever contain it. */
export const CANARY_MARKER = "canary-9f2c41d7-never-served";

const ROUTES_SQL = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));

/** SQL run (as superuser) after Chinook: fixtures, grants, the canary and the authenticator. */
export const TARGET_SQL = `
${FIXTURE_SQL}
grant select on all tables in schema public to "~anonymous", app_user;
grant insert, update, delete on all tables in schema public to app_user;
${ROUTES_SQL}
do $$ begin
  if not exists (select from pg_roles where rolname = 'canary_owner') then
    create role canary_owner nologin;
  end if;
  if not exists (select from pg_roles where rolname = 'authenticator') then
    create role authenticator login noinherit;
  end if;
end $$;
grant "~anonymous", app_user to authenticator;
create table public.canary (id int primary key, secret text not null);
insert into public.canary values (1, '${CANARY_MARKER}');
alter table public.canary owner to canary_owner;
revoke all on public.canary from public;
`;

/** The canary's content and row count, read as superuser. */
export async function canaryState(db: string): Promise<string> {
  const out = await psql(
    "select 'state=' || count(*) || ':' || string_agg(secret, ',') from canary",
    db,
  );
  return /state=(\S*)/.exec(out)?.[1] ?? out;
}

/**
 * Every type of pg_catalog (base, pseudo, array, range, composite) by its name, its
 * `format_type` spelling and its qualified name, read as superuser.
 */
export async function catalogTypeNames(db: string): Promise<string[]> {
  const sql = sqlClient(await chinookDb(db));
  try {
    const rows = await sql`
      select t.typname as name, format_type(t.oid, null) as formatted from pg_type t
      where t.typnamespace = 'pg_catalog'::regnamespace order by t.typname`;
    const names = rows.flatMap((r) => [r.name, r.formatted, `pg_catalog.${r.name}`]);
    return [...new Set(names as string[])];
  } finally {
    await sql.end();
  }
}

/** The expected {@link canaryState}. */
export const CANARY_OK = `1:${CANARY_MARKER}`;

/** A running target: the server (connected as `authenticator`) and its database. */
export interface Target {
  /** Base URL of the server. */
  url: string;
  db: string;
  /** The server's process id when it runs as its own process. */
  pid?: number;
  /** Resolves when a server process exits (never for an in-process server). */
  exited: Promise<string>;
  /** A Cookie header value carrying a valid `app_user` session. */
  userCookie: string;
  stop(): Promise<void>;
}

async function prepare(name: string) {
  const superUri = await chinookDb(name, TARGET_SQL);
  const wellknown = new URL("../../wellknown", import.meta.url).pathname;
  const t = now();
  const tok = await token({ role: "app_user", iat: t, exp: t + 86400, auth_time: t, uid: "fz" });
  return {
    uri: superUri.replace("://postgres@", "://authenticator@"),
    flags: [
      `--pg.query.wellknown_path=${wellknown}`,
      // Hostile arguments may ask for huge series (rt.pairs): a 2 s timeout keeps cases fast.
      "--pg.query.statement_timeout=2000",
    ],
    userCookie: `accesstoken=${tok}`,
  };
}

/** Creates (once per process) the database `name` and starts svc in-process as `authenticator`. */
export async function startTarget(name = "reliability", flags: string[] = []): Promise<Target> {
  const p = await prepare(name);
  const srv = await startServer(p.uri, [...p.flags, ...flags]);
  return {
    url: srv.url,
    db: name,
    exited: new Promise(() => {}),
    userCookie: p.userCookie,
    stop: () => srv.stop(),
  };
}

/** Like {@link startTarget}, with svc as its own process (`deno run main.ts`). */
export async function startTargetProcess(
  name = "reliability",
  flags: string[] = [],
): Promise<Target> {
  const p = await prepare(name);
  const svc = await spawnSvc([
    `--pg.uri=${p.uri}`,
    "--logging.level=error",
    "--pg.pool_size=4",
    ...p.flags,
    ...flags,
  ]);
  await svc.waitHealthy();
  let stopping = false;
  return {
    url: svc.url,
    db: name,
    pid: svc.child.pid,
    exited: svc.child.status.then((st) =>
      stopping ? new Promise<string>(() => {}) : `svc exited (${st.code}):\n${svc.output()}`
    ),
    userCookie: p.userCookie,
    stop: async () => {
      stopping = true;
      await svc.stop();
    },
  };
}
