/**
 * The generated client (GET /svc/database.ts) against a running server: its queries give the
 * same answers as the same JSON sent by hand, its types pass `deno check` on the typed-query
 * file (and the check fails when an expected error is removed), the endpoint is role-filtered,
 * cacheable and schema-selectable, and the file is deterministic and small.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { cookie, now, startServer, type TestServer, token } from "../helpers/server.ts";
import { NODE, testWith } from "../helpers/requires.ts";
import { CLIENT_SOURCE } from "../../src/client/client_source.ts";
import { clientsGenerated } from "../../src/client/endpoint.ts";
import { checkTypes, TYPED_QUERIES } from "./check.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const EXTRA = `
create function albums_of(aid integer) returns setof album language sql stable
  as $$ select * from album where artist_id = aid order by album_id $$;
create function title_upper(album) returns text language sql stable as $$ select upper($1.title) $$;
create table staff_note (note_id int generated always as identity primary key, body text not null);
grant select on staff_note to app_user;
`;

interface Client {
  configure(c: Record<string, unknown>): void;
  relation(name: string, q?: unknown): Querier;
  func(name: string, args: unknown, q?: unknown): Querier;
  wellknown(name: string, params?: unknown): Querier;
  SvcError: new (...a: unknown[]) => Error & { code: string; status: number };
}
interface Querier {
  query: Record<string, unknown>;
  get(opts?: unknown): Promise<unknown>;
  write(data: unknown[], opts?: unknown): Promise<unknown>;
}

async function setup(): Promise<
  { srv: TestServer; dir: string; client: Client; auth: HeadersInit }
> {
  const uri = await chinookDb("chinook_ts", EXTRA);
  const srv = await startServer(uri, [
    "--http.typescript.enable=true",
    `--pg.query.wellknown_path=${ROOT}wellknown`,
    "--pg.query.allow_rollback=true",
    "--pg.query.allow_stats=true",
  ]);
  const auth = await userAuth();
  const res = await srv.get("/svc/database.ts", auth);
  assert.deepEqual(res.status, 200);
  const dir = await Deno.makeTempDir({ prefix: "svc-ts-" });
  await Deno.writeTextFile(`${dir}/database.ts`, await res.text());
  const client = await import(`file://${dir}/database.ts`) as Client;
  client.configure({ baseUrl: srv.url, headers: Object.fromEntries(new Headers(auth)) });
  return { srv, dir, client, auth };
}

/** A query tree without the `schema` fields the builder adds. */
function withoutSchema(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(withoutSchema);
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(
    Object.entries(v).filter(([k]) => k !== "schema").map(([k, x]) => [k, withoutSchema(x)]),
  );
}

/** Session cookie of the demo's writing role. */
async function userAuth(): Promise<HeadersInit> {
  const t = now();
  return cookie(await token({ role: "app_user", iat: t, exp: t + 1800, auth_time: t }));
}

async function rejects(
  f: () => Promise<unknown>,
): Promise<Error & { code: string; status: number }> {
  try {
    await f();
  } catch (e) {
    return e as Error & { code: string; status: number };
  }
  throw new Error("expected a rejection");
}

async function raw(srv: TestServer, body: unknown, auth: HeadersInit): Promise<unknown> {
  const r = await srv.post("/svc", body, auth);
  const j = await r.json();
  assert.deepEqual(r.status, 200, JSON.stringify(j));
  return j;
}

Deno.test("generated client: reads, writes, well-known and function match raw JSON", async () => {
  const { srv, dir, client, auth } = await setup();
  try {
    const { relation, func, wellknown } = client;
    // 3-level nested read.
    const q = relation("artist", (j: Record<string, (q?: unknown) => unknown>) => ({
      where: ["<", "artist_id", 4],
      order_by: ["artist_id"],
      select: { id: "artist_id", name: "name", albums: "albums" },
      join: {
        albums: j.album((j: Record<string, (q?: unknown) => unknown>) => ({
          select: ["title", "tracks"],
          order_by: ["album_id"],
          join: {
            tracks: j.track({ select: ["name", "genre"], order_by: ["track_id"], join: {} }),
          },
        })),
      },
    }));
    const rawTree = {
      relation: "artist",
      where: ["<", "artist_id", 4],
      order_by: ["artist_id"],
      select: { id: "artist_id", name: "name", albums: "albums" },
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          select: ["title", "tracks"],
          order_by: ["album_id"],
          join: {
            tracks: {
              relation: "track",
              on: { album_id: "album_id" },
              select: ["name"],
              order_by: ["track_id"],
            },
          },
        },
      },
    };
    await rejects(() => q.get()); // "genre" is not joined: server says no
    const q2 = relation("artist", (j: Record<string, (q?: unknown) => unknown>) => ({
      ...rawTree,
      join: {
        albums: j.album((j: Record<string, (q?: unknown) => unknown>) => ({
          select: ["title", "tracks"],
          order_by: ["album_id"],
          join: { tracks: j.track({ select: ["name"], order_by: ["track_id"] }) },
        })),
      },
    }));
    // The builder filled in 'on' from the foreign keys: the tree is the hand-written one.
    assert.deepEqual(withoutSchema(q2.query), rawTree);
    const got = await q2.get() as { albums: { tracks: unknown[] }[] }[];
    assert.deepEqual(got, await raw(srv, rawTree, auth));
    assert.deepEqual(got.length, 3);
    assert.ok(got[0].albums[0].tracks.length > 0);

    // Nested write: an invoice with two lines; the read-back equals a raw read of it.
    const inv = relation("invoice", (j: Record<string, (q?: unknown) => unknown>) => ({
      select: ["invoice_id", "customer_id", "invoice_date", "total", "lines"],
      join: {
        lines: j.invoice_line({
          select: ["invoice_line_id", "track_id", "unit_price", "quantity"],
          order_by: ["invoice_line_id"],
        }),
      },
    }));
    const written = await inv.write([{
      customer_id: 1,
      invoice_date: "2026-01-01T00:00:00",
      total: "1.98",
      lines: [{ track_id: 1, unit_price: 0.99, quantity: 1 }, {
        track_id: 2,
        unit_price: 0.99,
        quantity: 1,
      }],
    }]) as { invoice_id: number; lines: unknown[] }[];
    assert.deepEqual(written[0].lines.length, 2);
    const back = await raw(srv, {
      relation: "invoice",
      where: ["=", "invoice_id", written[0].invoice_id],
      select: ["invoice_id", "customer_id", "invoice_date", "total", "lines"],
      join: {
        lines: {
          relation: "invoice_line",
          on: { invoice_id: "invoice_id" },
          select: ["invoice_line_id", "track_id", "unit_price", "quantity"],
          order_by: ["invoice_line_id"],
        },
      },
    }, auth);
    assert.deepEqual(written, back);
    // The same write as raw JSON with rollback gives the same shape; stats are typed envelopes.
    const env = await inv.write([{ customer_id: 1, invoice_date: "2026-01-02", total: 1 }], {
      rollback: true,
      stats: true,
    }) as { stats: { inserted: number }[] };
    assert.deepEqual(env.stats[0].inserted, 1);

    // Well-known query.
    const wk = await wellknown("artist_albums", { artist_id: 1 }).get();
    assert.deepEqual(
      wk,
      await raw(srv, { wellknown: "artist_albums", params: { artist_id: 1 } }, auth),
    );
    assert.deepEqual((wk as unknown[]).length, 1);

    // Function, with a computed field selected.
    const fq = func("albums_of", { aid: 1 }, { select: ["title", "title_upper"] });
    const fr = await fq.get();
    assert.deepEqual(
      fr,
      await raw(srv, {
        function: "albums_of",
        arguments: { aid: 1 },
        select: ["title", "title_upper"],
      }, auth),
    );
    assert.deepEqual(
      (fr as { title_upper: string }[])[0].title_upper,
      "FOR THOSE ABOUT TO ROCK WE SALUTE YOU",
    );

    // Errors carry code, status, details.
    const err = await rejects(() => wellknown("artist_albums", { artist_id: "x" }).get());
    assert.ok(err instanceof client.SvcError);
    assert.deepEqual(err.status, 400);
    assert.ok(err.code.length > 0);
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generated client: the typed-query file passes deno check; removing an expected error fails it", async () => {
  const { srv, dir } = await setup();
  try {
    const ok = await checkTypes(dir, TYPED_QUERIES);
    assert.ok(ok.success, ok.output);
    assert.ok(ok.ms < 20_000, `deno check took ${Math.round(ok.ms)} ms`);
    // Every @ts-expect-error line is load-bearing: drop one (the get-marked write) and it fails.
    const broken = TYPED_QUERIES.replace(
      "// @ts-expect-error write of a get-marked column\n",
      "",
    );
    assert.notEqual(broken, TYPED_QUERIES);
    const bad = await checkTypes(dir, broken);
    assert.ok(!bad.success);
    assert.ok(bad.output.includes("title"), bad.output);
    // And an unknown name that is not expected to fail does fail.
    const bad2 = await checkTypes(
      dir,
      'import { relation } from "./database.ts";\nrelation("artist", { select: ["nme"] });\n',
    );
    assert.ok(!bad2.success);
  } finally {
    await srv.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("GET /svc/database.ts: ETag/304, role filtering, schemas, determinism, size", async () => {
  const uri = await chinookDb("chinook_ts", EXTRA);
  const srv = await startServer(uri, [
    "--http.typescript.enable=true",
    `--pg.query.wellknown_path=${ROOT}wellknown`,
  ]);
  const off = await startServer(uri, ["--http.typescript.enable=false"]);
  try {
    const auth = await userAuth();
    const a = await srv.get("/svc/database.ts");
    const text = await a.text();
    assert.deepEqual(a.status, 200);
    assert.ok(a.headers.get("content-type")!.includes("typescript"));
    const etag = a.headers.get("etag")!;
    assert.ok(/^"[0-9a-f]{32}"$/.test(etag));
    assert.ok(text.startsWith("// database.ts generated by svc "));
    assert.ok(!/^import /m.test(text));
    const again = await srv.get("/svc/database.ts");
    assert.deepEqual(await again.text(), text); // deterministic
    const nm = await srv.get("/svc/database.ts", { "if-none-match": etag });
    assert.deepEqual(nm.status, 304);
    await nm.body?.cancel();
    // Role filtering: staff_note is visible to app_user only.
    assert.ok(!text.includes('"staff_note"'));
    const user = await (await srv.get("/svc/database.ts", auth)).text();
    assert.ok(
      user.includes('"staff_note": {'),
      user.slice(user.indexOf("interface Relations"), user.indexOf("interface Relations") + 300),
    );
    // ?schemas=: an unknown schema leaves no relations; public keeps them.
    const none = await (await srv.get("/svc/database.ts?schemas=nope")).text();
    assert.ok(!none.includes('"artist": {'));
    const pub = await (await srv.get("/svc/database.ts?schemas=public")).text();
    assert.ok(pub.includes('"artist": {'));
    // One selection, one file: unknown names, repeats and order do not make new ones, so ever new
    // spellings cannot make svc keep ever more generated files.
    const tagOf = async (q: string) => {
      const r = await srv.get(`/svc/database.ts?schemas=${q}`);
      await r.body?.cancel();
      return r.headers.get("etag");
    };
    assert.equal(await tagOf("public,nope"), await tagOf("public"));
    assert.equal(await tagOf("nope,public,public"), await tagOf("public"));
    const before = clientsGenerated();
    for (let i = 0; i < 300; i++) await tagOf(`public,x${i}${"y".repeat(200)}`);
    assert.ok(clientsGenerated() - before <= 1, `${clientsGenerated() - before} files generated`);
    // Size of the fixed part.
    assert.ok(new TextEncoder().encode(CLIENT_SOURCE).length < 60_000);
    // Disabled → 404.
    const d = await off.get("/svc/database.ts");
    assert.deepEqual(d.status, 404);
    await d.body?.cancel();
  } finally {
    await srv.stop();
    await off.stop();
  }
});

// Ignored with a notice without Node on PATH; a failure under SVC_REQUIRE_NODE=1 (CI).
testWith(NODE, {
  name: "generated client runs in Node (bundled to JavaScript)",
  fn: async () => {
    const { srv, dir } = await setup();
    try {
      const b = await new Deno.Command(Deno.execPath(), {
        args: [
          "bundle",
          "--platform",
          "browser",
          "-o",
          `${dir}/database.mjs`,
          `${dir}/database.ts`,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(b.success, new TextDecoder().decode(b.stderr));
      await Deno.writeTextFile(
        `${dir}/run.mjs`,
        `import { configure, relation } from "./database.mjs";
configure({ baseUrl: process.argv[2] });
const rows = await relation("artist", { where: ["=", "artist_id", 1], select: ["name"] }).get();
console.log(JSON.stringify(rows));`,
      );
      const out = await new Deno.Command(NODE.path!, {
        args: [`${dir}/run.mjs`, srv.url],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(out.success, new TextDecoder().decode(out.stderr));
      assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), [{ name: "AC/DC" }]);
    } finally {
      await srv.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("teardown", () => stopDb());
