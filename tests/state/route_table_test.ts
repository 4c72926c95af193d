/** Route declarations, matching and simple-route SQL: pure unit tests (no database). */
import assert from "node:assert/strict";
import type { RouteConfig } from "../../src/config/load.ts";
import {
  compilePattern,
  declareRoutes,
  parseComment,
  parseMethods,
  RouteConfigError,
  routeInfo,
} from "../../src/state/route_table.ts";
import { matchRoute, middlewareFor } from "../../src/http/routes/match.ts";
import { simpleStatement } from "../../src/http/routes/call.ts";
import { SvcError } from "../../src/svc_error.ts";
import { fn, schemaWith } from "../http/routes/fake.ts";

const ANON = "~anonymous";
const cfgRoute = (r: Partial<RouteConfig>): RouteConfig => ({
  stream_upload: false,
  middleware: false,
  ...r,
});

Deno.test("comment parsing: path, several methods, surrounding text", () => {
  assert.deepEqual(parseComment("Gets one.\nroute:: path: /x/{id}, method: GET, POST\nmore"), {
    path: "/x/{id}",
    method: "GET,POST",
  });
  assert.deepEqual(parseComment("route:: path: /p, middleware: true"), {
    path: "/p",
    middleware: "true",
  });
  assert.equal(parseComment("no declaration here"), null);
  assert.deepEqual(parseMethods("get, post,HEAD"), ["GET", "POST"]);
  assert.throws(() => parseMethods("FETCH"), /unknown method/);
});

Deno.test("path patterns: placeholders are whole segments, no duplicates", () => {
  assert.equal(compilePattern("/a/{id}/b").key, "/a/{}/b");
  assert.throws(() => compilePattern("a"), /start with/);
  assert.throws(() => compilePattern("/a/x{id}"), /whole segment/);
  assert.throws(() => compilePattern("/a/{id}/{id}"), /twice/);
  // Paths no request can reach: clients resolve dot segments, and paths are matched decoded.
  assert.throws(() => compilePattern("/d/../etc"), /\. or \.\. segment/);
  assert.throws(() => compilePattern("/d/./x"), /\. or \.\. segment/);
  assert.throws(() => compilePattern("/p%41"), /matched decoded/);
});

Deno.test("method inference: IMMUTABLE/STABLE → GET, VOLATILE → POST", () => {
  const s = schemaWith([
    fn("app", "i", { volatility: "immutable", comment: "route:: path: /i" }),
    fn("app", "s", { volatility: "stable", comment: "route:: path: /s" }),
    fn("app", "v", { volatility: "volatile", comment: "route:: path: /v" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.deepEqual(t.routes.map((r) => [r.id, r.methods]), [
    ["app.i", ["GET"]],
    ["app.s", ["GET"]],
    ["app.v", ["POST"]],
  ]);
  assert.deepEqual(t.warnings, []);
});

Deno.test("/auth/ and /svc cannot be declared: config error, comment warning", () => {
  const s = schemaWith([
    fn("app", "a", { comment: "route:: path: /auth/x" }),
    fn("app", "b", { comment: "route:: path: /svc/x" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.equal(t.routes.length, 0);
  assert.equal(t.warnings.length, 2);
  assert.match(t.warnings[0], /reserved/);
  assert.throws(
    () => declareRoutes(s, { app: { a: cfgRoute({ path: "/svc" }) } }, ANON),
    (e: Error) => e instanceof RouteConfigError && /route\.app\.a/.test(e.message),
  );
});

Deno.test("same method + pattern: the later is deactivated with a warning naming both", () => {
  const s = schemaWith([
    fn("app", "first", { comment: "route:: path: /d/{x}, method: GET" }),
    fn("app", "second", { comment: "route:: path: /d/{y}, method: GET, POST" }),
    fn("app", "third", { comment: "route:: path: /d/{y}, method: PUT" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.deepEqual(t.routes.map((r) => r.id), ["app.first", "app.third"]);
  assert.equal(t.warnings.length, 1);
  assert.match(t.warnings[0], /app\.second.*conflicts with.*app\.first/);
});

Deno.test("configuration wins over the comment; a missing function is an error", () => {
  const s = schemaWith([fn("app", "f", { comment: "route:: path: /from-comment" })]);
  const t = declareRoutes(
    s,
    { app: { f: cfgRoute({ path: "/from-config", method: "PUT" }) } },
    ANON,
  );
  assert.deepEqual(t.routes.map((r) => [r.pattern.text, r.methods]), [["/from-config", ["PUT"]]]);
  assert.match(t.warnings[0], /ignored/);
  assert.throws(
    () => declareRoutes(s, { app: { nope: cfgRoute({ path: "/x" }) } }, ANON),
    /route\.app\.nope: no function/,
  );
});

Deno.test("overloads: a comment names its own signature; config matching several is an error", () => {
  const s = schemaWith([
    fn("app", "o", { args: [["a", "integer"]], comment: "route:: path: /o/int" }),
    fn("app", "o", { args: [["a", "text"]], comment: "route:: path: /o/text" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.deepEqual(t.routes.map((r) => [r.pattern.text, r.fn.inArgs[0].type]), [
    ["/o/int", "integer"],
    ["/o/text", "text"],
  ]);
  assert.throws(
    () => declareRoutes(s, { app: { o: cfgRoute({ path: "/o" }) } }, ANON),
    /route\.app\.o matches several functions \(app\.o\(integer\); app\.o\(text\)\)/,
  );
});

Deno.test("middleware: full-control only, ordered longest prefix then name", () => {
  const mw = (name: string, path: string) =>
    fn("app", name, { fullControl: true, comment: `route:: path: ${path}, middleware: true` });
  const s = schemaWith([
    mw("zz", "/"),
    mw("bb", "/api/v1"),
    mw("aa", "/api"),
    mw("ab", "/api"),
    fn("app", "notfc", { comment: "route:: path: /x, middleware: true" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.deepEqual(t.middleware.map((m) => m.id), ["app.bb", "app.aa", "app.ab", "app.zz"]);
  assert.ok(t.warnings.some((w) => /app\.notfc/.test(w) && /jsonb/.test(w)));
  assert.deepEqual(middlewareFor(t, "/api/v1/x").map((m) => m.id), [
    "app.bb",
    "app.aa",
    "app.ab",
    "app.zz",
  ]);
  assert.deepEqual(middlewareFor(t, "/apix").map((m) => m.id), ["app.zz"]);
  assert.deepEqual(middlewareFor(t, "/svc").map((m) => m.id), ["app.zz"]);
});

Deno.test("anonymous reachability: PUBLIC alone does not count; PUBLIC is warned about", () => {
  const s = schemaWith([
    fn("app", "anon", { comment: "route:: path: /a", grantees: [ANON] }),
    fn("app", "pub", { comment: "route:: path: /p", grantees: [""] }),
    fn("app", "user", { comment: "route:: path: /u", grantees: ["app_user"] }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  assert.deepEqual(
    t.routes.map((r) => [r.id, r.anonymousReachable]),
    [["app.anon", true], ["app.pub", false], ["app.user", false]],
  );
  assert.equal(t.warnings.length, 1);
  assert.match(t.warnings[0], /app\.pub\(\) is executable by PUBLIC/);
  // No anonymous role at all: nothing is reachable.
  assert.ok(declareRoutes(s, {}, "nobody").routes.every((r) => !r.anonymousReachable));
});

Deno.test("matching: literal beats placeholder, HEAD follows GET, 405 lists Allow", () => {
  const s = schemaWith([
    fn("app", "byid", { volatility: "stable", comment: "route:: path: /u/{id}" }),
    fn("app", "new", { volatility: "stable", comment: "route:: path: /u/new" }),
    fn("app", "put", { comment: "route:: path: /u/{id}, method: PUT" }),
  ]);
  const t = declareRoutes(s, {}, ANON);
  const m = matchRoute(t, "GET", "/u/new");
  assert.ok(m.kind === "route" && m.route.id === "app.new");
  const p = matchRoute(t, "HEAD", "/u/h%C3%A9");
  assert.ok(p.kind === "route" && p.route.id === "app.byid");
  assert.deepEqual(p.params, { id: "hé" });
  assert.deepEqual(matchRoute(t, "DELETE", "/u/1"), {
    kind: "method",
    allow: ["GET", "HEAD", "PUT"],
  });
  assert.deepEqual(matchRoute(t, "GET", "/u"), { kind: "none" });
  assert.deepEqual(matchRoute(t, "GET", "/u/1/x"), { kind: "none" });
  assert.deepEqual(matchRoute(t, "GET", "/u/%zz"), { kind: "none" });
  assert.deepEqual(routeInfo(t).get("app.put"), {
    path: "/u/{id}",
    methods: ["PUT"],
    middleware: false,
    template: null,
  });
});

Deno.test("simple-route SQL: precedence, defaults, casts as bind parameters", () => {
  const f = fn("app", "f", {
    args: [["id", "integer"], ["name", "text"], ["tags", "text[]"], ["opt", "integer", true]],
    returns: "jsonb",
  });
  const st = simpleStatement(f, {
    params: { id: "7" },
    query: { id: "8", name: "q" },
    body: { name: "b", tags: ["x"] },
  });
  assert.equal(
    st.sql,
    `select to_json(r.*)::text from "app"."f"("id" => $1::text::integer, "name" => $2::text::text, ` +
      `"tags" => (select coalesce(array_agg(x), '{}') from jsonb_array_elements_text($3::text::jsonb) x)::text[]) r`,
  );
  assert.deepEqual(st.params, ["7", "q", '["x"]']);
  assert.throws(
    () => simpleStatement(f, { params: {}, query: {}, body: { id: 1 } }),
    (e: Error) => e instanceof SvcError && e.status === 400 && /"name"/.test(e.message),
  );
  assert.throws(
    () => simpleStatement(f, { params: {}, query: {}, body: { id: 1, name: "n", evil: 1 } }),
    (e: Error) => e instanceof SvcError && /no argument "evil"/.test(e.message),
  );
  const set = simpleStatement(fn("app", "s", { set: true }), { params: {}, query: {}, body: null });
  assert.match(set.sql, /json_agg/);
});
