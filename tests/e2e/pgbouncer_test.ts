/**
 * svc behind PgBouncer 1.18 (real HTTP, real PostgreSQL): session mode with named prepared
 * statements, transaction mode with `pg.prepared_statements=false` and fewer server connections
 * than svc's pool. Core cases in both: small and streamed reads, a GET read, a write and its
 * read-back, a rolled-back write, a failing statement followed by a normal request, a function
 * call, declared routes.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb, testCluster } from "../helpers/db.ts";
import { bouncerTest, startBouncer } from "../helpers/pgbouncer.ts";
import { cookie, now, startServer, type TestServer, token } from "../helpers/server.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/routes.sql", import.meta.url));

async function json(res: Response, status = 200): Promise<unknown> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  return JSON.parse(text);
}

async function coreCases(srv: TestServer, tag: string): Promise<void> {
  // Reads: one batch, a streamed one (3,503 tracks, more than one fetch batch), GET.
  assert.deepEqual(
    await json(
      await srv.post("/svc", {
        relation: "genre",
        select: ["name"],
        limit: 2,
        order_by: ["genre_id"],
      }),
    ),
    [{ name: "Rock" }, { name: "Jazz" }],
  );
  const tracks = await json(
    await srv.post("/svc", { relation: "track", select: ["track_id"] }),
  ) as unknown[];
  assert.equal(tracks.length, 3503);
  // A read of unknown size run again once its answer fitted one batch: then sent as one batch
  // (no begin, no commit), sequentially and concurrently.
  const genres = { relation: "genre", select: ["genre_id"], order_by: ["genre_id"] };
  const want = await json(await srv.post("/svc", genres)) as { genre_id: number }[];
  assert.ok(
    want.length >= 25 && want.every((g, i) => i === 0 || g.genre_id > want[i - 1].genre_id),
  );
  for (let i = 0; i < 3; i++) assert.deepEqual(await json(await srv.post("/svc", genres)), want);
  const again = await Promise.all(
    Array.from({ length: 12 }, () => srv.post("/svc", genres).then((r) => json(r))),
  );
  for (const rows of again) assert.deepEqual(rows, want);
  assert.deepEqual(
    await json(await srv.get("/svc?relation=artist&where=eq(artist_id,1)&select=name")),
    [{ name: "AC/DC" }],
  );
  // A write and its read-back (as app_user); a rolled-back write leaves nothing.
  const t = now();
  const user = cookie(await token({ role: "app_user", iat: t, exp: t + 600 }));
  const name = `PgBouncer ${tag}`;
  const wrote = await json(
    await srv.post("/svc", { query: { relation: "genre" }, data: [{ name }] }, user),
  ) as { genre_id: number; name: string }[];
  assert.equal(wrote.length, 1);
  assert.equal(wrote[0].name, name);
  assert.ok(wrote[0].genre_id > 25);
  const never = `never ${tag}`;
  const rolled = await srv.post(
    "/svc",
    { query: { relation: "genre" }, data: [{ name: never }], rollback: true },
    user,
  );
  assert.equal(rolled.status, 200, await rolled.text());
  assert.deepEqual(
    await json(await srv.post("/svc", { relation: "genre", where: ["=", "name", [never]] })),
    [],
  );
  // A statement PostgreSQL refuses, then requests run normally on the same connections.
  const bad = await srv.post("/svc", { relation: "genre", where: ["=", "genre_id", ["x"]] });
  assert.equal(bad.status, 400, await bad.text());
  assert.equal(bad.headers.get("x-svc-errorcode"), "PG_22P02");
  // A function call and declared routes.
  assert.deepEqual(
    await json(await srv.post("/svc", { function: "add", schema: "rt", arguments: [2, 3] })),
    [{ add: 5 }],
  );
  assert.equal(await json(await srv.get("/add/5?b=3")), 8);
  assert.equal(await json(await srv.get("/multi")), "multi");
  const badRoute = await srv.get("/add/x");
  assert.equal(badRoute.status, 400);
  await badRoute.body?.cancel();
  // Concurrent requests over the pool (more of them than PgBouncer's server connections).
  const many = await Promise.all(
    Array.from(
      { length: 24 },
      (_, i) =>
        srv.post("/svc", {
          relation: "artist",
          select: ["artist_id"],
          where: ["=", "artist_id", i + 1],
        })
          .then((r) => json(r)),
    ),
  );
  many.forEach((rows, i) => assert.deepEqual(rows, [{ artist_id: i + 1 }]));
}

for (const mode of ["session", "transaction"] as const) {
  bouncerTest({
    name: `svc behind PgBouncer in ${mode} mode: reads, writes, rollback, errors, routes`,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const uri = new URL(await chinookDb("bounced", fixture));
      const cluster = await testCluster();
      // Transaction mode: 2 server connections for svc's 4.
      const bouncer = await startBouncer(cluster.port, mode, mode === "transaction" ? 2 : 6);
      const srv = await startServer(bouncer.uriFor(uri.pathname.slice(1)), [
        "--route.rt.multi.path=/multi",
        "--pg.query.allow_rollback=true",
        "--pg.pool_size=4",
        ...(mode === "transaction" ? ["--pg.prepared_statements=false"] : []),
      ]);
      try {
        await coreCases(srv, mode);
      } finally {
        await srv.stop();
        await bouncer.stop();
      }
    },
  });
}

bouncerTest({ name: "pgbouncer e2e: stop", sanitizeResources: false, fn: () => stopDb() });
