/**
 * Proves "one statement, one round trip" per read on the wire: a loopback TCP proxy between svc's
 * pool and PostgreSQL parses the frontend protocol and counts, per request, the client's bursts
 * (a burst is what the client sends before it next hears from the server) and Execute messages.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, scalar, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";
import { proxy } from "../helpers/pgproxy.ts";
import { waitFor } from "../helpers/wait.ts";
import { EXPLICIT_MIN } from "../../src/http/json_body.ts";

Deno.test("a read is one statement and one round trip before the response", async () => {
  const uri = new URL(await chinookDb());
  const p = proxy(Number(uri.port));
  uri.port = String(p.port);
  const srv = await startServer(uri.toString(), ["--pg.pool_size=1"]);
  try {
    const nested = {
      relation: "artist",
      where: ["<=", "artist_id", 5],
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
        },
      },
    };
    // `executes`: the statements each request sends; the count is read once the proxy has seen
    // them all (the commit may trail the response), never after a fixed pause.
    const measure = async (body: unknown, executes: number, n = 10) => {
      for (let i = 0; i < 3; i++) await (await srv.post("/svc", body)).json(); // prepare statements
      Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
      for (let i = 0; i < n; i++) {
        const r = await srv.post("/svc", body);
        assert.equal(r.status, 200);
        await r.json();
      }
      await waitFor(() => p.counters.executes >= executes * n, { what: "every statement sent" });
      return { ...p.counters, n };
    };
    // Known to fit one fetch batch (a limit ≤ 1000, or a unique key pinned by "="): the role
    // switch and the one query in one burst, one transaction (the batch's own, ended by its Sync:
    // no begin, no commit).
    for (
      const body of [{ ...nested, limit: 20 }, { relation: "track", where: ["=", "track_id", 7] }]
    ) {
      const c = await measure(body, 2);
      assert.equal(c.bursts, c.n, "one round trip per request");
      assert.equal(c.executes, 2 * c.n, "role switch and the one query");
      assert.equal(c.parses, 0, "prepared statements reused");
    }
    // Size unknown: begin, role switch and the one query's first rows (a portal with a row limit)
    // in the burst the response waits for; the commit follows once the answer is known complete.
    // Once an answer of this read came whole in its first fetch batch, the read runs as one batch
    // (role switch and the query with the same row limit, one burst), as the warm-up has seen.
    const fresh = { ...nested, order_by: ["artist_id"] };
    Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
    assert.equal((await srv.post("/svc", fresh)).status, 200);
    await waitFor(() => p.counters.executes >= 4, { what: "the first run's statements" });
    assert.equal(p.counters.bursts, 2, "first run: one round trip, then the commit");
    assert.equal(p.counters.executes, 4, "first run: begin, role switch, the first rows, commit");
    const c = await measure(nested, 2);
    assert.equal(c.bursts, c.n, "one round trip per request once its answer fitted one batch");
    assert.equal(c.executes, 2 * c.n, "role switch and the one query");
    assert.equal(c.parses, 0, "prepared statements reused");
    // An answer of at least EXPLICIT_MIN bytes: the same one burst, with begin and commit in it
    // (PostgreSQL then keeps the executor's memory for the next execution instead of giving it
    // back to the kernel at the end of the batch's implicit transaction; src/http/json_body.ts).
    const large = { ...nested, where: ["<=", "artist_id", 20] };
    const size = async (body: unknown) =>
      (await (await srv.post("/svc", body)).arrayBuffer()).byteLength;
    assert.ok(await size(nested) < EXPLICIT_MIN, "the read above answers less");
    assert.ok(await size(large) >= EXPLICIT_MIN, "a large answer");
    const l = await measure(large, 4);
    assert.equal(l.bursts, l.n, "one round trip per request");
    assert.equal(l.executes, 4 * l.n, "begin, role switch, the one query, commit");
    assert.equal(l.parses, 0, "prepared statements reused");
  } finally {
    await srv.stop();
    p.close();
    await stopDb();
  }
});

Deno.test("a read whose last answer fitted one batch and now does not answers every row, then runs as a cursor", async () => {
  const uri = new URL(
    await chinookDb(
      "growing",
      "create table growing (id int primary key, v text); " +
        "insert into growing select g, 'r' || g from generate_series(1, 5) g; " +
        'grant select on growing to "~anonymous";' +
        'create table calls (n int); grant insert on calls to "~anonymous";' +
        "create function noisy_growing() returns setof growing language plpgsql volatile as " +
        "$$ begin insert into calls values (1); return query select * from growing order by id; end $$;" +
        'grant execute on function noisy_growing() to "~anonymous";',
    ),
  );
  const p = proxy(Number(uri.port));
  uri.port = String(p.port);
  const srv = await startServer(uri.toString(), ["--pg.pool_size=1"]);
  try {
    const body = { relation: "growing", order_by: ["id"] };
    const ids = async () => {
      const r = await srv.post("/svc", body);
      assert.equal(r.status, 200);
      return ((await r.json()) as { id: number }[]).map((x) => x.id);
    };
    for (let i = 0; i < 3; i++) assert.deepEqual(await ids(), [1, 2, 3, 4, 5]);
    // Past one fetch batch (1,000 rows): the one-batch try ends with its transaction, the read
    // runs again as a cursor and answers every row once, in order.
    await psql("insert into growing select g, 'r' || g from generate_series(6, 2500) g", "growing");
    const want = Array.from({ length: 2500 }, (_, i) => i + 1);
    const run = async (expected: number[], executes: number) => {
      Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
      assert.deepEqual(await ids(), expected);
      await waitFor(() => p.counters.executes >= executes, { what: `${executes} statements` });
      return { ...p.counters };
    };
    // Role switch and the first rows (the try), then begin, role switch, three fetches, commit.
    assert.equal((await run(want, 8)).executes, 8);
    // Its record now says "more than one batch": a cursor read at once, without the try.
    assert.equal((await run(want, 6)).executes, 6);
    // Shrunk again: the cursor read's first batch completes it (begin, role switch, rows,
    // commit), and the run after it is one batch again: role switch and query, one burst.
    await psql("delete from growing where id > 5", "growing");
    assert.equal((await run([1, 2, 3, 4, 5], 4)).executes, 4);
    const last = await run([1, 2, 3, 4, 5], 2);
    assert.equal(last.executes, 2);
    assert.equal(last.bursts, 1);
    // A read calling a VOLATILE function is never tried as one batch: the try would commit what
    // the function did and the read would run it again. Its function runs once per request, and
    // its rows come through a cursor every time.
    const noisy = { function: "noisy_growing" };
    const calls = () => scalar("select count(*) from calls", "growing");
    for (let i = 0; i < 3; i++) {
      const r = await srv.post("/svc", noisy);
      assert.equal(r.status, 200);
      assert.equal(((await r.json()) as unknown[]).length, 5);
    }
    await psql("insert into growing select g, 'r' || g from generate_series(6, 2500) g", "growing");
    Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
    const r = await srv.post("/svc", noisy);
    assert.equal(((await r.json()) as unknown[]).length, 2500);
    await waitFor(() => p.counters.executes >= 6, { what: "the cursor read's statements" });
    assert.equal(p.counters.executes, 6, "begin, role switch, three fetches, commit");
    assert.equal(await calls(), "4", "the function ran once per request");
  } finally {
    await srv.stop();
    p.close();
    await stopDb();
  }
});

Deno.test("an unknown column's error, its hint settled by the role's privileges, costs one round trip", async () => {
  const uri = new URL(
    await chinookDb(
      "hinted",
      "create table hinted (id int primary key, title text, secret text); " +
        'grant select (id, title) on hinted to "~anonymous";',
    ),
  );
  const p = proxy(Number(uri.port));
  uri.port = String(p.port);
  const srv = await startServer(uri.toString(), ["--pg.pool_size=1"]);
  try {
    // The pool's connection is open (its start-up is not counted).
    assert.equal((await srv.post("/svc", { relation: "hinted", select: ["id"] })).status, 200);
    const ask = async (select: string[]) => {
      Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
      const r = await srv.post("/svc", { relation: "hinted", select });
      const body = await r.json();
      assert.equal(r.status, 400);
      assert.equal(body.code, "QUERY_UNKNOWN_COLUMN");
      // The transaction's rollback may trail the response.
      await waitFor(() => p.counters.executes >= 2, { what: "the question's statements" });
      return { message: body.message as string, bursts: p.counters.bursts };
    };
    // A column the role may read is suggested; one it may not is not (nor named).
    const near = await ask(["titel"]);
    assert.match(near.message, /did you mean 'title'/);
    assert.equal(near.bursts, 1, "the relation's and the hint's privileges in one question");
    const hidden = await ask(["secrett"]);
    assert.doesNotMatch(hidden.message, /did you mean|secret'/);
    assert.equal(hidden.bursts, 1, "one round trip when the hint names nothing");
  } finally {
    await srv.stop();
    p.close();
    await stopDb();
  }
});
