/**
 * A loopback TCP proxy in front of PostgreSQL that reads the frontend protocol and counts what
 * clients send: bursts (what a client sends before it next hears from the server: round trips),
 * Execute/Query messages (statements run) and Parse messages. Tests point a pool at it.
 */

/** What the proxy has seen since the last reset. */
export interface WireCounts {
  bursts: number;
  executes: number;
  parses: number;
}

/** A running proxy. */
export interface PgProxy {
  port: number;
  counts: WireCounts;
  reset(): void;
  /**
   * From now on, a connection whose client sends `marker` (bytes of a statement or of a bind
   * value) stops forwarding in both directions from the chunk that carries it: its statement
   * never reaches PostgreSQL and nothing comes back, as when a server or network stalls. The
   * PostgreSQL side is closed once the client closes its end. `null` stops stalling new ones.
   */
  stallOn(marker: string | null): void;
  /** Stalled connections whose client has not closed its end yet. */
  stalled(): number;
  close(): void;
}

/** Whether `hay` contains `needle`. */
function contains(hay: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let i = 0; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

/** Writes all of `b` (a socket write may take only part of it). */
async function writeAll(conn: Deno.Conn, b: Uint8Array): Promise<void> {
  let o = 0;
  while (o < b.length) o += await conn.write(o === 0 ? b : b.subarray(o));
}

/** Starts a proxy on 127.0.0.1 forwarding to the PostgreSQL at `target` (a loopback port). */
export function pgProxy(target: number): PgProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const counts: WireCounts = { bursts: 0, executes: 0, parses: 0 };
  const open: Deno.Conn[] = [];
  let marker: Uint8Array | null = null;
  let stalledOpen = 0;
  const pump = async (client: Deno.Conn) => {
    const server = await Deno.connect({ hostname: "127.0.0.1", port: target });
    open.push(client, server);
    let stalled = false;
    let tail = new Uint8Array(0); // the previous chunk's end, for a marker split across chunks
    let serverSpoke = true;
    let startup = true;
    let pending = new Uint8Array(0);
    const scan = () => {
      for (;;) {
        const view = new DataView(pending.buffer, pending.byteOffset, pending.byteLength);
        if (startup) {
          // The startup (or SSL request) message has no type byte.
          if (pending.length < 4 || pending.length < view.getInt32(0)) return;
          pending = pending.slice(view.getInt32(0));
          startup = false;
          continue;
        }
        if (pending.length < 5) return;
        const len = view.getInt32(1);
        if (pending.length < len + 1) return;
        const type = pending[0];
        if (type === 0x45 || type === 0x51) counts.executes++; // 'E' execute, 'Q' simple query
        if (type === 0x50) counts.parses++; // 'P'
        pending = pending.slice(len + 1);
      }
    };
    const up = (async () => {
      for await (const chunk of client.readable) {
        if (!stalled && marker) {
          const seen = new Uint8Array(tail.length + chunk.length);
          seen.set(tail);
          seen.set(chunk, tail.length);
          if (contains(seen, marker)) {
            stalled = true;
            stalledOpen++;
          }
          tail = seen.slice(Math.max(0, seen.length - marker.length));
        }
        if (stalled) continue;
        if (serverSpoke) counts.bursts++;
        serverSpoke = false;
        const next = new Uint8Array(pending.length + chunk.length);
        next.set(pending);
        next.set(chunk, pending.length);
        pending = next;
        scan();
        await writeAll(server, chunk);
      }
    })();
    const down = (async () => {
      for await (const chunk of server.readable) {
        serverSpoke = true;
        if (stalled) continue;
        await writeAll(client, chunk);
      }
    })();
    await up.catch(() => {});
    if (stalled) {
      stalledOpen--;
      try {
        server.close();
      } catch { /* already closed */ }
    }
    await down.catch(() => {});
  };
  (async () => {
    for await (const client of listener) pump(client).catch(() => {});
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    counts,
    reset() {
      Object.assign(counts, { bursts: 0, executes: 0, parses: 0 });
    },
    stallOn(m) {
      marker = m === null ? null : new TextEncoder().encode(m);
    },
    stalled: () => stalledOpen,
    close() {
      listener.close();
      for (const c of open) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
    },
  };
}
