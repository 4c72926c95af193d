/**
 * Proves "one statement, one round trip" per read on the wire: a loopback TCP proxy between svc's
 * pool and PostgreSQL parses the frontend protocol and counts, per request, the client's bursts
 * (a burst is what the client sends before it next hears from the server) and Execute messages.
 */
import assert from "node:assert/strict";
import { chinookDb, stopDb } from "../helpers/db.ts";
import { startServer } from "../helpers/server.ts";

interface Counters {
  bursts: number;
  executes: number;
  parses: number;
}

function proxy(target: number): { port: number; counters: Counters; close(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const counters: Counters = { bursts: 0, executes: 0, parses: 0 };
  const conns: Deno.Conn[] = [];
  (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({ hostname: "127.0.0.1", port: target });
      conns.push(client, server);
      let lastFromServer = true;
      let started = false;
      let buf = new Uint8Array(0);
      const parse = () => {
        for (;;) {
          if (!started) {
            if (buf.length < 4) return;
            const len = new DataView(buf.buffer, buf.byteOffset).getInt32(0);
            if (buf.length < len) return;
            buf = buf.slice(len);
            started = true;
            continue;
          }
          if (buf.length < 5) return;
          const type = String.fromCharCode(buf[0]);
          const len = new DataView(buf.buffer, buf.byteOffset).getInt32(1);
          if (buf.length < len + 1) return;
          if (type === "E" || type === "Q") counters.executes++; // extended or simple protocol
          if (type === "P") counters.parses++;
          buf = buf.slice(len + 1);
        }
      };
      (async () => {
        for await (const chunk of client.readable) {
          if (lastFromServer) counters.bursts++;
          lastFromServer = false;
          const b = new Uint8Array(buf.length + chunk.length);
          b.set(buf);
          b.set(chunk, buf.length);
          buf = b;
          parse();
          await server.write(chunk);
        }
      })().catch(() => {});
      (async () => {
        for await (const chunk of server.readable) {
          lastFromServer = true;
          await client.write(chunk);
        }
      })().catch(() => {});
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    counters,
    close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed */ }
      }
    },
  };
}

Deno.test("a read is one statement and one round trip before the response", async () => {
  const uri = new URL(await chinookDb());
  const p = proxy(Number(uri.port));
  uri.port = String(p.port);
  const srv = await startServer(uri.toString(), ["--pg.pool_size=1"]);
  try {
    const body = {
      relation: "artist",
      where: ["<=", "artist_id", 5],
      limit: 20,
      join: {
        albums: {
          relation: "album",
          on: { artist_id: "artist_id" },
          join: { tracks: { relation: "track", on: { album_id: "album_id" } } },
        },
      },
    };
    for (let i = 0; i < 3; i++) await (await srv.post("/svc", body)).json(); // prepare statements
    Object.assign(p.counters, { bursts: 0, executes: 0, parses: 0 });
    const n = 10;
    for (let i = 0; i < n; i++) {
      const r = await srv.post("/svc", body);
      assert.equal(r.status, 200);
      await r.json();
    }
    // Burst 1 (the response waits for it): begin, role switch, DECLARE of the one query, FETCH.
    // Burst 2 (sent once the answer is known to be complete, off the critical path): commit.
    assert.equal(p.counters.bursts, 2 * n, "one round trip before the response, then the commit");
    assert.equal(p.counters.executes, 5 * n, "begin, role switch, declare, fetch, commit");
    assert.equal(p.counters.parses, 0, "prepared statements reused");
  } finally {
    await srv.stop();
    p.close();
    await stopDb();
  }
});
