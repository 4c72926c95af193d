/**
 * Shared fixture of the compiler tests: Chinook plus an enum, composite types, a document table
 * with a stored generated tsvector, computed fields, set-returning functions and a wide table.
 */
import type { Sql } from "../helpers/sql.ts";
import type { Statement } from "../../src/compile/ast.ts";

/** Extra SQL run after Chinook. */
export const FIXTURE_SQL = `
create type mood as enum ('sad', 'ok', 'happy');
create type geo as (lat double precision, lng double precision);
create type address as (street text, city text, pos geo);
create table doc (
  id int generated always as identity primary key,
  title text not null,
  body text not null,
  feeling mood not null default 'ok',
  home address,
  tags text[] not null default '{}',
  meta jsonb,
  track_id int references track (track_id),
  created timestamp not null default '2024-01-01 10:00',
  search tsvector generated always as (to_tsvector('english', title || ' ' || body)) stored
);
create function search_docs(q text, cfg regconfig default 'english') returns setof doc
  language sql stable as $$ select * from doc where search @@ websearch_to_tsquery(cfg, q) $$;
create function full_name(e employee) returns text language sql stable
  as $$ select e.first_name || ' ' || e.last_name $$;
create function minutes(t track) returns numeric language sql immutable
  as $$ select round(t.milliseconds / 60000.0, 2) $$;
create function words(d doc) returns setof text language sql immutable
  as $$ select unnest(string_to_array(d.title, ' ')) $$;
create function long_tracks(min_ms int) returns table (id int, name text, ms int)
  language sql stable as $$ select track_id, name, milliseconds from track where milliseconds >= min_ms order by track_id $$;
create function answer() returns int language sql immutable as $$ select 42 $$;
create function secret_answer() returns int language sql immutable as $$ select 43 $$;
revoke execute on function secret_answer() from public;
create function noop() returns void language sql as $$ select $$;
create function pick(a int) returns int language sql immutable as $$ select a * 2 $$;
create function pick(b text) returns text language sql immutable as $$ select upper(b) $$;
insert into doc (title, body, feeling, home, tags, meta, track_id) values
  ('Rock music history', 'Guitars and drums were loud', 'happy',
   row('1 Main St', 'London', row(51.5, -0.12)), '{rock,history}', '{"pages": 12, "lang": "en"}', 1),
  ('Jazz standards', 'Saxophones played smoothly', 'ok',
   row('2 High St', 'Paris', row(48.8, 2.35)), '{jazz}', '{"pages": 3}', 2),
  ('Classical music', 'Orchestras and symphonies', 'sad', null, '{}', null, null);
create table wide (id int primary key, ${
  Array.from({ length: 60 }, (_, i) => `c${i + 1} int not null default ${i + 1}`).join(", ")
});
insert into wide (id) values (1), (2);
`;

/** Runs a compiled statement and returns the parsed `j` values. */
export async function rowsOf(sql: Sql, stmt: Statement): Promise<unknown[]> {
  const rows = await sql.unsafe(stmt.sql, stmt.params as never[]);
  return rows.map((r) => r.j);
}
