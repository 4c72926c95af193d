/**
 * database.json and the generated database.ts (served and written to `typescript.helper_path`)
 * describe only the functions `/svc` calls: a full-control route, a middleware and an SSO callback
 * function, which `/svc` answers as unknown (404 QUERY_UNKNOWN_RELATION,
 * src/query/envelope_functions.ts), are in neither; a simple route's function and a plain one are.
 * Checked against a real server: every function of the schema is described exactly when `/svc`
 * calls it, and `func()` on a hidden one fails `deno check`.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, postSvc, startServer, type TestServer, token } from "../helpers/server.ts";
import { checkTypes } from "./check.ts";

const uri = await chinookDb(
  "hidden_functions",
  `
  create schema hf;
  grant usage on schema hf to "~anonymous", app_user;
  -- Functions /svc calls: a plain one and a simple route's.
  create function hf.numbers(n int) returns setof int stable language sql
    as $$ select generate_series(1, n) $$;
  create function hf.simple(n int) returns int stable language sql as $$ select n $$;
  comment on function hf.simple(int) is 'route:: path: /hf/simple';
  -- Functions /svc refuses: a full-control route, a middleware, an SSO callback.
  create function hf.page(req jsonb, out resp jsonb, out content jsonb) stable language sql
    as $$ select null::jsonb, req $$;
  comment on function hf.page(jsonb) is 'route:: path: /hf/page';
  create function hf.guard(req jsonb, out resp jsonb, out content jsonb) stable language sql
    as $$ select null::jsonb, null::jsonb $$;
  comment on function hf.guard(jsonb) is 'route:: path: /hf, middleware: true';
  create function hf.sso_login(payload jsonb) returns jsonb stable language sql
    as $$ select jsonb_build_object('jwt', jsonb_build_object('role', 'app_user')) $$;
  grant execute on all functions in schema hf to "~anonymous", app_user;
`,
);

const CALLED = ["guard", "numbers", "page", "simple", "sso_login"];
const SHOWN = ["numbers", "simple"];

async function userAuth(): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
}

/** The names of schema hf's functions in a database.json document. */
function jsonFunctions(doc: { schemas: { name: string; functions: { name: string }[] }[] }) {
  return (doc.schemas.find((s) => s.name === "hf")?.functions ?? []).map((f) => f.name).sort();
}

/** The names of schema hf's functions in a database.ts text (interface Functions and META.f). */
function tsFunctions(text: string): { typed: string[]; meta: string[] } {
  const iface = text.slice(
    text.indexOf("export interface Functions {"),
    text.indexOf("export interface WellKnowns {"),
  );
  const meta = text.slice(text.indexOf("const META: Meta"));
  const names = (part: string, re: RegExp) => [...part.matchAll(re)].map((m) => m[1]).sort();
  return {
    typed: names(iface, /^ {2}"hf\.(\w+)": \{/gm),
    meta: names(meta.slice(meta.indexOf("  f: {")), /^ {4}"hf\.(\w+)": \[/gm),
  };
}

async function serve(flags: string[] = []): Promise<TestServer> {
  return await startServer(uri, [
    "--http.typescript.enable=true",
    "--http.functions.sso_callback=hf.sso_login",
    ...flags,
  ]);
}

Deno.test("database.ts describes a function exactly when /svc calls it; database.json every one", async () => {
  const srv = await serve();
  try {
    for (const auth of [{}, await userAuth()]) {
      // What /svc calls (a hidden function answers 404 QUERY_UNKNOWN_RELATION).
      const called: string[] = [];
      for (const name of CALLED) {
        const args = name === "numbers" || name === "simple" ? { n: 1 } : {};
        const a = await postSvc(srv, { function: name, schema: "hf", arguments: args }, auth);
        if (a.code !== "QUERY_UNKNOWN_RELATION") called.push(name);
        else assert.equal(a.status, 404);
      }
      assert.deepEqual(called, SHOWN);

      // database.json lists every function the role may call with its route (full-control
      // routes and middleware are called over their route); the client offers only /svc's.
      const json = await srv.get("/svc/database.json", auth);
      assert.equal(json.status, 200);
      assert.deepEqual(jsonFunctions(await json.json()), CALLED);

      const ts = await srv.get("/svc/database.ts", auth);
      assert.equal(ts.status, 200);
      const text = await ts.text();
      assert.deepEqual(tsFunctions(text), { typed: SHOWN, meta: SHOWN });
    }
  } finally {
    await srv.stop();
  }
});

Deno.test("typescript.helper_path leaves out the functions /svc refuses", async () => {
  const dir = await Deno.makeTempDir({ prefix: "svc-hidden-" });
  const srv = await serve([`--typescript.helper_path=${dir}/database.ts`]);
  try {
    const text = await Deno.readTextFile(`${dir}/database.ts`);
    assert.deepEqual(tsFunctions(text), { typed: SHOWN, meta: SHOWN });
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("func() on a function /svc refuses does not type-check", async () => {
  const srv = await serve();
  const dir = await Deno.makeTempDir({ prefix: "svc-hidden-" });
  try {
    const res = await srv.get("/svc/database.ts", await userAuth());
    await Deno.writeTextFile(`${dir}/database.ts`, await res.text());
    const uses = `import { func } from "./database.ts";
export const ok = func("hf.numbers", { n: 3 });
// @ts-expect-error a full-control route is not callable through /svc
export const page = func("hf.page", { req: {} });
// @ts-expect-error nor a middleware
export const guard = func("hf.guard", { req: {} });
// @ts-expect-error nor an SSO callback
export const sso = func("hf.sso_login", { payload: {} });
`;
    const out = await checkTypes(dir, uses, "uses.ts");
    assert.ok(out.success, out.output);
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("teardown", () => stopDb());
