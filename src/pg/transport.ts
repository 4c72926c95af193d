/**
 * The byte stream under a connection: TCP or a Unix socket, and TLS negotiated the PostgreSQL
 * way (an SSLRequest on the plain socket, then the handshake).
 *
 * - `verify-full`: Deno's TLS (`Deno.startTls`), the certificate chain checked against the
 *   configured CA (`sslrootcert`) and Deno's own root store, and the host name checked.
 * - `verify-ca`: the same without the host name check. Deno adds its root store to the given CA,
 *   so a certificate from any publicly trusted CA passes too: prefer `verify-full`.
 * - `require`/`prefer` (libpq: encrypted, not verified): with an `sslrootcert` they verify like
 *   `verify-ca`, as libpq does; without one the handshake goes through `node:tls` with
 *   verification off, since Deno's own TLS cannot skip it.
 * - Unix sockets never use TLS (as with libpq).
 */
import type * as net from "node:net";
import type { ConnectConfig, SslMode } from "./config.ts";
import { PgConnectionError } from "./errors.ts";
import { sslRequest, Writer } from "./protocol.ts";

/** A byte stream: what a connection reads from and writes to. */
export interface Transport {
  /**
   * Reads into `p`; resolves with the byte count, or null at the end of the stream. A read may
   * move `p`'s memory to another buffer (a stream's BYOB read transfers it): `p`'s buffer is then
   * detached, and {@link Transport.moved} gives the one holding the bytes.
   */
  read(p: Uint8Array<ArrayBuffer>): Promise<number | null>;
  /**
   * The buffer the last read moved `p`'s memory to (null when it did not), handed over once: the
   * transport keeps no reference to it.
   */
  moved(): ArrayBuffer | null;
  /** Writes (part of) `p`; resolves the byte count written. */
  write(p: Uint8Array): Promise<number>;
  /** Closes the stream (idempotent); a pending read ends. */
  close(): void;
  /** Whether the stream is TLS-encrypted. */
  readonly encrypted: boolean;
}

/**
 * A read at least this large means bulk data is flowing (PostgreSQL sends rows in 8 KiB writes):
 * {@link DenoTransport} then reads through the connection's byte stream.
 */
export const BULK_READ = 8 * 1024;

/**
 * A Deno connection as a transport.
 *
 * Two ways to read the same socket, one at a time. `Deno.Conn.read` keeps each pending read in a
 * set of its own, and emptying that set after the read rebuilds its table; once a connection has
 * lived through a few young-generation collections the table is old, and V8 makes every rebuilt
 * table in the old generation too: ≈ 170 bytes of old garbage per read, freed only by a full
 * collection. A pooled connection streaming a large answer reads once per 8 KiB PostgreSQL sends
 * (≈ 240,000 reads for a 2 GB batch), and that garbage grew svc's heap by ≈ 25 MB
 * (docs/performance.md, "Memory"). The connection's byte stream (`readable`, a BYOB reader) keeps
 * no such set but costs ≈ 2 µs more per read: it is used while bulk data flows (the read before
 * returned at least {@link BULK_READ} bytes), `read` for the short answers of most requests.
 */
class DenoTransport implements Transport {
  readonly #conn: Deno.Conn;
  #closed = false;
  #reader: ReadableStreamBYOBReader | null = null;
  /** Whether the last read returned at least {@link BULK_READ} bytes. */
  #bulk = false;
  /** The buffer the last stream read moved the caller's memory to, until {@link moved}. */
  #moved: ArrayBuffer | null = null;
  /** Whether the stream is TLS-encrypted. */
  readonly encrypted: boolean;

  constructor(conn: Deno.Conn, encrypted: boolean) {
    this.#conn = conn;
    this.encrypted = encrypted;
  }

  read(p: Uint8Array<ArrayBuffer>): Promise<number | null> {
    return this.#bulk ? this.#readStream(p) : this.#readConn(p);
  }

  moved(): ArrayBuffer | null {
    const b = this.#moved;
    this.#moved = null;
    return b;
  }

  async #readConn(p: Uint8Array<ArrayBuffer>): Promise<number | null> {
    const n = await this.#conn.read(p);
    this.#bulk = n !== null && n >= BULK_READ;
    return n;
  }

  async #readStream(p: Uint8Array<ArrayBuffer>): Promise<number | null> {
    this.#reader ??= this.#conn.readable.getReader({ mode: "byob" });
    const r = await this.#reader.read(p);
    if (r.done || !r.value) return null;
    this.#moved = r.value.buffer;
    const n = r.value.length;
    this.#bulk = n >= BULK_READ;
    return n;
  }

  write(p: Uint8Array): Promise<number> {
    return this.#conn.write(p);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }
}

/** A node socket (plain or TLS) as a transport, used only for unverified TLS. */
class NodeTransport implements Transport {
  readonly #sock: net.Socket;
  readonly #chunks: Uint8Array[] = [];
  #buffered = 0;
  #ended = false;
  #error: Error | null = null;
  #wake: (() => void) | null = null;
  /** Whether the stream is TLS-encrypted. */
  readonly encrypted: boolean;

  constructor(sock: net.Socket, encrypted: boolean, pending: Uint8Array[] = []) {
    this.#sock = sock;
    this.encrypted = encrypted;
    for (const c of pending) this.#push(c);
    sock.on("data", (c: Uint8Array) => this.#push(c));
    sock.on("end", () => this.#end(null));
    sock.on("close", () => this.#end(null));
    sock.on("error", (e: Error) => this.#end(e));
  }

  #push(c: Uint8Array): void {
    this.#chunks.push(c);
    this.#buffered += c.length;
    if (this.#buffered > 1 << 20) this.#sock.pause(); // back-pressure until read
    this.#notify();
  }

  #end(e: Error | null): void {
    this.#ended = true;
    this.#error ??= e;
    this.#notify();
  }

  #notify(): void {
    const w = this.#wake;
    this.#wake = null;
    w?.();
  }

  moved(): ArrayBuffer | null {
    return null;
  }

  async read(p: Uint8Array<ArrayBuffer>): Promise<number | null> {
    while (this.#chunks.length === 0) {
      if (this.#error) throw this.#error;
      if (this.#ended) return null;
      await new Promise<void>((r) => (this.#wake = r));
    }
    let n = 0;
    while (n < p.length && this.#chunks.length) {
      const c = this.#chunks[0];
      const k = Math.min(c.length, p.length - n);
      p.set(c.subarray(0, k), n);
      n += k;
      if (k === c.length) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
    }
    this.#buffered -= n;
    if (this.#buffered <= 1 << 20) this.#sock.resume();
    return n;
  }

  write(p: Uint8Array): Promise<number> {
    if (this.#error || this.#ended) {
      return Promise.reject(this.#error ?? new Error("socket closed"));
    }
    // The socket may keep `p` until written: hand it a copy the caller cannot reuse.
    const copy = p.slice();
    return new Promise((resolve, reject) => {
      this.#sock.write(copy, (e?: Error | null) => (e ? reject(e) : resolve(copy.length)));
    });
  }

  close(): void {
    this.#sock.destroy();
    this.#end(null);
  }
}

/** What a connection attempt needs besides the config. */
export interface OpenOptions {
  /** Aborting it ends the attempt (the connect timeout). */
  signal?: AbortSignal;
}

function connectError(e: unknown, where: string, unix: boolean): PgConnectionError {
  if (e instanceof PgConnectionError) return e;
  if (e instanceof Deno.errors.ConnectionRefused) {
    return new PgConnectionError("ECONNREFUSED", `connection refused: ${where}`, e);
  }
  if (e instanceof Deno.errors.NotFound) {
    return unix
      ? new PgConnectionError("ECONNREFUSED", `no server socket at ${where}`, e)
      : new PgConnectionError("ENOTFOUND", `host not found: ${where}`, e);
  }
  const code = (e as { code?: string } | null)?.code;
  if (code === "ECONNREFUSED") {
    return new PgConnectionError("ECONNREFUSED", `connection refused: ${where}`, e);
  }
  if (code === "ENOTFOUND") {
    return new PgConnectionError("ENOTFOUND", `host not found: ${where}`, e);
  }
  return new PgConnectionError(
    "CONNECTION_CLOSED",
    `could not connect to ${where}: ${(e as Error)?.message ?? e}`,
    e,
  );
}

/** The PEM CA certificates configured (`sslrootcert` file, plus any given directly). */
async function caCerts(cfg: ConnectConfig): Promise<string[]> {
  const out = [...(cfg.caCerts ?? [])];
  if (cfg.sslrootcert && cfg.sslrootcert !== "system") {
    try {
      out.push(await Deno.readTextFile(cfg.sslrootcert));
    } catch (e) {
      throw new PgConnectionError(
        "08001",
        `cannot read sslrootcert "${cfg.sslrootcert}": ${(e as Error).message}`,
        e,
      );
    }
  }
  return out;
}

/** Whether `mode` verifies the server's certificate with these settings. */
function verifies(mode: SslMode, cfg: ConnectConfig): boolean {
  if (mode === "verify-ca" || mode === "verify-full") return true;
  return (mode === "require" || mode === "prefer") &&
    (cfg.sslrootcert !== undefined || (cfg.caCerts?.length ?? 0) > 0);
}

/** Reads exactly one byte from a Deno connection (the answer to SSLRequest). */
async function readOne(conn: Deno.Conn): Promise<number> {
  const b = new Uint8Array(1);
  const n = await conn.read(b);
  if (n === null || n === 0) {
    throw new PgConnectionError("CONNECTION_CLOSED", "the server closed the connection");
  }
  return b[0];
}

function noSsl(mode: SslMode): PgConnectionError {
  return new PgConnectionError("08001", `the server does not support TLS (sslmode=${mode})`);
}

function badSslAnswer(b: number): PgConnectionError {
  return new PgConnectionError(
    "08P01",
    `unexpected answer to the TLS request (byte ${b}): not a PostgreSQL server?`,
  );
}

/**
 * Opens the stream to `host:port` (a Unix socket when `host` starts with `/`) and negotiates TLS
 * as `cfg.sslmode` asks (`allow` is handled by the caller: it opens with `disable` first).
 */
export async function openTransport(
  cfg: ConnectConfig,
  host: string,
  port: number,
  opts: OpenOptions = {},
  mode: SslMode = cfg.sslmode,
): Promise<Transport> {
  const unix = host.startsWith("/");
  const where = unix ? `${host}/.s.PGSQL.${port}` : `${host}:${port}`;
  const wantTls = !unix && mode !== "disable" && mode !== "allow";
  if (wantTls && !verifies(mode, cfg)) return await openNodeTls(host, port, mode, opts);
  let conn: Deno.Conn;
  try {
    conn = unix
      ? await Deno.connect({ transport: "unix", path: where })
      : await Deno.connect({ hostname: host, port, signal: opts.signal });
  } catch (e) {
    throw connectError(e, where, unix);
  }
  const onAbort = () => {
    try {
      conn.close();
    } catch { /* closed */ }
  };
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (!unix) (conn as Deno.TcpConn).setNoDelay(true);
    if (!wantTls) return new DenoTransport(conn, false);
    const w = new Writer(8);
    sslRequest(w);
    await conn.write(w.take());
    const answer = await readOne(conn);
    if (answer === 0x4e) { // 'N'
      if (mode === "prefer") return new DenoTransport(conn, false);
      throw noSsl(mode);
    }
    if (answer !== 0x53) throw badSslAnswer(answer); // 'S'
    let t: Deno.TlsConn;
    try {
      t = await Deno.startTls(conn as Deno.TcpConn, {
        hostname: host,
        caCerts: await caCerts(cfg),
        unsafelyDisableHostnameVerification: mode !== "verify-full",
      });
      await t.handshake();
    } catch (e) {
      if (e instanceof PgConnectionError) throw e;
      throw new PgConnectionError(
        "08001",
        `TLS handshake with ${where} failed: ${(e as Error).message}`,
        e,
      );
    }
    return new DenoTransport(t, true);
  } catch (e) {
    onAbort();
    if (opts.signal?.aborted) throw opts.signal.reason;
    throw connectError(e, where, unix);
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

/** TLS without certificate verification (libpq's `require`/`prefer`), through node:tls. */
async function openNodeTls(
  host: string,
  port: number,
  mode: SslMode,
  opts: OpenOptions,
): Promise<Transport> {
  const where = `${host}:${port}`;
  // Node's socket and TLS modules only for this case (not loaded by a svc that never needs them).
  const net = await import("node:net");
  const tls = await import("node:tls");
  const sock = net.connect({ host, port });
  sock.setNoDelay(true);
  const onAbort = () => sock.destroy();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await new Promise<void>((resolve, reject) => {
      sock.once("connect", resolve);
      sock.once("error", reject);
      sock.once("close", () => reject(new Error("closed")));
    });
    const w = new Writer(8);
    sslRequest(w);
    sock.write(w.take());
    // Exactly one byte may come before the handshake: more is an injection attempt.
    const first = await new Promise<Uint8Array>((resolve, reject) => {
      sock.once("data", resolve);
      sock.once("error", reject);
      sock.once("close", () => reject(new Error("closed")));
    });
    sock.removeAllListeners();
    if (first.length === 0) throw new Error("closed");
    const answer = first[0];
    if (answer === 0x4e && first.length === 1) {
      if (mode === "prefer") return new NodeTransport(sock, false);
      throw noSsl(mode);
    }
    if (answer !== 0x53) throw badSslAnswer(answer);
    if (first.length > 1) {
      throw new PgConnectionError("08P01", "the server sent data before the TLS handshake");
    }
    sock.pause();
    const secure = tls.connect({
      socket: sock,
      servername: net.isIP(host) ? undefined : host,
      rejectUnauthorized: false,
    });
    await new Promise<void>((resolve, reject) => {
      secure.once("secureConnect", resolve);
      secure.once("error", reject);
      secure.once("close", () => reject(new Error("closed during the TLS handshake")));
    });
    secure.removeAllListeners();
    return new NodeTransport(secure, true);
  } catch (e) {
    sock.destroy();
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (e instanceof PgConnectionError) throw e;
    throw connectError(e, where, false);
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
}
