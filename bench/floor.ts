/**
 * The floor of a read: the least a Deno HTTP service answering `pk_read` or `nested_read` can do,
 * without a driver. `deno run -A bench/floor.ts --port=P --pg-port=Q --db=bench --pool=10
 * --sql='select … where t.track_id = $1' --role=… --claims=…` (the case's `floorSql`,
 * bench/lib/cases.ts).
 *
 * At start it opens `--pool` sockets to PostgreSQL (trust authentication) and prepares four
 * statements on each: begin, the role/claims switch (the same four set_config svc sends), the
 * query with the key as `$1`, commit. Per request: Deno.serve, JSON.parse of the body (the key is
 * `where[2]`), a free socket, ONE write of Bind/Execute ×4 + Sync (the begin, role and commit
 * messages are bytes built once), the DataRows' first column copied into `[row,…]`, the response.
 * Nothing else: no validation, no compilation, no errors mapped (a failure answers 500).
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: a } = parseArgs({
  args: Deno.args,
  options: {
    port: { type: "string", default: "0" },
    "pg-host": { type: "string", default: "127.0.0.1" },
    "pg-port": { type: "string", default: "5432" },
    user: { type: "string", default: "postgres" },
    db: { type: "string", default: "postgres" },
    pool: { type: "string", default: "10" },
    sql: { type: "string" },
    role: { type: "string", default: "postgres" },
    claims: { type: "string", default: "null" },
  },
});

const enc = new TextEncoder();

/** A growable message buffer. */
class Buf {
  b = new Uint8Array(1024);
  v = new DataView(this.b.buffer);
  n = 0;
  room(k: number) {
    if (this.n + k <= this.b.length) return;
    const nb = new Uint8Array(Math.max(this.b.length * 2, this.n + k));
    nb.set(this.b.subarray(0, this.n));
    this.b = nb;
    this.v = new DataView(nb.buffer);
  }
  u8(x: number) {
    this.room(1);
    this.b[this.n++] = x;
  }
  i16(x: number) {
    this.room(2);
    this.v.setInt16(this.n, x);
    this.n += 2;
  }
  i32(x: number) {
    this.room(4);
    this.v.setInt32(this.n, x);
    this.n += 4;
  }
  str(s: string) {
    const e = enc.encode(s);
    this.room(e.length + 1);
    this.b.set(e, this.n);
    this.n += e.length;
    this.b[this.n++] = 0;
  }
  msg(type: string, body: (w: Buf) => void) {
    this.u8(type.charCodeAt(0));
    const at = this.n;
    this.i32(0);
    body(this);
    this.v.setInt32(at, this.n - at);
  }
  bytes(): Uint8Array {
    return this.b.slice(0, this.n);
  }
}

function bindExec(w: Buf, stmt: string, params: string[]) {
  w.msg("B", (m) => {
    m.str("");
    m.str(stmt);
    m.i16(0);
    m.i16(params.length);
    for (const p of params) {
      const e = enc.encode(p);
      m.i32(e.length);
      m.room(e.length);
      m.b.set(e, m.n);
      m.n += e.length;
    }
    m.i16(0);
  });
  w.msg("E", (m) => {
    m.str("");
    m.i32(0);
  });
}

const SET_ROLE = "select set_config('role', $1, true), set_config('svc.jwt.claims', $2, true), " +
  "set_config('statement_timeout', $3, true), set_config('svc.request_id', $4, true)";

/** Bytes sent before and after each request's query (built once). */
const head = (() => {
  const w = new Buf();
  bindExec(w, "b", []);
  bindExec(w, "r", [a.role!, a.claims!, "30000", ""]);
  return w.bytes();
})();
const tail = (() => {
  const w = new Buf();
  bindExec(w, "c", []);
  w.u8(0x53); // Sync
  w.i32(4);
  return w.bytes();
})();

/** One raw connection, one request at a time. */
class Conn {
  readonly c: Deno.TcpConn;
  rb = new Uint8Array(65536);
  rs = 0;
  re = 0;
  out: Uint8Array<ArrayBuffer> = new Uint8Array(4096);
  on = 0;
  rows = 0;
  /** Statements of the current request completed (CommandComplete): the query is the third. */
  done = 0;
  wake: ((err: Error | null) => void) | null = null;
  failed: Error | null = null;

  constructor(c: Deno.TcpConn) {
    this.c = c;
    c.setNoDelay(true);
  }

  /** Reads messages for ever; `wake` is called at each ReadyForQuery. */
  async loop() {
    try {
      for (;;) {
        if (this.re === this.rb.length) {
          if (this.rs > 0) {
            this.rb.copyWithin(0, this.rs, this.re);
            this.re -= this.rs;
            this.rs = 0;
          } else {
            const nb = new Uint8Array(this.rb.length * 2);
            nb.set(this.rb);
            this.rb = nb;
          }
        }
        const n = await this.c.read(this.rb.subarray(this.re));
        if (n === null) throw new Error("closed");
        this.re += n;
        this.parse();
      }
    } catch (e) {
      this.failed = e as Error;
      this.wake?.(this.failed);
    }
  }

  parse() {
    const b = this.rb;
    const v = new DataView(b.buffer);
    while (this.re - this.rs >= 5) {
      const t = b[this.rs];
      const len = v.getInt32(this.rs + 1);
      if (this.re - this.rs < len + 1) break;
      const s = this.rs + 5;
      this.rs += len + 1;
      if (t === 0x43) this.done++; // CommandComplete
      else if (t === 0x44 && this.done === 2) { // the query's DataRow: first column into the answer
        const cl = v.getInt32(s + 2);
        const need = this.on + cl + 2;
        if (need > this.out.length) {
          const no = new Uint8Array(Math.max(need, this.out.length * 2));
          no.set(this.out.subarray(0, this.on));
          this.out = no;
        }
        this.out[this.on++] = this.rows++ === 0 ? 0x5b : 0x2c;
        this.out.set(b.subarray(s + 6, s + 6 + cl), this.on);
        this.on += cl;
      } else if (t === 0x45) {
        this.failed = new Error("ErrorResponse");
      } else if (t === 0x5a) {
        const w = this.wake;
        this.wake = null;
        w?.(null);
      }
    }
    if (this.rs === this.re) this.rs = this.re = 0;
  }

  /** Sends `bytes` and waits for ReadyForQuery. */
  async run(bytes: Uint8Array): Promise<void> {
    const done = new Promise<Error | null>((r) => (this.wake = r));
    let o = 0;
    while (o < bytes.length) o += await this.c.write(bytes.subarray(o));
    const err = await done;
    if (err) throw err;
    if (this.failed) {
      const f = this.failed;
      this.failed = null;
      this.answer();
      throw f;
    }
  }

  /** The answer collected since the last call: `[rows]`. */
  answer(): Uint8Array<ArrayBuffer> {
    if (this.rows === 0) this.out[this.on++] = 0x5b;
    this.out[this.on++] = 0x5d;
    const r = this.out.slice(0, this.on);
    this.on = 0;
    this.rows = 0;
    this.done = 0;
    return r;
  }
}

async function open(): Promise<Conn> {
  const c = await Deno.connect({ hostname: a["pg-host"]!, port: Number(a["pg-port"]) });
  const conn = new Conn(c);
  const w = new Buf();
  const at = w.n;
  w.i32(0);
  w.i32(196608);
  for (const [k, v] of [["user", a.user!], ["database", a.db!], ["client_encoding", "UTF8"]]) {
    w.str(k);
    w.str(v);
  }
  w.u8(0);
  w.v.setInt32(at, w.n - at);
  void conn.loop();
  await conn.run(w.bytes()); // startup: authentication (trust), ReadyForQuery
  w.n = 0;
  for (const [name, sql] of [["b", "begin"], ["r", SET_ROLE], ["q", a.sql!], ["c", "commit"]]) {
    w.msg("P", (m) => {
      m.str(name);
      m.str(sql);
      m.i16(0);
    });
  }
  w.u8(0x53);
  w.i32(4);
  await conn.run(w.bytes()); // the four statements prepared
  conn.answer();
  return conn;
}

const free: Conn[] = await Promise.all(
  Array.from({ length: Number(a.pool) }, () => open()),
);
const waiting: ((c: Conn) => void)[] = [];

const server = Deno.serve(
  { hostname: "127.0.0.1", port: Number(a.port), onListen: () => {} },
  async (req) => {
    const body = JSON.parse(await req.text());
    const key = String(body.where[2]);
    const conn = free.pop() ?? await new Promise<Conn>((r) => waiting.push(r));
    try {
      const w = new Buf();
      w.room(head.length + tail.length + 64);
      w.b.set(head, 0);
      w.n = head.length;
      bindExec(w, "q", [key]);
      w.room(tail.length);
      w.b.set(tail, w.n);
      w.n += tail.length;
      await conn.run(w.b.subarray(0, w.n));
      const out = conn.answer();
      return new Response(out, { headers: { "content-type": "application/json" } });
    } catch {
      return new Response("floor failed", { status: 500 });
    } finally {
      const next = waiting.shift();
      if (next) next(conn);
      else free.push(conn);
    }
  },
);
console.log(`floor listening on ${(server.addr as Deno.NetAddr).port}`);
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(sig, () => Deno.exit(0)); // a normal exit writes --cpu-prof profiles
}
