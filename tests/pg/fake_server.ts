/**
 * A loopback fake PostgreSQL server for the client's protocol tests: it encodes real backend
 * messages, reads the client's frontend messages, and writes its answers in chunks of the test's
 * choosing (randomly split, truncated, corrupted).
 */

const enc = new TextEncoder();

/** A backend message: type byte, length, body. */
export function msg(type: string, ...parts: (Uint8Array | string | number[])[]): Uint8Array {
  const bodies = parts.map((p) =>
    typeof p === "string" ? enc.encode(p) : p instanceof Uint8Array ? p : new Uint8Array(p)
  );
  const n = bodies.reduce((a, b) => a + b.length, 0);
  const out = new Uint8Array(5 + n);
  out[0] = type.charCodeAt(0);
  new DataView(out.buffer).setInt32(1, 4 + n);
  let o = 5;
  for (const b of bodies) {
    out.set(b, o);
    o += b.length;
  }
  return out;
}

/** A big-endian int32. */
export function i32(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setInt32(0, n);
  return b;
}

/** A big-endian int16. */
export function i16(n: number): Uint8Array {
  const b = new Uint8Array(2);
  new DataView(b.buffer).setInt16(0, n);
  return b;
}

/** A NUL-terminated string. */
export function cstr(s: string): Uint8Array {
  const b = enc.encode(s);
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

/** Joins byte arrays. */
export function concat(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const n = parts.reduce((a, b) => a + b.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Backend messages. */
export const B = {
  authOk: () => msg("R", i32(0)),
  authCleartext: () => msg("R", i32(3)),
  authMd5: (salt: Uint8Array) => msg("R", i32(5), salt),
  authSasl: (...mechs: string[]) => msg("R", i32(10), ...mechs.map(cstr), [0]),
  authSaslContinue: (data: string) => msg("R", i32(11), data),
  authSaslFinal: (data: string) => msg("R", i32(12), data),
  authOther: (code: number) => msg("R", i32(code)),
  paramStatus: (k: string, v: string) => msg("S", cstr(k), cstr(v)),
  backendKey: (pid: number, key: number) => msg("K", i32(pid), i32(key)),
  negotiate: (minor: number, opts: string[]) =>
    msg("v", i32(minor), i32(opts.length), ...opts.map(cstr)),
  rfq: (status = "I") => msg("Z", status),
  parseComplete: () => msg("1"),
  bindComplete: () => msg("2"),
  closeComplete: () => msg("3"),
  noData: () => msg("n"),
  paramDescription: (oids: number[]) => msg("t", i16(oids.length), ...oids.map(i32)),
  emptyQuery: () => msg("I"),
  portalSuspended: () => msg("s"),
  commandComplete: (tag: string) => msg("C", cstr(tag)),
  rowDescription: (fields: { name: string; oid: number }[]) =>
    msg(
      "T",
      i16(fields.length),
      ...fields.flatMap((
        f,
      ) => [cstr(f.name), i32(0), i16(0), i32(f.oid), i16(-1), i32(-1), i16(0)]),
    ),
  dataRow: (values: (string | null)[]) =>
    msg(
      "D",
      i16(values.length),
      ...values.flatMap((v) => v === null ? [i32(-1)] : [i32(enc.encode(v).length), enc.encode(v)]),
    ),
  error: (fields: Record<string, string>) =>
    msg("E", ...Object.entries(fields).map(([k, v]) => cstr(k + v)), [0]),
  notice: (message: string) =>
    msg("N", cstr("SNOTICE"), cstr("VNOTICE"), cstr("C00000"), cstr("M" + message), [0]),
  notification: (pid: number, channel: string, payload: string) =>
    msg("A", i32(pid), cstr(channel), cstr(payload)),
};

/** A frontend message as the fake server read it. */
export interface Frontend {
  type: string;
  body: Uint8Array;
}

/** One accepted client connection. */
export class FakeConn {
  readonly #conn: Deno.Conn;
  #buf: Uint8Array<ArrayBuffer> = new Uint8Array(0);
  #eof = false;
  #writes = 0;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  async #fill(n: number): Promise<boolean> {
    while (this.#buf.length < n) {
      if (this.#eof) return false;
      const chunk = new Uint8Array(65536);
      const k = await this.#conn.read(chunk).catch(() => null);
      if (k === null) {
        this.#eof = true;
        return false;
      }
      this.#buf = concat([this.#buf, chunk.subarray(0, k)]);
    }
    return true;
  }

  /** Reads the untyped startup message (after answering SSLRequests with `N`). */
  async startup(): Promise<Uint8Array | null> {
    for (;;) {
      if (!await this.#fill(4)) return null;
      const len = new DataView(this.#buf.buffer, this.#buf.byteOffset).getInt32(0);
      if (!await this.#fill(len)) return null;
      const body = this.#buf.slice(4, len);
      this.#buf = this.#buf.slice(len);
      if (new DataView(body.buffer).getInt32(0) === 80877103) {
        await this.#conn.write(enc.encode("N"));
        continue;
      }
      return body;
    }
  }

  /** Reads one typed frontend message, or null at the end of the stream. */
  async next(): Promise<Frontend | null> {
    if (!await this.#fill(5)) return null;
    const len = new DataView(this.#buf.buffer, this.#buf.byteOffset).getInt32(1);
    if (!await this.#fill(len + 1)) return null;
    const m = { type: String.fromCharCode(this.#buf[0]), body: this.#buf.slice(5, len + 1) };
    this.#buf = this.#buf.slice(len + 1);
    return m;
  }

  /** Reads frontend messages up to and including a Sync (or Query, Terminate, the end). */
  async untilSync(): Promise<Frontend[]> {
    const out: Frontend[] = [];
    for (;;) {
      const m = await this.next();
      if (!m) return out;
      out.push(m);
      if (m.type === "S" || m.type === "Q" || m.type === "X") return out;
    }
  }

  /** Writes `bytes` as chunks of the given sizes (the rest in one), yielding between chunks. */
  async send(bytes: Uint8Array, sizes: number[] = []): Promise<void> {
    let o = 0;
    for (const s of sizes) {
      if (o >= bytes.length) break;
      const part = bytes.subarray(o, Math.min(bytes.length, o + Math.max(1, s)));
      await this.#write(part);
      o += part.length;
      // Mostly a macrotask between chunks, so the client reads them apart.
      if (++this.#writes % 4 !== 0) await new Promise((r) => setTimeout(r, 0));
    }
    if (o < bytes.length) await this.#write(bytes.subarray(o));
  }

  async #write(b: Uint8Array): Promise<void> {
    let o = 0;
    try {
      while (o < b.length) o += await this.#conn.write(b.subarray(o));
    } catch { /* the client went away */ }
  }

  /** Closes the connection. */
  close(): void {
    try {
      this.#conn.close();
    } catch { /* closed */ }
  }
}

/** A fake server running `handle` for each client. */
export function fakeServer(handle: (c: FakeConn) => Promise<void>): {
  port: number;
  uri: string;
  close(): void;
} {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: FakeConn[] = [];
  (async () => {
    for await (const c of l) {
      const fc = new FakeConn(c);
      conns.push(fc);
      handle(fc).catch(() => {}).finally(() => fc.close());
    }
  })().catch(() => {});
  const port = (l.addr as Deno.NetAddr).port;
  return {
    port,
    uri: `postgres://fake:pw@127.0.0.1:${port}/fake`,
    close() {
      try {
        l.close();
      } catch { /* closed */ }
      for (const c of conns) c.close();
    },
  };
}

/** The usual answer to a startup: AuthenticationOk, parameters, key data, ReadyForQuery. */
export function hello(): Uint8Array {
  return concat([
    B.authOk(),
    B.paramStatus("server_version", "15.0 (fake)"),
    B.paramStatus("client_encoding", "UTF8"),
    B.backendKey(4242, 99),
    B.rfq(),
  ]);
}
