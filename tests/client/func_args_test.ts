/**
 * The generated client sends a function's arguments as values, never as names: `/svc` reads a bare
 * string in `arguments` as a column (docs/query.md "Expressions"), so `func("search_doc", {q:
 * "fox"})` answered 400 QUERY_UNKNOWN_COLUMN. Against a real server: text, integer, boolean,
 * jsonb, text[], jsonb[], a composite, float8 and bigint arguments come back as sent (quotes,
 * backslashes, commas, braces, NULL-looking strings, JSON strings and nested arrays included), and
 * the typed calls pass `deno check`; well-known params (values already) are unchanged.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { checkTypes } from "./check.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

const uri = await chinookDb(
  "func_args",
  `
  create table doc (id int primary key, body text not null);
  insert into doc values (1, 'the quick brown fox'), (2, 'a lazy dog'), (3, 'fox and hound');
  grant select on doc to "~anonymous";
  create function search_doc(q text) returns setof doc language sql stable
    as $$ select * from doc where body like '%' || q || '%' order by id $$;
  create type pair as (a int, b text, tags text[]);
  create function arg_echo(t text, n integer, b boolean, j jsonb, xs text[],
      js jsonb[] default null, p pair default null, f float8 default null, big bigint default null)
    returns table (o_t text, o_n integer, o_b boolean, o_j jsonb, o_xs text[], o_js jsonb[],
      o_p pair, o_f float8, o_big text)
    language sql stable as $$ select t, n, b, j, xs, js, p, f, big::text $$;
  grant execute on all functions in schema public to "~anonymous";
`,
);

interface Client {
  configure(c: Record<string, unknown>): void;
  func(name: string, args: unknown, q?: unknown): {
    query: Record<string, unknown>;
    get(): Promise<unknown>;
  };
  wellknown(name: string, params?: unknown): { get(): Promise<unknown> };
}

/** Strings a literal must carry unchanged. */
const TRICKY = `it's "quoted", a\\b {x} (y) NULL`;

Deno.test("func(): string, number, boolean, JSON, array and record arguments are values", async () => {
  const srv = await startServer(uri, [
    "--http.typescript.enable=true",
    `--pg.query.wellknown_path=${ROOT}wellknown`,
  ]);
  const dir = await Deno.makeTempDir({ prefix: "svc-args-" });
  try {
    const res = await srv.get("/svc/database.ts");
    assert.equal(res.status, 200);
    await Deno.writeTextFile(`${dir}/database.ts`, await res.text());
    const client = await import(`file://${dir}/database.ts`) as Client;
    client.configure({ baseUrl: srv.url });
    const { func } = client;

    // The audit's case: a text argument.
    const search = func("search_doc", { q: "fox" }, { select: ["id"] });
    assert.deepEqual(await search.get(), [{ id: 1 }, { id: 3 }]);
    assert.deepEqual(search.query.arguments, { q: ["fox"] });

    const args = {
      t: TRICKY,
      n: -42,
      b: false,
      j: { a: [1, "x", null], s: TRICKY, t: true },
      xs: ["a", "b,c", 'd"e', "f\\g", null, "NULL", "", "{}", TRICKY],
      js: [{ k: 1 }, "fox", [1, [2]], null, TRICKY],
      p: { a: 7, b: TRICKY, tags: ["x", 'y"', null] },
      f: 1.5,
      big: "9007199254740993",
    };
    const rows = await func("arg_echo", args).get();
    assert.deepEqual(rows, [{
      o_t: args.t,
      o_n: args.n,
      o_b: args.b,
      o_j: args.j,
      o_xs: args.xs,
      o_js: args.js,
      o_p: args.p,
      o_f: args.f,
      o_big: args.big,
    }]);

    // JSON scalars are JSON values (a string stays a JSON string); null is SQL NULL.
    for (const j of ["fox", 5, true, [1, "two"]]) {
      const [row] = await func("arg_echo", { t: "x", n: 1, b: true, j, xs: [] }).get() as {
        o_j: unknown;
      }[];
      assert.deepEqual(row.o_j, j);
    }
    const nulls = await func("arg_echo", {
      t: null,
      n: null,
      b: null,
      j: null,
      xs: null,
      js: [],
      p: { a: null, b: null, tags: [] },
      f: Infinity,
    }).get();
    assert.deepEqual(nulls, [{
      o_t: null,
      o_n: null,
      o_b: null,
      o_j: null,
      o_xs: null,
      o_js: [],
      o_p: { a: null, b: null, tags: [] },
      o_f: "Infinity",
      o_big: null,
    }]);
    // A multidimensional array literal.
    const [dims] = await func("arg_echo", {
      t: "x",
      n: 1,
      b: true,
      j: {},
      xs: [["a", "b"], ["c", null]],
    }).get() as { o_xs: unknown }[];
    assert.deepEqual(dims.o_xs, [["a", "b"], ["c", null]]);

    // Well-known params are values already: a string goes as it is.
    const wk = await client.wellknown("tracks_by_genre", { genre: "Jazz" }).get() as unknown[];
    assert.equal(wk.length, 10);

    // The same calls pass the type check.
    const typed = `import { func } from "./database.ts";
export const a = func("search_doc", { q: "fox" }, { select: ["id"] });
export const b = func("arg_echo", {
  t: "x", n: 1, b: true, j: { a: [1, "x"] }, xs: ["a", "b"],
  js: [{ k: 1 }, "s"], p: { a: 1, b: "b", tags: ["t"] }, f: 1.5, big: "1",
});
export async function ids(): Promise<number[]> {
  return (await a.get()).map((r) => r.id);
}
`;
    const out = await checkTypes(dir, typed, "uses.ts");
    assert.ok(out.success, out.output);
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("teardown", () => stopDb());
