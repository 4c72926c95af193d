/**
 * SQLSTATE 42704 (undefined object) through real HTTP and PostgreSQL: named by the client's value
 * in svc's own statement (a function argument bound as regconfig, a simple route's regconfig
 * argument) it is the client's 400 `PG_42704`; raised inside a function (PL/pgSQL, SQL inlined or
 * not, a full-control route) the function named it: 500 with the generic body ("internal database
 * error", no detail), and the database's text only in dev mode.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { postSvc, startServer, type SvcAnswer, type TestServer } from "../helpers/server.ts";

const uri = await chinookDb(
  "undefined_object",
  `
  -- Bodies naming a configuration that does not exist (not checked at creation).
  set check_function_bodies = off;
  create schema uo;
  grant usage on schema uo to "~anonymous";
  create function uo.in_plpgsql() returns text language plpgsql stable
    as $$ begin return to_tsvector('nosuchcfg', 'x')::text; end $$;
  -- Inlined by the planner ("during inlining").
  create function uo.in_sql() returns text language sql stable
    as $$ select to_tsvector('nosuchcfg', 'x')::text $$;
  -- Not inlinable (volatile set-returning): "during startup".
  create function uo.in_sql_rows() returns setof text language sql volatile
    as $$ select to_tsvector('nosuchcfg', 'x')::text $$;
  -- A configuration the client names, as an argument: bound as regconfig by svc's statement.
  create function uo.with_config(cfg regconfig) returns text language sql stable
    as $$ select to_tsvector(cfg, 'fox')::text $$;
  -- Routes: a full-control one naming the configuration itself, a simple one taking it.
  create function uo.route_self(req jsonb, out resp jsonb, out content jsonb) language plpgsql
    as $$ begin content := to_jsonb(to_tsvector('nosuchcfg', 'x')::text); end $$;
  comment on function uo.route_self(jsonb) is 'route:: path: /uo/self, method: GET';
  create function uo.route_config(cfg regconfig) returns text language sql stable
    as $$ select to_tsvector(cfg, 'fox')::text $$;
  comment on function uo.route_config(regconfig) is 'route:: path: /uo/config';
  grant execute on all functions in schema uo to "~anonymous";
`,
);

/** A GET answer read whole (status, error code, parsed body). */
async function getAnswer(srv: TestServer, path: string): Promise<SvcAnswer> {
  const res = await srv.get(path);
  const text = await res.text();
  return {
    status: res.status,
    code: res.headers.get("x-svc-errorcode"),
    body: text ? JSON.parse(text) : null,
  };
}

/** A 500 PG_42704 with the generic body: nothing of the database's text. */
function internal(a: SvcAnswer, what: string): void {
  assert.equal(a.status, 500, `${what}: ${JSON.stringify(a.body)}`);
  assert.equal(a.code, "PG_42704", what);
  assert.equal(a.body.code, "PG_42704", what);
  assert.equal(a.body.message, "internal database error", what);
  assert.ok(!JSON.stringify(a.body).includes("nosuchcfg"), `${what}: ${JSON.stringify(a.body)}`);
  assert.equal(a.body.db_error, undefined, what);
}

/** A 400 PG_42704 naming the client's configuration. */
function clients(a: SvcAnswer, what: string): void {
  assert.equal(a.status, 400, `${what}: ${JSON.stringify(a.body)}`);
  assert.equal(a.code, "PG_42704", what);
  assert.match(a.body.message, /text search configuration "nosuchcfg" does not exist/, what);
}

Deno.test("42704 raised inside a function or route is 500, without the database's text", async () => {
  const srv = await startServer(uri);
  try {
    for (const fn of ["in_plpgsql", "in_sql", "in_sql_rows"]) {
      internal(await postSvc(srv, { function: fn, schema: "uo" }), fn);
    }
    internal(await getAnswer(srv, "/uo/self"), "full-control route");
  } finally {
    await srv.stop();
  }
});

Deno.test("42704 of a configuration the client named, in svc's own statement, is 400", async () => {
  const srv = await startServer(uri);
  try {
    clients(
      await postSvc(srv, {
        function: "with_config",
        schema: "uo",
        arguments: { cfg: ["nosuchcfg"] },
      }),
      "regconfig argument",
    );
    // The known configuration works: the argument is the client's value.
    const ok = await postSvc(srv, {
      function: "with_config",
      schema: "uo",
      arguments: { cfg: ["english"] },
    });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    clients(await getAnswer(srv, "/uo/config?cfg=nosuchcfg"), "simple route argument");
  } finally {
    await srv.stop();
  }
});

Deno.test("dev mode: the 500 carries the database's error and the function's context", async () => {
  const srv = await startServer(uri, ["--dev=true"]);
  try {
    // Each kind of function context PostgreSQL gives (what tells the two cases apart).
    const contexts: [string, RegExp][] = [
      ["in_plpgsql", /^PL\/pgSQL function uo\.in_plpgsql\(\) line \d+/],
      ["in_sql", /^SQL function "in_sql" during inlining/],
      ["in_sql_rows", /^SQL function "in_sql_rows"/],
    ];
    for (const [fn, where] of contexts) {
      const a = await postSvc(srv, { function: fn, schema: "uo" });
      assert.equal(a.status, 500, JSON.stringify(a.body));
      assert.equal(a.body.db_error.sqlstate, "42704");
      assert.match(a.body.db_error.where, where);
    }
    // svc's own statement: only the bind parameter's line.
    const own = await postSvc(srv, {
      function: "with_config",
      schema: "uo",
      arguments: { cfg: ["nosuchcfg"] },
    });
    assert.equal(own.status, 400, JSON.stringify(own.body));
    assert.match(own.body.db_error.where ?? "", /^(unnamed portal parameter \$1 = '.*')?$/);
  } finally {
    await srv.stop();
  }
});

Deno.test("teardown", () => stopDb());
