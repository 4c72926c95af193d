/**
 * The recommended layout (docs/security.md: tables in an unexposed `app` schema, `security_invoker`
 * views in `api`, `pg.schemas=api`) keeps joins and nested writes: a view showing its table's
 * key takes the key, and a foreign key between two tables links the views over them (views over
 * views too). A view that is not one row per table row (an aggregate) gets nothing; nor does a
 * view not showing the key. Through real HTTP as a user role, under row-level security where a
 * comment checks its post and a post its author.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, schemaOf, stopDb } from "../helpers/db.ts";
import { readNodeTree, viewOrigins } from "../../src/db/view_origins.ts";
import { cookie, now, postSvc, startServer, token } from "../helpers/server.ts";

const SUB = `(current_setting('svc.jwt.claims', true)::jsonb ->> 'sub')`;
const FIXTURE = `
do $$ begin
  if not exists (select from pg_roles where rolname = '~anonymous') then create role "~anonymous" nologin; end if;
  if not exists (select from pg_roles where rolname = 'app_user') then create role app_user nologin; end if;
end $$;
create schema app;
create schema api;
create table app.author (id int generated always as identity primary key, name text not null unique);
create table app.post (
  id int generated always as identity primary key,
  author_id int not null references app.author,
  owner text not null default ${SUB},
  title text not null,
  hidden boolean not null default false
);
create table app.comment (
  id int generated always as identity primary key,
  post_id int not null references app.post on delete cascade,
  body text not null
);
alter table app.post enable row level security;
alter table app.comment enable row level security;
create policy own on app.post using (owner = ${SUB} or not hidden) with check (owner = ${SUB});
create policy via_post on app.comment
  using (exists (select 1 from app.post p where p.id = post_id));
insert into app.author (name) values ('Ann'), ('Bob');
create view api.authors with (security_invoker) as select id as author_id, name from app.author;
create view api.posts with (security_invoker) as
  select id, author_id as author, title, upper(title) as shout from app.post where not hidden or owner = ${SUB};
create view api.comments with (security_invoker) as select id, post_id, body from app.comment;
create view api.recent_posts with (security_invoker) as select id, title, author from api.posts;
create view api.post_stats with (security_invoker) as
  select post_id, count(*) as n from app.comment group by post_id;
create view api."odd :name" with (security_invoker) as
  select id as ":id (x)", post_id as "p{o}st\\ id", body from app.comment;
create table app.tag (id int primary key, name text not null);
insert into app.tag values (1, 'shown'), (2, 'hidden');
create view api.tags with (security_invoker) as select id, name from app.tag;
create view api.shown_tags with (security_invoker) as select id, name from app.tag where id = 1;
create view api.first_tags with (security_invoker) as select id, name from api.tags order by id limit 1;
create view api.big_literal as
  select id, name, repeat('x', 1) || '${"y".repeat(3_000_000)}' as blob from app.tag;
create view api.keyless_comments with (security_invoker) as select post_id, body from app.comment;
grant usage on schema api, app to "~anonymous", app_user;
grant select on all tables in schema api to "~anonymous", app_user;
grant select on all tables in schema app to "~anonymous", app_user;
grant insert, update, delete on api.posts, api.comments, app.post, app.comment to app_user;
grant insert, update on app.tag, api.tags, api.shown_tags, api.first_tags to app_user;
`;

const uri = await emptyDb("view_keys", FIXTURE);
const sql = sqlClient(uri);
const srv = await startServer(uri, ["--pg.schemas=api"]);
const t = now();
const alice = cookie(
  await token({ role: "app_user", sub: "alice", iat: t, exp: t + 3600, auth_time: t }),
);

Deno.test("a nested write through views under RLS: the post's key fills its comments'", async () => {
  const query = {
    relation: "posts",
    select: ["id", "title", "author", "shout", "comments"],
    join: {
      comments: {
        relation: "comments",
        on: { post_id: "id" },
        select: ["id", "body"],
        order_by: ["id"],
      },
    },
  };
  const r = await postSvc(srv, {
    query,
    data: [{ title: "hello", author: 1, comments: [{ body: "first" }, { body: "second" }] }],
  }, alice);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const [post] = r.body as { id: number; shout: string; comments: { body: string }[] }[];
  assert.equal(post.shout, "HELLO");
  assert.deepEqual(post.comments.map((c) => c.body), ["first", "second"]);
  const rows = await sql<{ post_id: number; owner: string }>`
    select c.post_id, p.owner from app.comment c join app.post p on p.id = c.post_id order by c.id`;
  assert.deepEqual(rows.map((x) => [x.post_id, x.owner]), [[post.id, "alice"], [post.id, "alice"]]);
  // Updated by the view's key (the table's, under the view's name).
  const u = await postSvc(srv, {
    query: { relation: "posts", select: ["id", "title"], write_mode: "merge" },
    data: [{ id: post.id, title: "renamed" }],
  }, alice);
  assert.equal(u.status, 200, JSON.stringify(u.body));
  assert.deepEqual(u.body, [{ id: post.id, title: "renamed" }]);
});

Deno.test("reads join views both ways, and a view over a view", async () => {
  await sql`insert into app.post (author_id, owner, title) values (2, 'bob', 'by bob')`;
  const r = await postSvc(srv, {
    relation: "authors",
    where: ["=", "name", ["Bob"]],
    select: ["name", "posts"],
    join: {
      posts: {
        relation: "recent_posts",
        on: { author: "author_id" },
        select: ["title", "writer", "comments"],
        join: {
          writer: { relation: "authors", on: { author_id: "author" }, select: ["name"] },
          comments: { relation: "comments", on: { post_id: "id" }, select: ["body"] },
        },
      },
    },
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, [{
    name: "Bob",
    posts: [{ title: "by bob", writer: { name: "Bob" }, comments: [] }],
  }]);
});

Deno.test("an aggregate view gets no keys (400 QUERY_BAD_JOIN); a view without the key still refers", async () => {
  const r = await postSvc(srv, {
    relation: "posts",
    join: { c: { relation: "post_stats", on: { post_id: "id" } } },
  });
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.equal(r.code, "QUERY_BAD_JOIN");
  const out = await postSvc(srv, {
    relation: "post_stats",
    join: { post: { relation: "posts", on: { id: "post_id" }, select: ["id"] } },
  });
  assert.equal(out.status, 400, JSON.stringify(out.body));
  assert.equal(out.code, "QUERY_BAD_JOIN");
  // Its rows are not rows of a table: not one of them has a key to find.
  const keyless = await postSvc(srv, {
    relation: "posts",
    select: ["id", "c"],
    join: { c: { relation: "keyless_comments", on: { post_id: "id" }, select: ["body"] } },
    order_by: ["id"],
  });
  assert.equal(keyless.status, 200, JSON.stringify(keyless.body));
  // Without its key a view can be read and referred from, not written.
  const w = await postSvc(srv, {
    query: { relation: "keyless_comments", select: ["post_id", "body"], write_mode: "merge" },
    data: [{ post_id: 1, body: "x" }],
  }, alice);
  assert.equal(w.status, 400, JSON.stringify(w.body));
});

Deno.test("an upsert through a view that leaves rows out is refused; through one that does not, it runs", async () => {
  // Tag 2 is left out by shown_tags (a WHERE) and first_tags (a LIMIT over a view): ON CONFLICT
  // would meet it all the same.
  for (const relation of ["shown_tags", "first_tags"]) {
    const r = await postSvc(srv, {
      query: { relation, write_mode: "upsert", select: ["id", "name"] },
      data: [{ id: 2, name: "changed" }],
    }, alice);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.code, "QUERY_NOT_WRITABLE", relation);
  }
  assert.deepEqual([...await sql`select name from app.tag where id = 2`], [{ name: "hidden" }]);
  // A view leaving nothing out upserts as its table does.
  const ok = await postSvc(srv, {
    query: { relation: "tags", write_mode: "upsert", select: ["id", "name"] },
    data: [{ id: 2, name: "renamed" }, { id: 3, name: "new" }],
  }, alice);
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual(ok.body, [{ id: 2, name: "renamed" }, { id: 3, name: "new" }]);
});

Deno.test("a view holding a 3 MB literal: its datum is skipped whole, its keys derived", async () => {
  // The literal's bytes were an object each (11 MB of rule text: +300 MiB at every reload).
  const [{ action }] = await sql<{ action: string }>`
    select ev_action::text as action from pg_rewrite where ev_class = 'api.big_literal'::regclass`;
  assert.ok(action.length > 10_000_000);
  const heap = Deno.memoryUsage().heapUsed;
  const origin = viewOrigins(action, 0)!;
  assert.ok(Deno.memoryUsage().heapUsed - heap < 64 * 1024 * 1024, "no object per byte");
  assert.equal(origin.columns.size, 2);
  const schema = await schemaOf(uri);
  assert.deepEqual(schema.relations.get("api.big_literal")!.primaryKey, ["id"]);
  // A name "[" is a name, not a datum.
  const tree = readNodeTree(
    "({TARGETENTRY :resname [ :resno 1} {CONST :constvalue 4 [ 1 0 0 0 ] :location 3})",
  ) as { fields: Map<string, unknown> }[];
  assert.equal(tree[0].fields.get("resname"), "[");
  assert.equal(tree[1].fields.get("location"), "3");
});

Deno.test("database.json describes the views' keys and foreign keys", async () => {
  const res = await srv.get("/svc/database.json", alice);
  assert.equal(res.status, 200);
  const doc = await res.json() as {
    schemas: {
      name: string;
      relations: {
        name: string;
        primary_key: string[];
        foreign_keys: { columns: string[]; references: { relation: string; columns: string[] } }[];
      }[];
    }[];
  };
  // Nothing of the unexposed schema.
  assert.deepEqual(doc.schemas.map((s) => s.name), ["api"]);
  const rel = (name: string) => doc.schemas[0].relations.find((r) => r.name === name)!;
  assert.deepEqual(rel("posts").primary_key, ["id"]);
  assert.deepEqual(rel("authors").primary_key, ["author_id"]);
  assert.deepEqual(rel("post_stats").primary_key, []);
  // Names PostgreSQL's node text escapes.
  assert.deepEqual(rel("odd :name").primary_key, [":id (x)"]);
  assert.deepEqual(rel("odd :name").foreign_keys.map((f) => f.columns), [["p{o}st\\ id"], [
    "p{o}st\\ id",
  ]]);
  assert.deepEqual(
    rel("comments").foreign_keys.map((
      f,
    ) => [f.columns, f.references.relation, f.references.columns]),
    [[["post_id"], "posts", ["id"]], [["post_id"], "recent_posts", ["id"]]],
  );
});

Deno.test({
  name: "view keys: stop",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    await srv.stop();
    await sql.end();
    await stopDb();
  },
});
