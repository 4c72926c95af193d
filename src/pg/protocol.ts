/**
 * Frontend messages of the PostgreSQL wire protocol (version 3.0), encoded into a growable
 * buffer: many messages (a whole pipeline) accumulate in one {@link Writer} and leave in one
 * socket write. Parameters are always sent as text, result columns always requested as text.
 */

const encoder = new TextEncoder();

/** Protocol version 3.0 (`196608`). */
export const PROTOCOL_3_0 = 3 << 16;
/** The SSLRequest code. */
export const SSL_REQUEST = 80877103;
/** The CancelRequest code. */
export const CANCEL_REQUEST = 80877102;

/** A growable buffer of frontend messages. */
export class Writer {
  /** The bytes written so far are `buf[0, pos)`. */
  buf: Uint8Array;
  /** Write position. */
  pos = 0;
  #view: DataView;

  /** A writer starting with `size` bytes of room. */
  constructor(size = 4096) {
    this.buf = new Uint8Array(size);
    this.#view = new DataView(this.buf.buffer);
  }

  /** Makes room for `n` more bytes. */
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.#view = new DataView(next.buffer);
  }

  /** One byte. */
  u8(b: number): void {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  /** A big-endian 16-bit integer. */
  i16(n: number): void {
    this.ensure(2);
    this.#view.setInt16(this.pos, n);
    this.pos += 2;
  }

  /** A big-endian 32-bit integer. */
  i32(n: number): void {
    this.ensure(4);
    this.#view.setInt32(this.pos, n);
    this.pos += 4;
  }

  /** Overwrites the 32-bit integer at `at`. */
  setI32(at: number, n: number): void {
    this.#view.setInt32(at, n);
  }

  /** Raw bytes. */
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** A string as UTF-8, without terminator; returns its byte length. */
  str(s: string): number {
    const n = s.length;
    // Short ASCII strings (names, most parameters) by hand: cheaper than encodeInto's call.
    if (n < 64) {
      this.ensure(n);
      const buf = this.buf;
      let p = this.pos;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        buf[p++] = c;
      }
      if (i === n) {
        this.pos = p;
        return n;
      }
    }
    // UTF-8 needs at most 3 bytes per UTF-16 code unit.
    this.ensure(n * 3);
    const r = encoder.encodeInto(s, this.buf.subarray(this.pos));
    this.pos += r.written;
    return r.written;
  }

  /** A NUL-terminated string. Throws when `s` contains NUL (PostgreSQL cannot take it). */
  cstr(s: string): void {
    if (s.includes("\0")) throw new TypeError("a string sent to PostgreSQL contains a NUL byte");
    this.str(s);
    this.u8(0);
  }

  /** Starts a message of `type` (0: an untyped startup message); returns its start. */
  begin(type: number): number {
    this.ensure(5);
    if (type !== 0) this.buf[this.pos++] = type;
    const at = this.pos;
    this.pos += 4;
    return at;
  }

  /** Ends the message started at `at` (writes its length). */
  end(at: number): void {
    this.#view.setInt32(at, this.pos - at);
  }

  /** The bytes written, as a copy; the writer is emptied. */
  take(): Uint8Array {
    const out = this.buf.slice(0, this.pos);
    this.pos = 0;
    return out;
  }
}

/** StartupMessage with protocol 3.0 and `params` (user, database, application_name, …). */
export function startup(w: Writer, params: Record<string, string>): void {
  const at = w.begin(0);
  w.i32(PROTOCOL_3_0);
  for (const [k, v] of Object.entries(params)) {
    w.cstr(k);
    w.cstr(v);
  }
  w.u8(0);
  w.end(at);
}

/** SSLRequest. */
export function sslRequest(w: Writer): void {
  const at = w.begin(0);
  w.i32(SSL_REQUEST);
  w.end(at);
}

/** CancelRequest for the backend `pid` with its secret `key` (4 bytes in protocol 3.0). */
export function cancelRequest(w: Writer, pid: number, key: Uint8Array): void {
  const at = w.begin(0);
  w.i32(CANCEL_REQUEST);
  w.i32(pid);
  w.bytes(key);
  w.end(at);
}

/** PasswordMessage (a cleartext or MD5 password). */
export function password(w: Writer, text: string): void {
  const at = w.begin(0x70); // 'p'
  w.cstr(text);
  w.end(at);
}

/** SASLInitialResponse. */
export function saslInitial(w: Writer, mechanism: string, data: Uint8Array): void {
  const at = w.begin(0x70);
  w.cstr(mechanism);
  w.i32(data.length);
  w.bytes(data);
  w.end(at);
}

/** SASLResponse. */
export function saslResponse(w: Writer, data: Uint8Array): void {
  const at = w.begin(0x70);
  w.bytes(data);
  w.end(at);
}

/** Parse of `sql` as statement `name` ("" unnamed); every parameter's type left to the server. */
export function parse(w: Writer, name: string, sql: string): void {
  const at = w.begin(0x50); // 'P'
  w.cstr(name);
  w.cstr(sql);
  w.i16(0);
  w.end(at);
}

/** A parameter value as the text PostgreSQL receives (null: SQL NULL). */
export function paramText(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case "string":
      return v;
    case "number":
    case "bigint":
      return String(v);
    case "boolean":
      return v ? "t" : "f";
  }
  if (v instanceof Date) return v.toISOString();
  if (v instanceof Uint8Array) {
    let hex = "\\x";
    for (const b of v) hex += b.toString(16).padStart(2, "0");
    return hex;
  }
  return JSON.stringify(v);
}

/**
 * Bind of statement `stmt` to `portal` with text parameters and text results. A parameter holding
 * a NUL character is sent as it is: PostgreSQL refuses it (22021), like any value its text input
 * cannot take.
 */
export function bind(w: Writer, portal: string, stmt: string, params: readonly unknown[]): void {
  const at = w.begin(0x42); // 'B'
  w.cstr(portal);
  w.cstr(stmt);
  w.i16(0); // all parameters in text format
  w.i16(params.length);
  for (let i = 0; i < params.length; i++) {
    const p = params[i];
    const v = typeof p === "string" ? p : paramText(p);
    if (v === null) {
      w.i32(-1);
      continue;
    }
    const lenAt = w.pos;
    w.i32(0);
    w.setI32(lenAt, w.str(v));
  }
  w.i16(0); // all results in text format
  w.end(at);
}

/** Describe of a statement (`S`) or portal (`P`). */
export function describe(w: Writer, kind: "S" | "P", name: string): void {
  const at = w.begin(0x44); // 'D'
  w.u8(kind.charCodeAt(0));
  w.cstr(name);
  w.end(at);
}

/** Execute of `portal`, at most `maxRows` rows (0: all). */
export function execute(w: Writer, portal: string, maxRows: number): void {
  const at = w.begin(0x45); // 'E'
  w.cstr(portal);
  w.i32(maxRows);
  w.end(at);
}

/** Close of a statement (`S`) or portal (`P`). */
export function close(w: Writer, kind: "S" | "P", name: string): void {
  const at = w.begin(0x43); // 'C'
  w.u8(kind.charCodeAt(0));
  w.cstr(name);
  w.end(at);
}

/** Sync. */
export function sync(w: Writer): void {
  w.ensure(5);
  w.u8(0x53); // 'S'
  w.i32(4);
}

/** Flush. */
export function flush(w: Writer): void {
  w.u8(0x48); // 'H'
  w.i32(4);
}

/** Query (simple protocol): one or more `;`-separated statements. */
export function query(w: Writer, sql: string): void {
  const at = w.begin(0x51); // 'Q'
  w.cstr(sql);
  w.end(at);
}

/** CopyFail with `message`. */
export function copyFail(w: Writer, message: string): void {
  const at = w.begin(0x66); // 'f'
  w.cstr(message);
  w.end(at);
}

/** Terminate. */
export function terminate(w: Writer): void {
  w.u8(0x58); // 'X'
  w.i32(4);
}
