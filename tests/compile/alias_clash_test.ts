/**
 * Column names that equal svc's own aliases: the compiled SQL names relations `t0`, `t1`, … and row
 * records `t0_r`, `t1_r`, …; a bare alias in SQL names a column of that name first, so every whole
 * row is written `"alias".*`. Tables, keys and computed fields here use exactly those names; the
 * answers must still be whole rows and the requested keys. Run against a real PostgreSQL.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { chinookDb, schemaOf, stopDb } from "../helpers/db.ts";
import { parseQuery } from "../../src/compile/parse.ts";
import { compileRead } from "../../src/compile/sql.ts";
import { postSvc, startServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "alias_clash",
  `
  create table clash (t0 int primary key, t0_r text not null, x int not null, t1 int not null);
  insert into clash values (1, 'one', 10, 100), (2, 'two', 20, 200);
  create table clash_kid (id int primary key, t0 int not null references clash, t1 text, t1_r text);
  insert into clash_kid values (1, 1, 'a', 'b'), (2, 1, 'c', 'd'), (3, 2, 'e', 'f');
  create function clash_total(c clash) returns int language sql stable as $$ select c.x + c.t1 $$;
  create function clash_kids(c clash) returns setof clash_kid language sql stable
    as $$ select * from clash_kid k where k.t0 = c.t0 order by k.id $$;
  create function clash_tags(c clash) returns setof text language sql stable
    as $$ select c.t0_r || '-' || g from generate_series(1, 2) g $$;
  grant select, insert on clash, clash_kid to "~anonymous";
`,
);
const schema = await schemaOf(uri);
const sql = sqlClient(uri);

async function read(tree: unknown): Promise<unknown[]> {
  const stmt = compileRead(parseQuery(schema, tree, { maxDepth: 6 })).rows;
  const rows = await sql.unsafe<{ t: string }>(
    `SELECT "q"."j"::text AS "t" FROM (${stmt.sql}) AS "q"`,
    stmt.params as never[],
  );
  return rows.map((r) => JSON.parse(r.t));
}

const ONE = { t0: 1, t0_r: "one", x: 10, t1: 100 };
const TWO = { t0: 2, t0_r: "two", x: 20, t1: 200 };
const KIDS = [
  { id: 1, t0: 1, t1: "a", t1_r: "b" },
  { id: 2, t0: 1, t1: "c", t1_r: "d" },
  { id: 3, t0: 2, t1: "e", t1_r: "f" },
];

Deno.test("whole rows of a table with columns named t0 and t0_r: plain, sorted, limited", async () => {
  assert.deepEqual(await read({ relation: "clash", where: ["=", "t0", 1] }), [ONE]);
  assert.deepEqual(await read({ relation: "clash", order_by: [["desc", "t0"]] }), [TWO, ONE]);
  assert.deepEqual(await read({ relation: "clash", order_by: ["t0"], limit: 1, offset: 1 }), [TWO]);
});

Deno.test("keys named like svc's aliases, computed fields (scalar, set of rows, set of text)", async () => {
  const rows = await read({
    relation: "clash",
    select: {
      t0_r: "t0",
      t0: "t0_r",
      total: "clash_total",
      kids: "clash_kids",
      tags: "clash_tags",
    },
    order_by: ["t0"],
  });
  assert.deepEqual(rows, [
    { t0_r: 1, t0: "one", total: 110, kids: KIDS.slice(0, 2), tags: ["one-1", "one-2"] },
    { t0_r: 2, t0: "two", total: 220, kids: KIDS.slice(2), tags: ["two-1", "two-2"] },
  ]);
});

Deno.test("joins whose relations have columns named t1 and t1_r: incoming and outgoing", async () => {
  const incoming = await read({
    relation: "clash",
    select: ["t0", "kids"],
    order_by: ["t0"],
    join: { kids: { relation: "clash_kid", on: { t0: "t0" }, order_by: ["id"] } },
  });
  assert.deepEqual(incoming, [{ t0: 1, kids: KIDS.slice(0, 2) }, { t0: 2, kids: KIDS.slice(2) }]);
  const plain = await read({
    relation: "clash",
    select: ["t0", "kids"],
    where: ["=", "t0", 2],
    join: { kids: { relation: "clash_kid", on: { t0: "t0" } } },
  });
  assert.deepEqual(plain, [{ t0: 2, kids: KIDS.slice(2) }]);
  const outgoing = await read({
    relation: "clash_kid",
    select: ["id", "parent"],
    order_by: ["id"],
    limit: 2,
    join: { parent: { relation: "clash", on: { t0: "t0" } } },
  });
  assert.deepEqual(outgoing, [{ id: 1, parent: ONE }, { id: 2, parent: ONE }]);
});

Deno.test("through real HTTP: POST and GET reads, a batch and a write answer whole rows", async () => {
  const srv = await startServer(uri, ["--dev"]);
  try {
    const read = await postSvc(srv, { relation: "clash", order_by: [["desc", "t0"]], limit: 1 });
    assert.equal(read.status, 200, JSON.stringify(read.body));
    assert.deepEqual(read.body, [TWO]);
    const get = await srv.get("/svc?relation=clash&where=eq(t0,1)");
    assert.equal(get.status, 200);
    assert.deepEqual(await get.json(), [ONE]);
    const batch = await postSvc(srv, [
      { relation: "clash", select: { t0_r: "t0", total: "clash_total" }, order_by: ["t0"] },
      {
        relation: "clash_kid",
        select: ["id", "parent"],
        where: ["=", "id", 3],
        join: {
          parent: { relation: "clash", on: { t0: "t0" } },
        },
      },
    ]);
    assert.equal(batch.status, 200, JSON.stringify(batch.body));
    assert.deepEqual(batch.body, [
      [{ t0_r: 1, total: 110 }, { t0_r: 2, total: 220 }],
      [{ id: 3, parent: TWO }],
    ]);
    const write = await postSvc(srv, {
      query: { relation: "clash", order_by: ["t0"] },
      data: [{ t0: 3, t0_r: "three", x: 30, t1: 300 }],
      rollback: true,
    });
    assert.equal(write.status, 200, JSON.stringify(write.body));
    assert.deepEqual(write.body, [{ t0: 3, t0_r: "three", x: 30, t1: 300 }]);
  } finally {
    await srv.stop();
  }
});

Deno.test("stop the database", async () => {
  await sql.end();
  await stopDb();
});
