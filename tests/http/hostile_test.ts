/**
 * Hostile and careless input around routes, multipart, health and privileges, through real HTTP
 * against a real PostgreSQL (svc connects as a NOINHERIT authenticator, as in production):
 * a route function's response description with a wrong type or value in any field answers 500
 * HTTP_ROUTE_RESPONSE_INVALID saying what was wrong (never a bare exception); a multipart part
 * header over 8 KiB is 400 HTTP_MULTIPART_INVALID; health ignores credentials; a relation the role
 * holds no privilege on is answered exactly like one that does not exist.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, token } from "../helpers/server.ts";

const fixture = `
create role authn login noinherit;
grant "~anonymous", app_user to authn;
create schema hz;
grant usage on schema hz to "~anonymous", app_user;
create table hz.log (id int generated always as identity primary key, note text);
grant select, insert on hz.log to "~anonymous", app_user;
-- Answers the response description the client posts (the function author's mistakes, on demand).
create function hz.respond(req jsonb, out resp jsonb, out content jsonb) volatile language sql as $$
  select req->'body'->'resp', req->'body'->'content'
$$;
comment on function hz.respond(jsonb) is 'route:: path: /respond';
-- The same, after writing a row: what a refused answer must not leave behind.
create function hz.respond_after_write(req jsonb, out resp jsonb, out content jsonb) volatile
language sql as $$
  insert into hz.log (note) values (req->'body'->>'note');
  select req->'body'->'resp', req->'body'->'content'
$$;
comment on function hz.respond_after_write(jsonb) is 'route:: path: /respond_after_write';
create function hz.echo(req jsonb, out resp jsonb, out content jsonb) volatile language sql as $$
  select null::jsonb, req
$$;
comment on function hz.echo(jsonb) is 'route:: path: /echo';
revoke execute on all functions in schema hz from public;
grant execute on all functions in schema hz to "~anonymous", app_user;
-- Exists, but no role of the requests holds any privilege on it.
create table canary (id int primary key, secret text);
insert into canary values (1, 'never-served');
revoke all on canary from public;
create function canary_fn() returns int language sql as 'select 1';
revoke execute on function canary_fn() from public;
-- Granted, but in a schema the request roles have no USAGE on.
create schema vault;
create table vault.canary (id int primary key);
grant select on vault.canary to "~anonymous", app_user;
-- Readable only: a write is PostgreSQL's permission denial, as before.
create table hz.ro (id int primary key);
grant select on hz.ro to "~anonymous", app_user;
`;
const uri = await chinookDb("hostile", fixture);
const srv = await startServer(uri.replace("://postgres@", "://authn@"), [
  "--http.typescript.enable=true",
]);

async function appUser(): Promise<Record<string, string>> {
  const t = now();
  return Object.fromEntries(
    new Headers(cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }))),
  );
}

/** POSTs a response description to /respond; the answer's status, code and body text. */
async function respond(
  resp: unknown,
  content: unknown = { ok: true },
): Promise<{ status: number; code: string | null; text: string; res: Response }> {
  const res = await srv.post("/respond", { resp, content });
  const text = await res.text();
  return { status: res.status, code: res.headers.get("x-svc-errorcode"), text, res };
}

Deno.test("a route's invalid cookie expires: 500 HTTP_ROUTE_RESPONSE_INVALID saying so", async () => {
  for (const expires of ["not a date", "hello 1", "5", "2026-13-45", "+275760-09-14T00:00:00Z"]) {
    const r = await respond({ cookies: { c: { value: "v", expires } } });
    assert.equal(r.status, 500, `${expires}: ${r.text}`);
    assert.equal(r.code, "HTTP_ROUTE_RESPONSE_INVALID", `${expires}: ${r.text}`);
    const body = JSON.parse(r.text);
    assert.match(body.message, /cookie c: expires/, r.text);
    assert.equal(body.stack, undefined);
    assert.deepEqual(r.res.headers.getSetCookie(), []);
  }
  // A date without a time zone would depend on the server's: refused the same way.
  const local = await respond({ cookies: { c: { value: "v", expires: "2030-01-02T03:04:05" } } });
  assert.equal(local.code, "HTTP_ROUTE_RESPONSE_INVALID", local.text);
});

Deno.test("a route's cookie expires: ISO 8601 with a zone, PostgreSQL's text, HTTP dates", async () => {
  const want = "Expires=Wed, 02 Jan 2030 03:04:05 GMT";
  for (
    const expires of [
      "2030-01-02T03:04:05Z",
      "2030-01-02T03:04:05.123456+00:00",
      "2030-01-02 05:04:05+02",
      "2030-01-02T01:04:05-02:00",
      "Wed, 02 Jan 2030 03:04:05 GMT",
    ]
  ) {
    const r = await respond({ cookies: { c: { value: "v", expires } } });
    assert.equal(r.status, 200, `${expires}: ${r.text}`);
    const [c] = r.res.headers.getSetCookie();
    assert.ok(c.includes(want), `${expires}: ${c}`);
  }
  const day = await respond({ cookies: { c: { value: "v", expires: "2030-01-02" } } });
  assert.ok(day.res.headers.getSetCookie()[0].includes("Expires=Wed, 02 Jan 2030 00:00:00 GMT"));
});

Deno.test("every field of a route's response with a wrong type or value: a clear 500", async () => {
  const cases: [string, unknown, RegExp][] = [
    ["resp is an array", [1], /resp is not an object/],
    ["status a string", { status: "200" }, /status/],
    ["status 101", { status: 101 }, /status/],
    ["status 700", { status: 700 }, /status/],
    ["status 200.5", { status: 200.5 }, /status/],
    ["headers an array", { headers: ["x"] }, /headers/],
    ["header value an object", { headers: { "x-a": { v: 1 } } }, /header x-a/],
    ["header value nested array", { headers: { "x-a": [["a"]] } }, /header x-a/],
    ["header name with a space", { headers: { "x a": "1" } }, /header name/],
    ["header value beyond Latin-1", { headers: { "x-a": "€" } }, /header x-a/],
    ["header value with CR LF", { headers: { "x-a": "a\r\nx-b: 1" } }, /header x-a/],
    ["cookies an array", { cookies: ["a"] }, /cookies/],
    ["cookie an array", { cookies: { c: [1] } }, /cookie c/],
    ["cookie value an object", { cookies: { c: { value: { a: 1 } } } }, /cookie c: value/],
    ["cookie name with a space", { cookies: { "a b": "1" } }, /cookie name/],
    ["cookie max_age a string", { cookies: { c: { value: "v", max_age: "60" } } }, /max_age/],
    ["cookie max_age 1e300", { cookies: { c: { value: "v", max_age: 1e300 } } }, /max_age/],
    [
      "cookie http_only a string",
      { cookies: { c: { value: "v", http_only: "false" } } },
      /http_only/,
    ],
    ["cookie secure a number", { cookies: { c: { value: "v", secure: 0 } } }, /secure/],
    [
      "cookie same_site lower case",
      { cookies: { c: { value: "v", same_site: "lax" } } },
      /same_site/,
    ],
    ["cookie path a number", { cookies: { c: { value: "v", path: 1 } } }, /path/],
    ["cookie path with ;", { cookies: { c: { value: "v", path: "/;x" } } }, /path/],
    ["cookie domain invalid", { cookies: { c: { value: "v", domain: "a b" } } }, /domain/],
    ["cookie attribute misspelt", { cookies: { c: { value: "v", maxAge: 5 } } }, /maxAge/],
    ["redirect a number", { redirect: 5 }, /redirect/],
    ["csp an object", { csp: { a: 1 } }, /csp/],
    ["template a number", { template: 5 }, /template/],
    ["jwt a string", { jwt: "x" }, /jwt/],
    ["jwt without role", { jwt: { sub: "x" } }, /jwt/],
    // svc frames the answer itself: hop-by-hop and framing headers are not the function's.
    ["header connection", { headers: { Connection: "upgrade" } }, /header Connection/],
    ["header upgrade", { headers: { upgrade: "websocket" } }, /header upgrade/],
    ["header transfer-encoding", { headers: { "transfer-encoding": "gzip" } }, /transfer-encoding/],
    ["header content-length", { headers: { "content-length": "1" } }, /content-length/],
    ["header keep-alive", { headers: { "keep-alive": "timeout=5" } }, /keep-alive/],
  ];
  for (const [what, resp, reason] of cases) {
    const r = await respond(resp);
    assert.equal(r.status, 500, `${what}: ${r.text}`);
    assert.equal(r.code, "HTTP_ROUTE_RESPONSE_INVALID", `${what}: ${r.text}`);
    const body = JSON.parse(r.text);
    assert.match(body.message, reason, `${what}: ${r.text}`);
    assert.equal(body.stack, undefined, what);
    assert.equal(r.res.headers.get("x-a"), null, what);
    assert.deepEqual(r.res.headers.getSetCookie(), [], what);
  }
});

Deno.test("a Location header is checked like redirect, before the function's write commits", async () => {
  const notes = async (note: string) => {
    const res = await srv.post("/svc", {
      relation: "log",
      schema: "hz",
      select: ["note"],
      where: ["=", "note", [note]],
    });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    return (JSON.parse(text) as unknown[]).length;
  };
  for (
    const headers of [
      { Location: "//evil.com" },
      { location: ["/\\evil.com"] },
      { LOCATION: "/%09/evil.com" },
    ]
  ) {
    const note = `loc-${JSON.stringify(headers)}`;
    const res = await fetch(srv.url + "/respond_after_write", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ note, resp: { status: 302, headers } }),
      redirect: "manual",
    });
    const text = await res.text();
    assert.equal(res.status, 400, text);
    assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_UNSAFE_REDIRECT");
    assert.equal(res.headers.get("location"), null);
    assert.equal(await notes(note), 0, `${note}: rolled back`);
  }
  const ok = await fetch(srv.url + "/respond_after_write", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ note: "loc-ok", resp: { status: 302, headers: { Location: "/é" } } }),
    redirect: "manual",
  });
  await ok.body?.cancel();
  assert.equal(ok.status, 302);
  assert.equal(ok.headers.get("location"), "/%C3%A9");
  assert.equal(await notes("loc-ok"), 1);
});

Deno.test("a route's null-body status with content answers without a body, never a 500", async () => {
  for (const status of [204, 205, 304]) {
    const r = await respond({ status }, { ignored: true });
    assert.equal(r.status, status, r.text);
    assert.equal(r.text, "");
  }
});

/** A multipart body with one part whose header block is `header` (CRLF-separated lines). */
function multipart(header: string, value = "v"): { body: string; type: string } {
  const b = "hostileboundary";
  return {
    body: `--${b}\r\n${header}\r\n\r\n${value}\r\n--${b}--\r\n`,
    type: `multipart/form-data; boundary=${b}`,
  };
}

async function postMultipart(header: string, value?: string): Promise<Response> {
  const { body, type } = multipart(header, value);
  return await fetch(srv.url + "/echo", {
    method: "POST",
    headers: { "content-type": type },
    body,
  });
}

Deno.test("multipart: a part header over 8 KiB is 400 HTTP_MULTIPART_INVALID, never truncated", async () => {
  const name = "f".repeat(9000);
  const res = await postMultipart(`Content-Disposition: form-data; name="${name}"`);
  const text = await res.text();
  assert.equal(res.status, 400, text.slice(0, 200));
  assert.equal(res.headers.get("x-svc-errorcode"), "HTTP_MULTIPART_INVALID");
  assert.match(JSON.parse(text).message, /part header/);
  // A long filler header ahead of the Content-Type would have dropped the type silently.
  const filler = await postMultipart(
    `Content-Disposition: form-data; name="a"; filename="a.bin"\r\nX-Filler: ${"x".repeat(9000)}` +
      "\r\nContent-Type: application/octet-stream",
  );
  assert.equal(filler.status, 400, await filler.clone().text());
  await filler.body?.cancel();
  // Just under the limit is read whole.
  const near = "n".repeat(8000);
  const ok = await postMultipart(`Content-Disposition: form-data; name="${near}"`);
  const req = (await ok.json()) as { body: Record<string, unknown> };
  assert.equal(ok.status, 200);
  assert.equal(req.body[near], "v");
});

Deno.test("multipart: a part without Content-Type is text/plain (RFC 7578)", async () => {
  const res = await postMultipart(
    `Content-Disposition: form-data; name="f"; filename="a.txt"`,
    "hi",
  );
  const req = (await res.json()) as {
    body: { f: { content_type: string; content_base64: string } };
  };
  assert.equal(res.status, 200);
  assert.equal(req.body.f.content_type, "text/plain");
  assert.equal(atob(req.body.f.content_base64), "hi");
});

Deno.test("health ignores credentials: a bad Bearer token or cookie never fails it", async () => {
  for (const path of ["/svc/health", "/svc/health/ready", "/svc/health/live"]) {
    for (
      const headers of [
        { authorization: "Bearer not-a-token" } as Record<string, string>,
        { authorization: "Bearer" },
        { authorization: "Bearer a b" },
        { cookie: "accesstoken=garbage" },
      ]
    ) {
      const res = await fetch(srv.url + path, { headers });
      const text = await res.text();
      assert.equal(res.status, 200, `${path} ${JSON.stringify(headers)}: ${text}`);
      assert.equal(res.headers.get("www-authenticate"), null);
      assert.deepEqual(res.headers.getSetCookie(), [], `${path}: no cookie cleared`);
    }
  }
});

Deno.test("a cookie that percent-decodes to NUL reaches routes undecoded, never failing them", async () => {
  // A sibling site can plant such a cookie: it must not make every route (and middleware) fail.
  const res = await fetch(srv.url + "/echo", {
    method: "POST",
    headers: { cookie: "a=%00; b=x%20y; c=%E0%A4%A" },
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.deepEqual(JSON.parse(text).cookies, { a: "%00", b: "x y", c: "%E0%A4%A" });
});

/** Sends `head` (request line and headers, CRLF-separated, as raw bytes) and reads the answer. */
async function rawRequest(head: Uint8Array): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: Number(new URL(srv.url).port) });
  try {
    await conn.write(head);
    return await new Response(conn.readable).text();
  } catch (e) {
    try {
      conn.close();
    } catch { /* closed */ }
    throw e;
  }
}

Deno.test("a cookie or header sent as raw UTF-8 bytes: cookies decoded, headers as Latin-1", async () => {
  const enc = new TextEncoder();
  const head = (extra: string) => {
    const a = enc.encode("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra);
    return a;
  };
  const bytes = new Uint8Array([
    ...head("Content-Length: 0\r\nCookie: a=caf"),
    0xc3,
    0xa9,
    ...enc.encode("; b=caf"),
    0xe9,
    ...enc.encode("\r\nX-Name: caf"),
    0xc3,
    0xa9,
    ...enc.encode("\r\n\r\n"),
  ]);
  const answer = await rawRequest(bytes);
  const body = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4));
  // The cookie's bytes are read as UTF-8 (as its %-escapes are); one that is not stays as sent.
  assert.equal(body.cookies.a, "café");
  assert.equal(body.cookies.b, "caf\u00e9");
  assert.equal(body.headers["x-name"], "caf\u00c3\u00a9");
});

/** An answer with `name` replaced by X, to compare the shapes of two answers. */
async function shape(res: Promise<Response>, name: string): Promise<string> {
  const r = await res;
  const text = await r.text();
  // The length follows the name's: left out.
  const headers = [...r.headers].filter(([k]) =>
    !["date", "x-request-id", "content-length"].includes(k)
  );
  return JSON.stringify([r.status, headers, text.replaceAll(name, "X")]);
}

Deno.test("a relation without a grant is answered like one that does not exist", async () => {
  const mismatches: string[] = [];
  for (const headers of [{}, await appUser()]) {
    const both = async (f: (name: string) => Promise<Response>) => {
      const a = await shape(f("canary"), "canary");
      const b = await shape(f("no_such_tbl"), "no_such_tbl");
      if (a !== b) mismatches.push(`${f}\n  ${a}\n  ${b}`);
      return a;
    };
    const json = { "content-type": "application/json", ...headers };
    const post = (body: unknown) =>
      fetch(srv.url + "/svc", { method: "POST", headers: json, body: JSON.stringify(body) });
    // Reads: POST, GET, a join, a batch.
    assert.match(await both((n) => post({ relation: n })), /QUERY_UNKNOWN_RELATION/);
    await both((n) => post({ relation: n, select: ["id", "secret"], where: ["=", "id", 1] }));
    // Neither its columns nor their types show through another error.
    await both((n) => post({ relation: n, select: ["zzz"] }));
    await both((n) => post({ relation: n, where: ["=", "id", "abc"] }));
    await both((n) => post({ relation: n, order_by: ["nope"] }));
    await both((n) => post({ query: { relation: n }, count: true }));
    await both((n) => post({ schema: "vault", relation: n }));
    await both((n) => fetch(srv.url + `/svc?relation=${n}`, { headers }));
    await both((n) =>
      post({ relation: "artist", join: { x: { relation: n, on: [["artist_id", "id"]] } } })
    );
    await both((n) => post([{ relation: "artist", limit: 1 }, { relation: n }]));
    await both((n) => post({ relation: "public." + n }));
    // Writes, as the root and as a child.
    await both((n) => post({ query: { relation: n, select: ["id"] }, data: [{ id: 2 }] }));
    await both((n) =>
      post({
        query: {
          relation: "artist",
          select: ["artist_id", { x: { relation: n, select: ["id"] } }],
        },
        data: [{ artist_id: 1, x: [{ id: 3 }] }],
      })
    );
    // Functions.
    await both((n) => post({ function: n + "_fn" }));
    await both((n) => fetch(srv.url + `/svc?relation=${n}&select=zzz`, { headers }));
    // Describing and client generation mention neither.
    for (const path of ["/svc/database.json", "/svc/database.ts"]) {
      const res = await fetch(srv.url + path, { headers });
      const text = await res.text();
      assert.equal(res.status, 200, path);
      assert.doesNotMatch(text, /canary/, path);
    }
  }
  assert.deepEqual(mismatches, []);
  // A relation the role may read but not write still answers PostgreSQL's denial.
  const denied = await srv.post("/svc", {
    query: { relation: "ro", schema: "hz" },
    data: [{ id: 1 }],
  });
  assert.equal(denied.status, 403, await denied.clone().text());
  assert.equal((await denied.json()).code, "PG_42501");
});

Deno.test("stop", async () => {
  await srv.stop();
  await stopDb();
});
