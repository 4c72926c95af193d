/**
 * A loopback TCP proxy between svc's pool and PostgreSQL that parses the frontend protocol and
 * counts the client's bursts (what it sends before it next hears from the server), Execute and
 * Parse messages: proof of "one round trip" on the wire.
 */
/** Frontend-protocol counters of the proxied connections. */
export interface Counters {
  bursts: number;
  executes: number;
  parses: number;
}

/** Starts a counting proxy in front of PostgreSQL on `target`. */
export function proxy(target: number): { port: number; counters: Counters; close(): void } {
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
