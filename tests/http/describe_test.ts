/**
 * svc describes nothing the role cannot read, through real HTTP against a real PostgreSQL with
 * svc connecting as a NOINHERIT authenticator: "did you mean" hints name only columns, relations
 * and functions the request's role holds a privilege on (asked of PostgreSQL per request), a
 * relation's row type is a cast target only for a role that may SELECT it, and catalog-internal
 * types (`aclitem`, `pg_node_tree` …) and type modifiers on types that take none are refused like
 * unknown types (400 QUERY_UNKNOWN_TYPE, never a 5xx).
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { toSvcError } from "../../src/http/error_response.ts";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const DB = "describe";
const fixture = `
create role authn login noinherit;
grant "~anonymous", app_user to authn;
-- The anonymous role reads customer's columns but email.
revoke select on customer from "~anonymous";
grant select (customer_id, first_name, last_name, company, city, country) on customer
  to "~anonymous";
-- A table granted to both request roles in a schema they have no USAGE on.
create schema vault;
create table vault.archive (id int primary key, amount numeric);
grant select on vault.archive to "~anonymous", app_user;
-- No grant to anyone.
create table canary (id int primary key, secret text);
insert into canary values (1, 'never-served');
revoke all on canary from public;
create table granted_later (id int primary key, payload text);
revoke all on granted_later from "~anonymous", app_user;
create function hidden_total() returns int language sql as 'select 1';
revoke execute on function hidden_total() from public;
`;
const superUri = await chinookDb(DB, fixture);
const srv = await startServer(superUri.replace("://postgres@", "://authn@"));

async function appUser(): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
}

/** The error of a request: status, code and message. */
async function error(res: Response): Promise<{ status: number; code: string; message: string }> {
  const body = await res.json();
  return { status: res.status, code: body.code, message: body.message };
}

Deno.test("hints never name a column the role holds no privilege on", async () => {
  // email exists, but the anonymous role has no privilege on it.
  const anon = await error(await srv.post("/svc", { relation: "customer", select: ["emai"] }));
  assert.equal(anon.status, 400);
  assert.equal(anon.code, "QUERY_UNKNOWN_COLUMN");
  assert.doesNotMatch(anon.message, /email/, anon.message);
  // The same name as app_user, who may read it: the hint is there.
  const user = await error(
    await srv.post("/svc", { relation: "customer", select: ["emai"] }, await appUser()),
  );
  assert.match(user.message, /did you mean 'email'\?/);
  // Columns the anonymous role does hold a grant on are still suggested.
  const visible = await error(
    await srv.post("/svc", { relation: "customer", select: ["frist_name"] }),
  );
  assert.match(visible.message, /did you mean 'first_name'\?/);
  // The same in a where clause, a `set` item, through a join and in the GET form.
  const where = await error(
    await srv.post("/svc", { relation: "customer", where: ["=", "emial", ["x"]] }),
  );
  assert.doesNotMatch(where.message, /email/, where.message);
  const dot = await error(
    await srv.post("/svc", {
      relation: "invoice",
      select: { to: [".", "customer", "emai"] },
      join: { customer: { relation: "customer", on: { customer_id: "customer_id" } } },
    }),
  );
  assert.equal(dot.code, "QUERY_UNKNOWN_COLUMN");
  assert.doesNotMatch(dot.message, /email/, dot.message);
  const get = await error(await srv.get("/svc?relation=customer&select=customer_id,emai"));
  assert.equal(get.code, "QUERY_UNKNOWN_COLUMN");
  assert.doesNotMatch(get.message, /email/, get.message);
  const getUser = await error(
    await srv.get("/svc?relation=customer&select=customer_id,emai", await appUser()),
  );
  assert.match(getUser.message, /did you mean 'email'\?/);
});

Deno.test("hints never name what lives in a schema the role has no USAGE on", async () => {
  for (const headers of [{}, await appUser()]) {
    const col = await error(
      await srv.post("/svc", { schema: "vault", relation: "archive", select: ["amout"] }, headers),
    );
    // Without USAGE on its schema the relation itself is unknown to the role.
    assert.equal(col.code, "QUERY_UNKNOWN_RELATION");
    assert.doesNotMatch(col.message, /amount/, col.message);
    const rel = await error(
      await srv.post("/svc", { schema: "vault", relation: "archiv" }, headers),
    );
    assert.equal(rel.code, "QUERY_UNKNOWN_RELATION");
    assert.doesNotMatch(rel.message, /'archive'/, rel.message);
  }
});

Deno.test("relation and function hints follow the role's privileges, grants at once", async () => {
  const rel = async (headers: HeadersInit = {}) =>
    (await error(await srv.post("/svc", { relation: "granted_latr" }, headers))).message;
  assert.doesNotMatch(await rel(), /granted_later/);
  assert.doesNotMatch(await rel(await appUser()), /granted_later/);
  // A column-level grant is a privilege on the relation: it is suggested.
  assert.match(
    (await error(await srv.post("/svc", { relation: "custmer" }))).message,
    /did you mean 'customer'\?/,
  );
  await psql(`grant select on granted_later to "~anonymous"`, DB);
  try {
    assert.match(await rel(), /did you mean 'granted_later'\?/);
    assert.doesNotMatch(await rel(await appUser()), /granted_later/);
  } finally {
    await psql(`revoke select on granted_later from "~anonymous"`, DB);
  }
  assert.doesNotMatch(await rel(), /granted_later/);
  const fn = await error(await srv.post("/svc", { function: "hidden_totl" }));
  assert.equal(fn.code, "QUERY_UNKNOWN_RELATION");
  assert.doesNotMatch(fn.message, /hidden_total/, fn.message);
});

/** A cast answer with the target replaced by T, to compare the shapes of two answers. */
async function castAnswer(
  type: string,
  value: unknown = ["(1,x)"],
  headers: HeadersInit = {},
  extra: Record<string, unknown> = {},
): Promise<string> {
  const res = await srv.post("/svc", {
    relation: "genre",
    select: { x: ["cast", value, type] },
    limit: 1,
    ...extra,
  }, headers);
  const text = await res.text();
  assert.equal(res.status, 400, `${type}: ${text}`);
  assert.equal(res.headers.get("x-svc-errorcode"), "QUERY_UNKNOWN_TYPE", `${type}: ${text}`);
  return text.replaceAll(type, "T");
}

Deno.test("a row type is a cast target only for a role that may SELECT its relation", async () => {
  for (const headers of [{}, await appUser()]) {
    const unknown = await castAnswer("no_such_type", ["(1,x)"], headers);
    for (const t of ["canary", "public.canary", "canary[]", "vault.archive"]) {
      assert.equal(await castAnswer(t, ["(1,x)"], headers), unknown);
    }
    // A later error (limit comes after select) must not tell them apart either.
    const later = { limit: "many" };
    assert.equal(
      await castAnswer("canary", ["(1,x)"], headers, later),
      await castAnswer("no_such_type", ["(1,x)"], headers, later),
    );
  }
  // A readable relation's row type is a target.
  const ok = await srv.post("/svc", {
    relation: "genre",
    select: { x: ["cast", ["(7,Jazz)"], "genre"] },
    limit: 1,
  });
  assert.deepEqual(await ok.json(), [{ x: { genre_id: 7, name: "Jazz" } }]);
  // Granted after startup: a target at once; revoked: refused again (answers are not cached).
  const q = { relation: "genre", select: { x: ["cast", ["(1,x)"], "canary"] }, limit: 1 };
  await psql(`grant select on canary to "~anonymous"`, DB);
  try {
    const granted = await srv.post("/svc", q);
    assert.deepEqual(await granted.json(), [{ x: { id: 1, secret: "x" } }]);
  } finally {
    await psql(`revoke select on canary from "~anonymous"`, DB);
  }
  assert.equal(await castAnswer("canary"), await castAnswer("no_such_type"));
  // In a batch (one transaction) and a write's query alike.
  const batch = await srv.post("/svc", [{ relation: "genre", limit: 1 }, q], await appUser());
  assert.equal(batch.status, 400, await batch.clone().text());
  assert.equal((await batch.json()).code, "QUERY_UNKNOWN_TYPE");
  const write = await srv.post("/svc", {
    query: {
      relation: "genre",
      select: { genre_id: "genre_id", x: ["cast", ["(1,x)"], "canary"] },
    },
    data: [{ genre_id: 1000 }],
  }, await appUser());
  assert.equal(write.status, 400, await write.clone().text());
  assert.equal((await write.json()).code, "QUERY_UNKNOWN_TYPE");
});

Deno.test("catalog-internal types are refused like unknown types", async () => {
  const unknown = await castAnswer("no_such_type", ["x"]);
  for (
    const [t, v] of [
      ["aclitem", ["authn=r/postgres"]],
      ["aclitem", ["nobody_at_all=r/postgres"]],
      ["pg_catalog.aclitem", ["authn=r/postgres"]],
      ["aclitem[]", ["{authn=r/postgres}"]],
      ["pg_node_tree", ["x"]],
      ["pg_ndistinct", ["x"]],
      ["pg_dependencies", ["x"]],
      ["pg_mcv_list", ["x"]],
      ["xid", ["1"]],
      ["tid", ["(0,1)"]],
      ["int2vector", ["1 2"]],
      ["oidvector", ["1 2"]],
      ["txid_snapshot", ["1:2:"]],
      ["refcursor", ["x"]],
      ["cstring", ["x"]],
      ["anyelement", ["x"]],
      ["internal", ["x"]],
      ["record", ["x"]],
      ["oid", ["1"]],
    ] as [string, unknown][]
  ) {
    assert.equal(await castAnswer(t, v), unknown, t);
  }
  // Data types still cast, with and without a schema.
  const ok = await srv.post("/svc", {
    relation: "genre",
    select: {
      a: ["cast", ["0/16B3748"], "pg_lsn"],
      b: ["cast", ["{1,2}"], "int[]"],
      c: ["cast", ["[1,5)"], "pg_catalog.int4range"],
      d: ["cast", ["7"], "char"],
    },
    limit: 1,
  });
  assert.deepEqual(await ok.json(), [{ a: "0/16B3748", b: [1, 2], c: "[1,5)", d: "7" }]);
});

Deno.test("type modifiers: only types that take one, in range; never a 5xx", async () => {
  const refused = [
    "integer(5)",
    "text(1)",
    "date(1)",
    "jsonb(3)",
    "int(1)[]",
    "no_such_type(3)",
    "canary(3)",
    "varchar(0)",
    "varchar(10485761)",
    "varchar(1,2)",
    "varchar()",
    "varchar(x)",
    "numeric(0)",
    "numeric(1001)",
    "numeric(5,6)",
    "numeric(1,2,3)",
    "time(7)",
    "timestamptz(9)",
    "interval(7)",
    "bit(0)",
    // Padded types: a few request bytes must not become megabytes a value (found by a hostile
    // probe: a sort on char(10485760) wrote 10 MB of temp file a row).
    "char(10001)",
    "character(10485760)",
    "bpchar(10485760)",
    "bit(80001)",
    "bit(83886080)",
  ];
  for (const t of refused) {
    const res = await srv.post("/svc", {
      relation: "genre",
      select: { x: ["cast", ["1"], t] },
      limit: 1,
    });
    const body = await res.json();
    assert.equal(res.status, 400, `${t}: ${JSON.stringify(body)}`);
    assert.equal(body.code, "QUERY_UNKNOWN_TYPE", t);
    assert.ok(body.message.startsWith(`unknown type '${t}'`), body.message);
  }
  // Padded casts add up within a query: repeated in an `arr`, beyond 10,000 bytes a row together.
  const padded = (n: number, t: string) =>
    srv.post("/svc", {
      relation: "genre",
      select: { x: ["arr", ...Array(n).fill(["cast", ["x"], t])] },
      limit: 1,
    });
  const two = await padded(2, "char(5000)");
  assert.equal(two.status, 200, await two.clone().text());
  await two.body?.cancel();
  const many = await padded(3, "char(5000)");
  const body = await many.json();
  assert.equal(many.status, 400, JSON.stringify(body));
  assert.equal(body.code, "QUERY_UNKNOWN_TYPE");
  assert.match(body.message, /together/);
  // The message of a modifier on a type that takes none is the same whether the type exists.
  const shape = async (t: string) =>
    (await (await srv.post("/svc", {
      relation: "genre",
      select: { x: ["cast", ["1"], t] },
      limit: 1,
    })).text()).replaceAll(t, "T");
  assert.equal(await shape("canary(3)"), await shape("no_such_type(3)"));
  assert.equal(await shape("integer(3)"), await shape("no_such_type(3)"));
  const ok = await srv.post("/svc", {
    relation: "genre",
    select: {
      a: ["cast", ["abcdef"], "varchar(3)"],
      b: ["cast", ["abcdef"], "character varying(2)"],
      c: ["cast", ["ab"], "char(3)"],
      d: ["cast", ["3.14159"], "numeric(5,2)"],
      e: ["cast", ["3.14159"], "decimal(3)"],
      f: ["cast", ["2020-01-02 03:04:05.678+00"], "timestamptz(1)"],
      g: ["cast", ["2020-01-02 03:04:05.478"], "timestamp(0)"],
      h: ["cast", ["03:04:05.678+02"], "timetz(2)"],
      i: ["cast", ["03:04:05.678"], "time(0)"],
      j: ["cast", ["1.678 seconds"], "interval(1)"],
      k: ["cast", ["101"], "bit(3)"],
      l: ["cast", ["10101"], "varbit(3)"],
      m: ["cast", ["{abc,de}"], "varchar(2)[]"],
      n: ["cast", ["2020-01-02 03:04:05.678+00"], "timestamp with time zone(2)"],
      o: ["cast", ["2.5"], "pg_catalog.numeric(3,1)"],
    },
    limit: 1,
  });
  const text = await ok.text();
  assert.equal(ok.status, 200, text);
  assert.deepEqual(JSON.parse(text), [{
    a: "abc",
    b: "ab",
    c: "ab ",
    d: 3.14,
    e: 3,
    f: "2020-01-02T03:04:05.7+00:00",
    g: "2020-01-02T03:04:05",
    h: "03:04:05.68+02",
    i: "03:04:06",
    j: "00:00:01.7",
    k: "101",
    l: "101",
    m: ["ab", "de"],
    n: "2020-01-02T03:04:05.68+00:00",
    o: 2.5,
  }]);
});

Deno.test("a value its type rejects as a syntax error is 400 PG_22P02, not 500 PG_42601", async () => {
  for (const [t, v] of [["tsquery", "a b"], ["jsonpath", "$$$"], ["tsquery[]", '{"a b"}']]) {
    const res = await srv.post("/svc", {
      relation: "genre",
      select: { x: ["cast", [v], t] },
      limit: 1,
    });
    const body = await res.json();
    assert.equal(res.status, 400, `${t}: ${JSON.stringify(body)}`);
    assert.equal(body.code, "PG_22P02", t);
    assert.match(body.message, /syntax error/);
  }
  // A well-formed value still casts.
  const ok = await srv.post("/svc", {
    relation: "genre",
    select: { q: ["cast", ["a & b"], "tsquery"], p: ["cast", ["$.a"], "jsonpath"] },
    limit: 1,
  });
  assert.deepEqual(await ok.json(), [{ q: "'a' & 'b'", p: '$."a"' }]);
});

Deno.test("only a value's syntax error becomes 22P02: a statement's stays 500 PG_42601", async () => {
  const sql = sqlClient(superUri);
  try {
    const statement = await sql.unsafe("select 1 +").catch((e) => e);
    const value = await sql.unsafe("select $1::text::tsquery", ["a b"]).catch((e) => e);
    assert.equal(statement.code, "42601");
    assert.equal(value.code, "42601");
    const ctx = { dev: false, anonymous: false };
    const s = toSvcError(statement, ctx);
    assert.deepEqual([s.status, s.code, s.message], [500, "PG_42601", "internal database error"]);
    const v = toSvcError(value, ctx);
    assert.deepEqual([v.status, v.code], [400, "PG_22P02"]);
  } finally {
    await sql.end();
  }
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
