/**
 * The reliability target: Chinook plus the compiler fixture, the routes fixture, a canary table
 * owned by another role (`canary_owner`, no grants to the request roles) and a NOINHERIT login
 * role `authenticator` (granted `~anonymous` and `app_user`) that svc connects as. Shared by the
 * bounded fuzz/injection/session tests and by `scripts/soak.ts --fuzz`.
 */
import { FIXTURE_SQL } from "../compile/fixture.ts";
import { chinookDb, psql } from "../helpers/db.ts";
import { now, startServer, type TestServer, token } from "../helpers/server.ts";

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

/** The expected {@link canaryState}. */
export const CANARY_OK = `1:${CANARY_MARKER}`;

/** A running target: the server (connected as `authenticator`) and its database. */
export interface Target {
  srv: TestServer;
  db: string;
  /** A Cookie header value carrying a valid `app_user` session. */
  userCookie: string;
  stop(): Promise<void>;
}

/** Creates (once per process) the database `name` and starts svc on it as `authenticator`. */
export async function startTarget(name = "reliability", flags: string[] = []): Promise<Target> {
  const superUri = await chinookDb(name, TARGET_SQL);
  const uri = superUri.replace("://postgres@", "://authenticator@");
  const wellknown = new URL("../../wellknown", import.meta.url).pathname;
  const srv = await startServer(uri, [
    `--pg.query.wellknown_path=${wellknown}`,
    // Hostile arguments may ask for huge series (rt.pairs): a 2 s timeout keeps cases fast.
    "--pg.query.statement_timeout=2000",
    ...flags,
  ]);
  const t = now();
  const tok = await token({ role: "app_user", iat: t, exp: t + 86400, auth_time: t, uid: "fz" });
  return {
    srv,
    db: name,
    userCookie: `accesstoken=${tok}`,
    stop: () => srv.stop(),
  };
}
