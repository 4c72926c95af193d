/**
 * Nested writes the database can check, through real HTTP as a user role: parent-ownership RLS on
 * every child table (`project` owned by the session's `sub`, `task` and `note` visible through
 * their parent) and a BEFORE INSERT trigger on `note` that reads its task's project. Each
 * statement of a write sees the rows of the statements before it, so a three-level insert passes
 * the policies and the trigger finds the parent — in one round trip (counted on the wire). A child
 * under another user's parent is refused with nothing written. Root merge with `where` deletes
 * exactly the omitted rows matching it, as RLS allows; without `where` it deletes nothing.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { pgProxy } from "../helpers/wireproxy.ts";
import { cookie, now, postSvc, startServer, token } from "../helpers/server.ts";

const SUB = `(current_setting('svc.jwt.claims', true)::jsonb ->> 'sub')`;
const FIXTURE = `
do $$ begin
  if not exists (select from pg_roles where rolname = '~anonymous') then create role "~anonymous" nologin; end if;
  if not exists (select from pg_roles where rolname = 'app_user') then create role app_user nologin; end if;
end $$;
grant usage on schema public to "~anonymous", app_user;
create table project (
  id int generated always as identity primary key,
  owner text not null default ${SUB},
  name text not null
);
create table task (
  id int generated always as identity primary key,
  project_id int not null references project on delete cascade,
  title text not null
);
create table note (
  id int generated always as identity primary key,
  task_id int not null references task on delete cascade,
  body text not null,
  project_name text
);
alter table project enable row level security;
alter table task enable row level security;
alter table note enable row level security;
create policy own on project using (owner = ${SUB});
create policy via_project on task using (exists (select 1 from project p where p.id = project_id));
create policy via_task on note using (exists (select 1 from task t where t.id = task_id));
create function note_project() returns trigger language plpgsql as $$
begin
  select p.name into new.project_name
    from task t join project p on p.id = t.project_id where t.id = new.task_id;
  return new;
end $$;
create trigger note_project before insert on note for each row execute function note_project();
grant select, insert, update, delete on project, task, note to app_user;
`;

const uri = await emptyDb("rls", FIXTURE);
const sql = sqlClient(uri);
const u = new URL(uri);
const proxy = pgProxy(Number(u.port));
u.port = String(proxy.port);
// One pooled connection: the statements a request prepares are there for the next one.
const srv = await startServer(u.toString(), ["--pg.pool_size=1", "--dev"]);

async function session(sub: string): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", sub, iat: t, exp: t + 3600, auth_time: t }));
}
const alice = await session("alice");

const post = (body: unknown, who = alice) => postSvc(srv, body, who);

const projectTree = {
  relation: "project",
  select: ["id", "owner", "name", "tasks"],
  join: {
    tasks: {
      relation: "task",
      on: { project_id: "id" },
      select: ["id", "title", "notes"],
      order_by: ["id"],
      join: {
        notes: {
          relation: "note",
          on: { task_id: "id" },
          select: ["id", "body", "project_name"],
          order_by: ["id"],
        },
      },
    },
  },
};
const project = (name: string) => ({
  name,
  tasks: [
    { title: `${name} t1`, notes: [{ body: "n1" }, { body: "n2" }] },
    { title: `${name} t2`, notes: [{ body: "n3" }] },
  ],
});

/** Bob's project with one task, written as superuser. */
const [bob] = await sql`
  with p as (insert into project (owner, name) values ('bob', 'Bob''s') returning id),
  t as (insert into task (project_id, title) select id, 'bob task' from p returning id, project_id)
  select project_id as project, id as task from t`;

async function count(table: string, where = "true"): Promise<number> {
  return (await sql.unsafe<{ n: number }>(
    `select count(*)::int as n from ${table} where ${where}`,
  ))[0]
    .n;
}

Deno.test("a three-level insert under parent-ownership RLS and a trigger reading the parent: one round trip", async () => {
  // The statements of this shape are prepared by a first write on the one pooled connection.
  const warm = await post({ query: projectTree, data: [project("Warm")] });
  assert.equal(warm.status, 200, JSON.stringify(warm.body));
  proxy.reset();
  const r = await post({ query: projectTree, data: [project("Alpha")], stats: true, sql: true });
  const wire = { ...proxy.counts };
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const [p] = r.body.result;
  assert.equal(p.owner, "alice");
  assert.deepEqual(
    p.tasks.map((t: { title: string; notes: { body: string; project_name: string }[] }) => [
      t.title,
      t.notes.map((n) => [n.body, n.project_name]),
    ]),
    [
      ["Alpha t1", [["n1", "Alpha"], ["n2", "Alpha"]]],
      ["Alpha t2", [["n3", "Alpha"]]],
    ],
    "every note's trigger saw its task and project, inserted by the same request",
  );
  assert.deepEqual(r.body.stats.map((s: { inserted: number }) => s.inserted), [1, 2, 3]);
  assert.equal(r.body.sql.length, 4, "one statement per relation and level, and the read-back");
  assert.equal(wire.bursts, 1, "one round trip");
  assert.equal(wire.executes, 7, "begin, role switch, 3 statements, read-back, commit");
  assert.equal(wire.parses, 0, "prepared statements reused");
  // Committed, and really the user's.
  const rows = await sql`select owner from project where id = ${p.id}`;
  assert.deepEqual(rows.map((x) => x.owner), ["alice"]);
  assert.equal(await count("note", `project_name = 'Alpha'`), 3);
});

Deno.test("a child under another user's parent is refused with nothing written", async () => {
  const before = [await count("project"), await count("task"), await count("note")];
  const task = await post({
    query: { relation: "task", select: ["id", "project_id", "title"] },
    data: [{ project_id: bob.project, title: "intruder" }],
  });
  assert.equal(task.status, 403);
  assert.equal(task.code, "PG_42501");
  const note = await post({
    query: { relation: "note", select: ["id", "task_id", "body"] },
    data: [{ task_id: bob.task, body: "intruder" }],
  });
  assert.equal(note.status, 403);
  assert.equal(note.code, "PG_42501");
  // Bob's project is invisible: updating it (and writing under it) matches no row.
  const merge = await post({
    query: { ...projectTree, write_mode: "merge" },
    data: [{ id: bob.project, name: "mine now", tasks: [{ title: "x", notes: [] }] }],
  });
  assert.equal(merge.status, 400);
  assert.equal(merge.code, "QUERY_INVALID");
  assert.equal(merge.body.details.pointer, "/data/0");
  // A batch: a valid nested insert, then a note under Bob's task; all or nothing.
  const batch = await post([
    { query: projectTree, data: [project("Doomed")] },
    {
      query: { relation: "note", select: ["id", "task_id", "body"] },
      data: [{ task_id: bob.task, body: "intruder" }],
    },
  ]);
  assert.equal(batch.status, 403);
  assert.equal(batch.body.details.index, 1);
  assert.deepEqual([await count("project"), await count("task"), await count("note")], before);
  assert.equal(await count("project", `name = 'mine now' or name = 'Doomed'`), 0);
  assert.equal(await count("task", `title = 'intruder'`), 0);
});

/** Alice's project with tasks titled `titles`; their ids. */
async function aliceTasks(titles: string[]): Promise<{ project: number; tasks: number[] }> {
  const r = await post({
    query: projectTree,
    data: [{ name: "scope", tasks: titles.map((title) => ({ title, notes: [{ body: "x" }] })) }],
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const p = r.body[0];
  return { project: p.id, tasks: p.tasks.map((t: { id: number }) => t.id) };
}

const taskQuery = (extra: Record<string, unknown>) => ({
  relation: "task",
  write_mode: "merge",
  select: ["id", "project_id", "title"],
  order_by: ["id"],
  ...extra,
});
const titles = async (project: number) =>
  (await sql`select title from task where project_id = ${project} order by id`).map((r) => r.title);

Deno.test("root merge with where: deletes exactly the omitted rows matching it", async () => {
  const { project: p, tasks: [a, b, c] } = await aliceTasks(["a", "b", "c"]);
  // One task by key, nothing else: the example of the README.
  const one = await post({
    query: taskQuery({ where: ["=", "id", a], select: ["id"] }),
    data: [],
    stats: true,
  });
  assert.equal(one.status, 200, JSON.stringify(one.body));
  assert.deepEqual(one.body.result, []);
  assert.deepEqual(one.body.stats, [{
    path: [],
    table: "public.task",
    submitted: 0,
    inserted: 0,
    updated: 0,
    deleted: 1,
  }]);
  assert.deepEqual(await titles(p), ["b", "c"]);
  assert.equal(await count("note", `task_id = ${a}`), 0, "its notes cascade");
  // A project's tasks replaced: b updated, c deleted, d inserted.
  const replace = await post({
    query: taskQuery({ where: ["=", "project_id", p] }),
    data: [{ id: b, title: "b!" }, { project_id: p, title: "d" }],
    stats: true,
  });
  assert.equal(replace.status, 200, JSON.stringify(replace.body));
  assert.deepEqual(replace.body.result.map((t: { title: string }) => t.title), ["b!", "d"]);
  assert.deepEqual(
    [replace.body.stats[0].inserted, replace.body.stats[0].updated, replace.body.stats[0].deleted],
    [1, 1, 1],
  );
  assert.deepEqual(await titles(p), ["b!", "d"]);
  assert.equal(await count("task", `id = ${c}`), 0);
  // merge-new: rows carrying their key are kept unchanged, the others in scope deleted.
  const keep = await post({
    query: taskQuery({ write_mode: "merge-new", where: ["=", "project_id", p] }),
    data: [{ id: b, title: "IGNORED" }],
    stats: true,
  });
  assert.equal(keep.status, 200, JSON.stringify(keep.body));
  assert.equal(keep.body.stats[0].deleted, 1);
  assert.deepEqual(await titles(p), ["b!"]);
});

Deno.test("root merge: RLS decides what a where can delete; rollback previews; no where deletes nothing", async () => {
  const { project: p } = await aliceTasks(["r1", "r2"]);
  const bobTasks = await count("task", `project_id = ${bob.project}`);
  assert.equal(bobTasks, 1);
  // Bob's task is invisible to Alice: not deleted.
  const hidden = await post({
    query: taskQuery({ where: ["=", "id", bob.task] }),
    data: [],
    stats: true,
  });
  assert.equal(hidden.status, 200, JSON.stringify(hidden.body));
  assert.equal(hidden.body.stats[0].deleted, 0);
  assert.equal(await count("task", `id = ${bob.task}`), 1);
  // Every task Alice can see, previewed with rollback: counted, nothing deleted.
  const visible = await count(
    "task",
    `project_id in (select id from project where owner = 'alice')`,
  );
  const all = await count("task");
  const preview = await post({
    query: taskQuery({ where: [">", "id", 0] }),
    data: [],
    stats: true,
    rollback: true,
  });
  assert.equal(preview.status, 200, JSON.stringify(preview.body));
  assert.equal(preview.body.stats[0].deleted, visible);
  assert.ok(visible > 0 && visible < all);
  assert.equal(await count("task"), all);
  // Without where a root merge deletes nothing.
  const [first] = (await sql`select id from task where project_id = ${p} order by id`).map((r) =>
    r.id
  );
  const plain = await post({
    query: taskQuery({}),
    data: [{ id: first, title: "r1!" }],
    stats: true,
  });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.deepEqual(
    [plain.body.stats[0].updated, plain.body.stats[0].deleted],
    [1, 0],
  );
  assert.deepEqual(await titles(p), ["r1!", "r2"]);
  assert.equal(await count("task"), all);
  // A where with limit would delete rows the read hides: not writable.
  const limited = await post({ query: taskQuery({ where: [">", "id", 0], limit: 1 }), data: [] });
  assert.equal(limited.status, 400);
  assert.equal(limited.code, "QUERY_NOT_WRITABLE");
  // A root delete is one round trip too.
  proxy.reset();
  const again = await post({ query: taskQuery({ where: ["=", "id", -1] }), data: [] });
  assert.equal(again.status, 200);
  assert.equal(proxy.counts.bursts, 1);
});

Deno.test("teardown", async () => {
  await srv.stop();
  proxy.close();
  await sql.end();
  await stopDb();
});
