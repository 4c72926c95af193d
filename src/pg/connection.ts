/**
 * One PostgreSQL connection speaking the extended query protocol.
 *
 * - A batch of statements ({@link Connection.execute}) is encoded into one buffer and leaves in
 *   one socket write, ended by one Sync: one round trip. If a statement fails, PostgreSQL skips
 *   the rest of the batch; its promise rejects with that statement's error (`statementIndex` says
 *   which).
 * - Statements are named prepared statements, parsed once per connection and kept up to
 *   `maxStatements` (least recently used ones are closed), or unnamed statements (parsed each
 *   time, still in the same round trip) when `maxStatements` is 0 — what a pooler in transaction
 *   mode needs.
 * - Parameters are text; results are text. A statement with a {@link RowSink} hands its rows'
 *   first column to the sink as raw bytes of the receive buffer (no string is made); others get
 *   rows decoded to JS values (types.ts).
 * - A sink may cap its rows' size (`maxRowBytes`): a DataRow's size is in its header, so a larger
 *   row is refused before its bytes arrive: they are skipped as they come, never buffered. The
 *   statement fails with a {@link PgRowTooLargeError}; the server knows nothing of it, so the rest
 *   of the batch runs and is read up to its ReadyForQuery, and the connection stays usable.
 * - A portal can stop after `maxRows` rows and be resumed ({@link Connection.fetch}) when the
 *   consumer wants more: streaming with back-pressure.
 * - Any socket error, end of stream or protocol violation fails every pending statement of the
 *   connection at once with a {@link PgConnectionError}; the connection is then dead for good.
 * - Notifications of channels the connection `LISTEN`s on go to `onNotification` as they come.
 */
import { type ConnectConfig, resolveConfig, type SslMode } from "./config.ts";
import { md5Password, Scram } from "./auth.ts";
import {
  parseFields,
  PgConnectionError,
  PgError,
  PgFetchTooLargeError,
  type PgFields,
  PgRowTooLargeError,
  PgSkippedError,
} from "./errors.ts";
import * as P from "./protocol.ts";
import { type Field, parseValue, type Row } from "./types.ts";
import { openTransport, type Transport } from "./transport.ts";

/** A statement to run. */
export interface Statement {
  /** SQL text (one statement). */
  sql: string;
  /** Parameters `$1…`, sent as text (null/undefined: NULL). */
  params?: readonly unknown[];
  /**
   * Whether to use a named prepared statement (default true; always false when the connection's
   * `maxStatements` is 0).
   */
  prepare?: boolean;
  /** Receives the rows' first column as raw bytes instead of decoded rows. */
  sink?: RowSink;
  /** Stop after this many rows (the portal stays open for {@link Connection.fetch}); 0: all. */
  maxRows?: number;
  /** The portal's name (default: the unnamed portal). */
  portal?: string;
}

/** Takes rows as raw bytes, straight from the receive buffer. */
export interface RowSink {
  /**
   * One row: its first column is `buf[start, end)`, or SQL NULL when `end < start`. The bytes
   * are only valid during the call: copy what you keep.
   */
  row(buf: Uint8Array, start: number, end: number): void;
  /**
   * Rows larger than this many bytes (their columns' bytes) are refused: the statement fails with
   * a {@link PgRowTooLargeError}, later rows of it are dropped, and a refused row is never
   * buffered (see the module's notes). Read when the statement (or fetch) is issued.
   */
  readonly maxRowBytes?: number;
  /**
   * Bytes one statement or fetch may hand it (its rows' columns' bytes), its first row always
   * accepted: a row that would go past them is refused like an oversized row, with a
   * {@link PgFetchTooLargeError} saying how many rows fitted, so that the consumer asks for fewer
   * rows at a time (a fetch of 1,000 rows of 2 MB each would otherwise be 2 GB in memory). Read
   * when the statement (or fetch) is issued.
   */
  readonly maxFetchBytes?: number;
}

/** The result of one statement. */
export interface Result {
  /** The command tag (`SELECT 3`, `INSERT 0 1`, …); "" when the portal was suspended. */
  command: string;
  /** Rows affected or returned (from the tag, or counted when suspended). */
  rowCount: number;
  /** The result's columns (empty for a command without rows). */
  fields: Field[];
  /** Decoded rows (empty when a sink took them). */
  rows: Row[];
  /** Whether the portal stopped at `maxRows` with more rows to come. */
  suspended: boolean;
}

/** A notification (`NOTIFY channel, 'payload'`) of a channel the connection listens on. */
export interface Notification {
  /** Process id of the backend that sent it. */
  processId: number;
  /** The channel's name. */
  channel: string;
  /** The payload ("" when none was given). */
  payload: string;
}

/** Options of a connection. */
export interface ConnectionOptions {
  /**
   * Named prepared statements kept (least recently used closed beyond it); 0: only unnamed
   * statements (for PgBouncer in transaction mode). Default 1000.
   */
  maxStatements?: number;
  /** Largest message accepted from the server, in bytes (default 1 GiB + 64 KiB). */
  maxMessageBytes?: number;
  /** Receives notices (warnings etc.) instead of dropping them. */
  onNotice?: (notice: PgFields) => void;
  /**
   * Receives the notifications of channels this connection `LISTEN`s on (NotificationResponse),
   * in the order the server sends them; without it they are dropped.
   */
  onNotification?: (notification: Notification) => void;
  /** Overrides the config's `application_name`. */
  applicationName?: string;
  /** Overrides the config's connect timeout, in milliseconds (0: none). */
  connectTimeoutMs?: number;
  /** Aborting it abandons the connection attempt. */
  signal?: AbortSignal;
}

/**
 * Statements whose SQL text is longer than this run unnamed, never kept prepared: a backend keeps
 * a prepared statement's parse and plan trees, which grow with the text (≈ 90 MB for 1 MB of
 * nested expressions), for as long as the statement stays among the connection's kept ones.
 */
export const MAX_PREPARED_SQL = 16 * 1024;

/**
 * The most SQL text, in characters, a connection keeps prepared across its statements (the least
 * recently used are closed beyond it): a backend's memory for its prepared statements grows with
 * their text (measured ≈ 50 × it: 2,800 distinct 11 KB reads grew each backend by ≈ 140 MB under
 * the count limit alone), so this bounds it near 50 MB a connection.
 */
export const MAX_PREPARED_CHARS = 1024 * 1024;
const MAX_MESSAGE = (1 << 30) + (1 << 16);
/** Messages other than DataRow are small: a larger length is a broken stream. */
const MAX_OTHER_MESSAGE = 64 << 20;
const READ_SIZE = 64 << 10;
const WRITE_SIZE = 16 << 10;

const dec = new TextDecoder();

/** Whether a row of `size` bytes goes past what `r`'s sink takes (its first row never does). */
function overBudget(r: Running, size: number): boolean {
  return size > r.budget && r.result.rowCount > 0;
}

/** A named prepared statement of this connection. */
interface Prepared {
  name: string;
  sql: string;
  /** Result columns (from the Describe sent with its Parse), null until received. */
  fields: Field[] | null;
  /** Whether ParseComplete arrived (the server has it). */
  ready: boolean;
  /** The batch whose Parse created it (usable by later statements of that batch only). */
  batch: number;
  /** Last use (a tick of the connection's counter), for eviction. */
  used: number;
}

/** A statement in flight. */
interface Running {
  sink: RowSink | undefined;
  /** The sink's row cap (Infinity: none). */
  cap: number;
  /** Whether a row was refused (the statement failed; its later rows are dropped). */
  refused: boolean;
  /** Bytes the sink still takes in this statement or fetch ({@link RowSink.maxFetchBytes}). */
  budget: number;
  fields: Field[] | null;
  prepared: Prepared | null;
  /** Whether this statement's Parse (named) is in the batch. */
  parsed: boolean;
  result: Result;
}

/** What an in-flight batch (one Sync) expects and collects. */
interface Pending {
  kind: "batch" | "simple" | "startup";
  id: number;
  stmts: Running[];
  at: number;
  error: unknown;
  /** Copy-out in progress (simple protocol): CopyData is skipped until CopyDone. */
  copyOut: boolean;
  resolve(results: Result[]): void;
  /** `partial`: the results of the statements that ran before the failure. */
  reject(e: unknown, partial?: Result[]): void;
}

/**
 * Shared by results without columns of their own, and as the rows of a statement whose rows went
 * to a sink (never written to: frozen).
 */
const NO_FIELDS = Object.freeze([]) as unknown as Field[];
const NO_ROWS = Object.freeze([]) as unknown as Row[];
const NO_PARAMS: readonly unknown[] = Object.freeze([]);

function newResult(fields: Field[] | null, sunk = false): Result {
  return {
    command: "",
    rowCount: 0,
    fields: fields ?? NO_FIELDS,
    rows: sunk ? NO_ROWS : [],
    suspended: false,
  };
}

/** A command tag and its row count. */
interface Tag {
  text: string;
  count: number;
}

/** Tags seen recently, shared by every connection (replaced round-robin). */
const RECENT_TAGS = 8;
const recentTags: Tag[] = [];
let nextTag = 0;

function tagCount(tag: string): number {
  const sp = tag.lastIndexOf(" ");
  if (sp < 0) return 0;
  const n = Number(tag.slice(sp + 1));
  return Number.isInteger(n) ? n : 0;
}

function protocolError(message: string): PgConnectionError {
  return new PgConnectionError("CONNECTION_CLOSED", `protocol violation: ${message}`);
}

/** A connection to PostgreSQL. Create it with {@link Connection.connect}. */
export class Connection {
  readonly #t: Transport;
  readonly #cfg: ConnectConfig;
  readonly #host: string;
  readonly #port: number;
  readonly #maxStatements: number;
  readonly #maxMessage: number;
  readonly #onNotice?: (n: PgFields) => void;
  readonly #onNotification?: (n: Notification) => void;

  // Receive buffer: bytes [#rs, #re) are unprocessed.
  #rb = new Uint8Array(READ_SIZE);
  #rv = new DataView(this.#rb.buffer);
  #rs = 0;
  #re = 0;

  // Send buffers: #out collects messages; #spare is the one being written (or free).
  #out = new P.Writer(WRITE_SIZE);
  #spare: P.Writer | null = new P.Writer(WRITE_SIZE);
  #writing = false;
  /** Inside {@link corked}: batches are encoded but not written yet. */
  #corked = false;

  readonly #queue: Pending[] = [];
  #qHead = 0;
  #batchId = 0;
  #tick = 0;
  readonly #prepared = new Map<string, Prepared>();
  /** Characters of SQL text of the statements in {@link #prepared} (see MAX_PREPARED_CHARS). */
  #preparedChars = 0;
  #nameSeq = 0;
  /** Names of evicted statements, closed at the start of the next batch. */
  #toClose: string[] = [];
  /** Named portals to close with the next batch ({@link closePortal}). */
  #portalsToClose: string[] = [];
  /** Statements of the current tick not yet written ({@link query}). */
  #open: { stmts: Statement[]; done: ((r: Result | undefined, e: unknown) => void)[] } | null =
    null;

  #dead: Error | null = null;
  #closeWaiters: ((e: Error) => void)[] = [];
  #scram: Scram | null = null;

  /** Backend process id (for cancel). */
  processId = 0;
  /** Backend secret key (for cancel). */
  secretKey: Uint8Array = new Uint8Array(0);
  /** Server parameters reported by ParameterStatus (server_version, TimeZone, …). */
  readonly parameters = new Map<string, string>();
  /** Transaction status from the last ReadyForQuery: `I` idle, `T` in a block, `E` failed. */
  txStatus: "I" | "T" | "E" = "I";

  private constructor(
    t: Transport,
    cfg: ConnectConfig,
    host: string,
    port: number,
    opts: ConnectionOptions,
  ) {
    this.#t = t;
    this.#cfg = cfg;
    this.#host = host;
    this.#port = port;
    this.#maxStatements = opts.maxStatements ?? 1000;
    this.#maxMessage = opts.maxMessageBytes ?? MAX_MESSAGE;
    this.#onNotice = opts.onNotice;
    this.#onNotification = opts.onNotification;
  }

  /**
   * Connects (TCP or Unix socket, TLS per sslmode), authenticates and waits until the server is
   * ready. Hosts are tried in order; the first that accepts wins. Rejects with a PgError (the
   * server refused: authentication, unknown database, …) or a PgConnectionError.
   */
  static async connect(
    config: ConnectConfig | string,
    opts: ConnectionOptions = {},
  ): Promise<Connection> {
    const cfg = typeof config === "string" ? resolveConfig(config) : config;
    const ms = opts.connectTimeoutMs ?? cfg.connectTimeout * 1000;
    const ctl = new AbortController();
    const timer = ms > 0
      ? setTimeout(
        () => ctl.abort(new PgConnectionError("CONNECT_TIMEOUT", `connect timeout (${ms} ms)`)),
        ms,
      )
      : undefined;
    const onAbort = () => ctl.abort(opts.signal!.reason);
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      let last: unknown;
      for (let i = 0; i < cfg.hosts.length; i++) {
        const host = cfg.hosts[i];
        const port = cfg.ports[cfg.ports.length === 1 ? 0 : i];
        const modes: SslMode[] = cfg.sslmode === "allow" ? ["disable", "require"] : [cfg.sslmode];
        for (const mode of modes) {
          try {
            return await Connection.#attempt(cfg, host, port, mode, opts, ctl.signal);
          } catch (e) {
            last = e;
            if (ctl.signal.aborted) throw ctl.signal.reason;
            // `allow`: retry with TLS only when the server refused the unencrypted session.
            if (!(e instanceof PgError && e.code === "28000")) break;
          }
        }
      }
      throw last;
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  static async #attempt(
    cfg: ConnectConfig,
    host: string,
    port: number,
    mode: SslMode,
    opts: ConnectionOptions,
    signal: AbortSignal,
  ): Promise<Connection> {
    let t: Transport;
    try {
      t = await openTransport(cfg, host, port, { signal }, mode);
    } catch (e) {
      // `prefer`: a failed handshake falls back to an unencrypted connection, as libpq does.
      if (mode !== "prefer" || signal.aborted || !(e instanceof PgConnectionError)) throw e;
      if (e.code !== "08001") throw e;
      t = await openTransport(cfg, host, port, { signal }, "disable");
    }
    const conn = new Connection(t, cfg, host, port, opts);
    const onAbort = () => conn.#fail(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      await conn.#startup(opts.applicationName ?? cfg.applicationName);
      return conn;
    } catch (e) {
      conn.#fail(e instanceof Error ? e : new Error(String(e)));
      throw signal.aborted ? signal.reason : e;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  #startup(applicationName?: string): Promise<void> {
    const params: Record<string, string> = {
      user: this.#cfg.user,
      database: this.#cfg.database,
      client_encoding: "UTF8",
      DateStyle: "ISO",
    };
    if (applicationName) params.application_name = applicationName;
    if (this.#cfg.options) params.options = this.#cfg.options;
    Object.assign(params, this.#cfg.params);
    const done = new Promise<void>((resolve, reject) => {
      this.#queue.push({
        kind: "startup",
        id: ++this.#batchId,
        stmts: [],
        at: 0,
        error: null,
        copyOut: false,
        resolve: () => resolve(),
        reject,
      });
    });
    P.startup(this.#out, params);
    this.#flush();
    this.#readLoop();
    return done;
  }

  /** The host and port this connection reached. */
  get address(): { host: string; port: number } {
    return { host: this.#host, port: this.#port };
  }

  /** Whether the connection is TLS-encrypted. */
  get encrypted(): boolean {
    return this.#t.encrypted;
  }

  /** The reason the connection is dead, or null while it is usable. */
  get error(): Error | null {
    return this.#dead;
  }

  /** Whether nothing is in flight or waiting. */
  get idle(): boolean {
    return this.#queue.length === this.#qHead && this.#open === null;
  }

  /** Number of named statements prepared (or being prepared) on this connection. */
  get preparedCount(): number {
    return this.#prepared.size;
  }

  /** Resolves with the reason once the connection is dead (closed, failed). */
  closed(): Promise<Error> {
    if (this.#dead) return Promise.resolve(this.#dead);
    return new Promise((r) => this.#closeWaiters.push(r));
  }

  // ---------------------------------------------------------------- sending

  /**
   * Runs `stmts` as one batch: one write, one Sync, one round trip. Resolves with each
   * statement's result; rejects with the first failure (a PgError whose `statementIndex` is the
   * failing statement's index; PostgreSQL skipped the ones after it) or the connection's error.
   * Statements queued with {@link query} earlier in the same tick go first.
   */
  execute(stmts: readonly Statement[]): Promise<Result[]> {
    if (this.#open) this.#flushOpen();
    if (this.#dead) return Promise.reject(this.#dead);
    return new Promise((resolve, reject) => {
      try {
        this.#encodeBatch(stmts, resolve, reject);
      } catch (e) {
        reject(e);
      }
    });
  }

  /**
   * Runs one statement; statements queued in the same tick go out together (one write, one
   * Sync). A failure rejects its statement and every later one of the same tick (with a
   * {@link PgSkippedError}, code 25P02).
   */
  query(stmt: Statement): Promise<Result> {
    if (this.#dead) return Promise.reject(this.#dead);
    if (!this.#open) {
      this.#open = { stmts: [], done: [] };
      queueMicrotask(() => this.#flushOpen());
    }
    const open = this.#open;
    return new Promise((resolve, reject) => {
      open.stmts.push(stmt);
      open.done.push((r, e) => (e === undefined ? resolve(r!) : reject(e)));
    });
  }

  #flushOpen(): void {
    const open = this.#open;
    if (!open) return;
    this.#open = null;
    const settle = (results: Result[] | undefined, e: unknown) => {
      const at = e === undefined ? -1 : ((e as { statementIndex?: number }).statementIndex ?? -1);
      open.done.forEach((d, i) => {
        if (e === undefined) d(results![i], undefined);
        else if (at < 0 || i === at) d(undefined, e);
        else if (i < at && results?.[i]) d(results[i], undefined); // ran before the failure
        else d(undefined, new PgSkippedError(e));
      });
    };
    if (this.#dead) return settle(undefined, this.#dead);
    try {
      this.#encodeBatch(open.stmts, (r) => settle(r, undefined), (e, r) => settle(r, e));
    } catch (e) {
      settle(undefined, e);
    }
  }

  /**
   * Closes the named `portal` with the next batch sent (no round trip of its own): a portal
   * whose rows were all read keeps its executor's memory until it is closed or its transaction
   * ends, so a transaction reading many (a batch) would hold all of theirs. Closing one that no
   * longer exists is not an error.
   */
  closePortal(portal: string): void {
    this.#portalsToClose.push(portal);
  }

  /**
   * Continues the suspended `portal`: at most `maxRows` more rows (0: all) into `sink`, or
   * decoded with `fields`. One write, one Sync.
   */
  fetch(
    portal: string,
    maxRows: number,
    opts: { sink?: RowSink; fields?: Field[] } = {},
  ): Promise<Result> {
    if (this.#open) this.#flushOpen();
    if (this.#dead) return Promise.reject(this.#dead);
    return new Promise((resolve, reject) => {
      const w = this.#out;
      P.execute(w, portal, maxRows);
      P.sync(w);
      this.#queue.push({
        kind: "batch",
        id: ++this.#batchId,
        stmts: [{
          sink: opts.sink,
          cap: opts.sink?.maxRowBytes ?? Infinity,
          refused: false,
          budget: opts.sink?.maxFetchBytes ?? Infinity,
          fields: opts.fields ?? null,
          prepared: null,
          parsed: false,
          result: newResult(opts.fields ?? null, opts.sink !== undefined),
        }],
        at: 0,
        error: null,
        copyOut: false,
        resolve: (r) => resolve(r[0]),
        reject,
      });
      this.#flush();
    });
  }

  /**
   * Runs `sql` through the simple query protocol: any number of `;`-separated statements, no
   * parameters, each statement's rows decoded. Rejects with the first failure (PostgreSQL stops
   * there; a script without its own BEGIN/COMMIT runs as one implicit transaction, rolled back).
   * COPY FROM STDIN is refused (the server gets CopyFail); COPY TO STDOUT data is skipped.
   */
  simple(sql: string): Promise<Result[]> {
    if (this.#open) this.#flushOpen();
    if (this.#dead) return Promise.reject(this.#dead);
    return new Promise((resolve, reject) => {
      const start = this.#out.pos;
      try {
        P.query(this.#out, sql);
      } catch (e) {
        this.#out.pos = start;
        return reject(e);
      }
      this.#queue.push({
        kind: "simple",
        id: ++this.#batchId,
        stmts: [],
        at: 0,
        error: null,
        copyOut: false,
        resolve,
        reject,
      });
      this.#flush();
    });
  }

  /** Encodes a batch into the send buffer (nothing is written if encoding throws). */
  #encodeBatch(
    stmts: readonly Statement[],
    resolve: (r: Result[]) => void,
    reject: (e: unknown, partial?: Result[]) => void,
  ): void {
    const w = this.#out;
    const start = w.pos;
    const id = ++this.#batchId;
    const running: Running[] = new Array(stmts.length);
    let created: Prepared[] | null = null;
    try {
      if (this.#toClose.length) {
        for (const name of this.#toClose) P.close(w, "S", name);
        this.#toClose = [];
      }
      if (this.#portalsToClose.length) {
        for (const name of this.#portalsToClose) P.close(w, "P", name);
        this.#portalsToClose = [];
      }
      for (let i = 0; i < stmts.length; i++) {
        const s = stmts[i];
        const params = s.params ?? NO_PARAMS;
        const portal = s.portal ?? "";
        let prep: Prepared | null = null;
        let parsed = false;
        if (s.prepare !== false && this.#maxStatements > 0 && s.sql.length <= MAX_PREPARED_SQL) {
          prep = this.#prepared.get(s.sql) ?? null;
          if (prep && !prep.ready && prep.batch !== id) {
            // Being prepared by an earlier batch still in flight, whose failure would leave it
            // unprepared: run this one unnamed.
            prep = null;
          } else if (!prep) {
            prep = this.#prepare(s.sql, id);
            if (prep) {
              (created ??= []).push(prep);
              parsed = true;
            }
          }
        }
        // Columns not known yet (new, or its Bind failed before any description came): described.
        const described = prep !== null && (parsed || prep.fields === null);
        if (prep) {
          prep.used = ++this.#tick;
          if (parsed) P.parse(w, prep.name, s.sql);
          P.bind(w, portal, prep.name, params);
          if (described) P.describe(w, "P", portal);
        } else {
          P.parse(w, "", s.sql);
          P.bind(w, portal, "", params);
          P.describe(w, "P", portal);
        }
        P.execute(w, portal, s.maxRows ?? 0);
        const fields = prep && !described ? prep.fields : null;
        running[i] = {
          sink: s.sink,
          cap: s.sink?.maxRowBytes ?? Infinity,
          refused: false,
          budget: s.sink?.maxFetchBytes ?? Infinity,
          fields,
          prepared: prep,
          parsed: prep !== null && parsed,
          result: newResult(fields, s.sink !== undefined),
        };
      }
      P.sync(w);
    } catch (e) {
      w.pos = start;
      if (created) { for (const p of created) this.#forget(p); }
      throw e;
    }
    this.#queue.push({
      kind: "batch",
      id,
      stmts: running,
      at: 0,
      error: null,
      copyOut: false,
      resolve,
      reject,
    });
    this.#flush();
  }

  /** Drops `p` from the kept statements (its server side, if any, is the caller's to close). */
  #forget(p: Prepared): void {
    if (this.#prepared.delete(p.sql)) this.#preparedChars -= p.sql.length;
  }

  /**
   * A new named statement for `sql`, evicting the least recently used ones while the kept
   * statements are too many or their text too long ({@link MAX_PREPARED_CHARS}); null (run it
   * unnamed) when no statement can be evicted.
   */
  #prepare(sql: string, batch: number): Prepared | null {
    while (
      this.#prepared.size >= this.#maxStatements ||
      this.#preparedChars + sql.length > MAX_PREPARED_CHARS
    ) {
      let victim: Prepared | null = null;
      for (const p of this.#prepared.values()) {
        if (!p.ready || p.batch === batch) continue;
        if (!victim || p.used < victim.used) victim = p;
      }
      if (!victim) return null;
      this.#forget(victim);
      this.#toClose.push(victim.name);
    }
    const p: Prepared = {
      name: `svc${(++this.#nameSeq).toString(36)}`,
      sql,
      fields: null,
      ready: false,
      batch,
      used: 0,
    };
    this.#prepared.set(sql, p);
    this.#preparedChars += sql.length;
    return p;
  }

  /**
   * Runs `fn`, which issues batches (each with its own Sync), and sends everything they encoded in
   * one socket write: e.g. a transaction's statements, then its commit as a batch of its own, so
   * the commit runs even when a statement failed (PostgreSQL answers ROLLBACK) — one round trip.
   */
  corked<T>(fn: () => T): T {
    if (this.#corked) return fn();
    this.#corked = true;
    try {
      return fn();
    } finally {
      this.#corked = false;
      this.#flush();
    }
  }

  /** Writes what is in the send buffer (one write at a time, the rest follows). */
  #flush(): void {
    if (this.#corked || this.#writing || this.#out.pos === 0 || this.#dead) return;
    const w = this.#out;
    this.#out = this.#spare ?? new P.Writer(WRITE_SIZE);
    this.#spare = null;
    this.#writing = true;
    this.#sending = w;
    this.#sent = 0;
    // Handlers bound once (no closures, no async step per write): the whole buffer usually goes
    // in one write; a partial one continues from where it stopped.
    this.#t.write(w.buf.subarray(0, w.pos)).then(this.#wrote, this.#writeFailed);
  }

  /** The writer being written by {@link #flush} and the bytes of it written so far. */
  #sending: P.Writer | null = null;
  #sent = 0;

  readonly #wrote = (n: number): void => {
    const w = this.#sending!;
    this.#sent += n;
    if (this.#sent < w.pos && !this.#dead) {
      this.#t.write(w.buf.subarray(this.#sent, w.pos)).then(this.#wrote, this.#writeFailed);
      return;
    }
    this.#sending = null;
    this.#writing = false;
    w.pos = 0;
    // A writer grown by a large batch is not kept (up to 1 MiB each, two per connection).
    this.#spare = w.buf.length > WRITE_SIZE ? new P.Writer(WRITE_SIZE) : w;
    this.#flush();
  };

  readonly #writeFailed = (e: unknown): void => {
    this.#sending = null;
    this.#writing = false;
    this.#fail(
      new PgConnectionError("CONNECTION_CLOSED", `write failed: ${(e as Error).message}`, e),
    );
  };

  async #writeAll(b: Uint8Array): Promise<void> {
    let o = 0;
    while (o < b.length) o += await this.#t.write(o === 0 ? b : b.subarray(o));
  }

  // ---------------------------------------------------------------- receiving

  async #readLoop(): Promise<void> {
    try {
      for (;;) {
        if (this.#re === this.#rb.length) this.#makeRoom(this.#re - this.#rs + 1);
        const n = await this.#t.read(this.#re === 0 ? this.#rb : this.#rb.subarray(this.#re));
        if (this.#dead) return;
        if (n === null) {
          throw new PgConnectionError("CONNECTION_CLOSED", "the server closed the connection");
        }
        this.#adoptMoved();
        this.#re += n;
        this.#process();
        if (this.#dead) return;
      }
    } catch (e) {
      this.#fail(
        e instanceof Error && "code" in e
          ? e
          : new PgConnectionError("CONNECTION_CLOSED", `read failed: ${(e as Error)?.message}`, e),
      );
    }
  }

  /**
   * Takes the buffer a stream read moved the receive buffer's memory to (src/pg/transport.ts):
   * the same bytes, in a new buffer object. Not inlined in the read loop, whose suspended frame
   * would keep the last one alive through the next wait (a buffer grown by a large row with it).
   */
  #adoptMoved(): void {
    const moved = this.#t.moved();
    if (moved === null) return;
    this.#rb = new Uint8Array(moved);
    this.#rv = new DataView(moved);
  }

  /** Moves unprocessed bytes to the front and grows the buffer to hold `need` bytes. */
  #makeRoom(need: number): void {
    const len = this.#re - this.#rs;
    if (need > this.#rb.length) {
      let size = this.#rb.length * 2;
      while (size < need) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.#rb.subarray(this.#rs, this.#re));
      this.#rb = next;
      this.#rv = new DataView(next.buffer);
    } else if (this.#rs > 0) {
      this.#rb.copyWithin(0, this.#rs, this.#re);
    }
    this.#rs = 0;
    this.#re = len;
  }

  /** Handles every complete message in the receive buffer. */
  #process(): void {
    const rb = this.#rb;
    const rv = this.#rv;
    let rs = this.#rs;
    const re = this.#re;
    if (this.#skip > 0) {
      // The rest of a refused row: dropped as it comes.
      const k = Math.min(this.#skip, re - rs);
      this.#skip -= k;
      rs += k;
      if (this.#skip > 0) {
        this.#rs = this.#re = 0;
        return;
      }
    }
    while (re - rs >= 5) {
      const type = rb[rs];
      const len = rv.getInt32(rs + 1);
      const max = type === 0x44 ? this.#maxMessage : MAX_OTHER_MESSAGE;
      if (len < 4 || len > max) {
        throw protocolError(
          `message '${String.fromCharCode(type)}' of ${len} bytes (at most ${max} accepted)`,
        );
      }
      if (re - rs < len + 1) break;
      this.#rs = rs + len + 1;
      this.#handle(type, rs + 5, rs + 1 + len);
      if (this.#dead) return;
      rs = this.#rs;
    }
    this.#rs = rs;
    if (rs === re) {
      this.#rs = this.#re = 0;
      // A buffer grown by a large message is not kept once the message is done.
      if (this.#rb.length > READ_SIZE) {
        this.#rb = new Uint8Array(READ_SIZE);
        this.#rv = new DataView(this.#rb.buffer);
      }
    } else if (re - rs >= 5) {
      // A partial message: make room for all of it, unless it is a row its sink refuses.
      const need = rv.getInt32(rs + 1) + 1;
      if (need > this.#rb.length - rs && !(rb[rs] === 0x44 && this.#refuseEarly(rs, re, need))) {
        this.#makeRoom(need);
      }
    } else if (rs > 0 && this.#rb.length - rs < 5) {
      this.#makeRoom(5);
    }
  }

  /** Bytes of a refused DataRow still to come, dropped as they arrive. */
  #skip = 0;

  /**
   * A DataRow of `need` bytes (type and length included) whose first `re - rs` bytes are at `rs`,
   * too large for the buffer as it is: when its statement's sink refuses it (or refused an earlier
   * row), the statement fails, the bytes are dropped and the rest is skipped as it comes. Also
   * true while its column count has not arrived (nothing is grown until it has).
   */
  #refuseEarly(rs: number, re: number, need: number): boolean {
    const p = this.#head();
    if (!p || p.kind !== "batch" || p.copyOut) return false;
    const r = p.stmts[p.at];
    if (!r || !r.sink || (r.cap === Infinity && r.budget === Infinity && !r.refused)) return false;
    if (!r.refused) {
      if (re - rs < 7) {
        // The column count is not here yet: wait for it (room for it is made by the read loop).
        if (this.#rb.length - rs < 7) this.#makeRoom(7);
        return true;
      }
      const size = need - 7 - 4 * this.#rv.getInt16(rs + 5);
      if (size <= r.cap && !overBudget(r, size)) return false;
      this.#refuse(p, r, size);
    }
    this.#skip = need - (re - rs);
    this.#rs = this.#re = 0;
    return true;
  }

  /**
   * Fails the statement `r` of `p` for a row of `size` bytes over its sink's cap, or past what
   * the sink takes in one fetch.
   */
  #refuse(p: Pending, r: Running, size: number): void {
    r.refused = true;
    if (p.error === null) {
      const err = size > r.cap
        ? new PgRowTooLargeError(size, r.cap)
        : new PgFetchTooLargeError(r.result.rowCount, r.sink?.maxFetchBytes ?? 0);
      err.statementIndex = p.at;
      p.error = err;
    }
  }

  #head(): Pending | undefined {
    return this.#qHead < this.#queue.length ? this.#queue[this.#qHead] : undefined;
  }

  /** The statement a message of the current batch belongs to. */
  #current(p: Pending, what: string): Running {
    if (p.kind === "simple") {
      let r = p.stmts[p.at];
      if (!r) {
        r = {
          sink: undefined,
          cap: Infinity,
          refused: false,
          budget: Infinity,
          fields: null,
          prepared: null,
          parsed: false,
          result: newResult([]),
        };
        p.stmts.push(r);
      }
      return r;
    }
    const r = p.stmts[p.at];
    if (!r) throw protocolError(`${what} beyond the statements sent`);
    return r;
  }

  #handle(type: number, s: number, e: number): void {
    const rb = this.#rb;
    const p = this.#head();
    switch (type) {
      case 0x44: { // 'D' DataRow
        if (!p || p.kind === "startup") throw protocolError("DataRow outside a query");
        const r = this.#current(p, "DataRow");
        if (p.copyOut) throw protocolError("DataRow during COPY");
        this.#dataRow(p, r, s, e);
        return;
      }
      case 0x43: { // 'C' CommandComplete
        if (!p || p.kind === "startup") throw protocolError("CommandComplete outside a query");
        const r = this.#current(p, "CommandComplete");
        const tag = this.#tag(s, e);
        r.result.command = tag.text;
        r.result.rowCount = tag.count;
        if (!r.fields && r.prepared?.fields) r.fields = r.result.fields = r.prepared.fields;
        if (r.result.rowCount === 0 && r.result.rows.length) {
          r.result.rowCount = r.result.rows.length;
        }
        p.at++;
        p.copyOut = false;
        return;
      }
      case 0x32: // '2' BindComplete
      case 0x33: // '3' CloseComplete
      case 0x74: // 't' ParameterDescription
        if (!p || p.kind !== "batch") throw protocolError("unexpected extended-protocol reply");
        return;
      case 0x31: { // '1' ParseComplete
        if (!p || p.kind !== "batch") throw protocolError("unexpected ParseComplete");
        const r = this.#current(p, "ParseComplete");
        if (r.parsed && r.prepared) r.prepared.ready = true;
        return;
      }
      case 0x54: { // 'T' RowDescription
        if (!p || p.kind === "startup") throw protocolError("RowDescription outside a query");
        const r = this.#current(p, "RowDescription");
        const fields = this.#fields(s, e);
        r.fields = fields;
        r.result.fields = fields;
        if (r.prepared) r.prepared.fields = fields;
        return;
      }
      case 0x6e: { // 'n' NoData
        if (!p || p.kind !== "batch") throw protocolError("unexpected NoData");
        const r = this.#current(p, "NoData");
        r.fields = [];
        if (r.prepared) r.prepared.fields = [];
        return;
      }
      case 0x73: { // 's' PortalSuspended
        if (!p || p.kind !== "batch") throw protocolError("unexpected PortalSuspended");
        const r = this.#current(p, "PortalSuspended");
        r.result.suspended = true;
        r.result.rowCount = r.result.rows.length || r.result.rowCount;
        p.at++;
        return;
      }
      case 0x49: { // 'I' EmptyQueryResponse
        if (!p || p.kind === "startup") throw protocolError("unexpected EmptyQueryResponse");
        this.#current(p, "EmptyQueryResponse");
        p.at++;
        return;
      }
      case 0x5a: { // 'Z' ReadyForQuery
        if (!p) throw protocolError("ReadyForQuery with nothing pending");
        if (e - s !== 1) throw protocolError("ReadyForQuery of a wrong length");
        const st = rb[s];
        if (st !== 0x49 && st !== 0x54 && st !== 0x45) {
          throw protocolError(`unknown transaction status ${st}`);
        }
        this.txStatus = String.fromCharCode(st) as "I" | "T" | "E";
        this.#qHead++;
        if (this.#qHead === this.#queue.length) {
          this.#queue.length = 0;
          this.#qHead = 0;
        }
        try {
          this.#settle(p);
        } catch (e) {
          // Already out of the queue: the connection's failure would not reach it.
          p.reject(e);
          throw e;
        }
        return;
      }
      case 0x45: { // 'E' ErrorResponse
        const err = new PgError(parseFields(rb.subarray(s, e)));
        if (!p) throw err; // FATAL out of the blue (shutdown, terminated backend)
        if (p.kind === "startup") {
          // No ReadyForQuery follows a startup failure: the server closes.
          this.#qHead++;
          p.reject(err);
          throw err;
        }
        if (p.error === null) {
          err.statementIndex = p.at;
          p.error = err;
        }
        p.copyOut = false;
        if (p.kind === "simple") p.at = p.stmts.length; // the script stops here
        if (err.severity === "FATAL" || err.severity === "PANIC") throw err;
        return;
      }
      case 0x4e: // 'N' NoticeResponse
        this.#onNotice?.(parseFields(rb.subarray(s, e)));
        return;
      case 0x53: { // 'S' ParameterStatus
        const k = rb.indexOf(0, s);
        if (k < 0 || k >= e) throw protocolError("malformed ParameterStatus");
        this.parameters.set(dec.decode(rb.subarray(s, k)), this.#cstr(k + 1, e));
        return;
      }
      case 0x41: { // 'A' NotificationResponse: may arrive between any two messages
        if (!this.#onNotification) return;
        const c = rb.indexOf(0, s + 4);
        if (e - s < 6 || c < 0 || c >= e) throw protocolError("malformed NotificationResponse");
        const n: Notification = {
          processId: this.#rv.getInt32(s),
          channel: dec.decode(rb.subarray(s + 4, c)),
          payload: this.#cstr(c + 1, e),
        };
        // Delivered outside the read loop: a throwing listener is not a protocol violation.
        const deliver = this.#onNotification;
        queueMicrotask(() => deliver(n));
        return;
      }
      case 0x4b: { // 'K' BackendKeyData
        if (e - s < 8) throw protocolError("malformed BackendKeyData");
        this.processId = this.#rv.getInt32(s);
        this.secretKey = rb.slice(s + 4, e);
        return;
      }
      case 0x52: // 'R' Authentication*
        if (!p || p.kind !== "startup") throw protocolError("authentication request after startup");
        this.#auth(s, e);
        return;
      case 0x76: // 'v' NegotiateProtocolVersion: 3.0 without options is always accepted
        if (!p || p.kind !== "startup") throw protocolError("unexpected NegotiateProtocolVersion");
        return;
      case 0x47: { // 'G' CopyInResponse: svc never sends COPY data
        if (!p || p.kind === "startup") throw protocolError("unexpected CopyInResponse");
        P.copyFail(this.#out, "COPY FROM STDIN is not supported by svc's client");
        if (p.kind === "batch") P.sync(this.#out);
        this.#flush();
        return;
      }
      case 0x48: // 'H' CopyOutResponse: its data is skipped
        if (!p || p.kind === "startup") throw protocolError("unexpected CopyOutResponse");
        p.copyOut = true;
        return;
      case 0x64: // 'd' CopyData
      case 0x63: // 'c' CopyDone
        if (!p || !p.copyOut) throw protocolError("unexpected COPY data");
        return;
      default:
        throw protocolError(`unexpected message type '${String.fromCharCode(type)}' (${type})`);
    }
  }

  #settle(p: Pending): void {
    if (p.kind === "batch") {
      // Statements whose Parse did not complete (the batch failed first) are not prepared.
      for (const r of p.stmts) {
        if (r.parsed && r.prepared && !r.prepared.ready) {
          if (this.#prepared.get(r.prepared.sql) === r.prepared) this.#forget(r.prepared);
        }
      }
    }
    if (p.error !== null) {
      const err = p.error as PgError;
      // A cached statement whose result type changed cannot be used again: re-prepare it.
      if (err.code === "0A000" && p.kind === "batch") {
        const r = p.stmts[err.statementIndex ?? -1];
        if (r?.prepared && this.#prepared.get(r.prepared.sql) === r.prepared) {
          this.#forget(r.prepared);
          this.#toClose.push(r.prepared.name);
        }
      }
      p.reject(p.error, p.stmts.slice(0, p.at).map((r) => r.result));
      return;
    }
    if (p.kind === "startup") return p.resolve([]);
    if (p.kind === "batch" && p.at !== p.stmts.length) {
      throw protocolError(`ReadyForQuery after ${p.at} of ${p.stmts.length} statements`);
    }
    const out = new Array<Result>(p.stmts.length);
    for (let i = 0; i < p.stmts.length; i++) out[i] = p.stmts[i].result;
    p.resolve(out);
  }

  /**
   * A CommandComplete's tag and row count: a tag seen recently (`SELECT 1`, `BEGIN`, …) is
   * reused, not decoded and parsed again.
   */
  #tag(s: number, e: number): Tag {
    const rb = this.#rb;
    let end = rb.indexOf(0, s);
    if (end < 0 || end >= e) end = e;
    const n = end - s;
    for (let i = 0; i < recentTags.length; i++) {
      const t = recentTags[i];
      const text = t.text;
      if (text.length !== n) continue;
      let k = 0;
      while (k < n && text.charCodeAt(k) === rb[s + k]) k++;
      if (k === n) return t;
    }
    const text = this.#cstr(s, e);
    const t = { text, count: tagCount(text) };
    // Kept when ASCII (one character per byte, as every command tag is) and short.
    if (n <= 32 && text.length === n) {
      recentTags[nextTag] = t;
      nextTag = (nextTag + 1) % RECENT_TAGS;
    }
    return t;
  }

  #cstr(s: number, e: number): string {
    const rb = this.#rb;
    let end = rb.indexOf(0, s);
    if (end < 0 || end >= e) end = e;
    // Short ASCII (command tags, most names) without a TextDecoder call.
    if (end - s <= 32) {
      let out = "";
      for (let i = s; i < end; i++) {
        const c = rb[i];
        if (c > 0x7f) return dec.decode(rb.subarray(s, end));
        out += String.fromCharCode(c);
      }
      return out;
    }
    return dec.decode(rb.subarray(s, end));
  }

  #fields(s: number, e: number): Field[] {
    const rb = this.#rb;
    const rv = this.#rv;
    if (e - s < 2) throw protocolError("malformed RowDescription");
    const n = rv.getInt16(s);
    const out: Field[] = new Array(n);
    let o = s + 2;
    for (let i = 0; i < n; i++) {
      const z = rb.indexOf(0, o);
      if (z < 0 || z + 19 > e) throw protocolError("malformed RowDescription");
      out[i] = {
        name: dec.decode(rb.subarray(o, z)),
        tableOid: rv.getUint32(z + 1),
        column: rv.getInt16(z + 5),
        typeOid: rv.getUint32(z + 7),
        typeSize: rv.getInt16(z + 11),
        typeMod: rv.getInt32(z + 13),
      };
      o = z + 19; // + format code (always text)
    }
    return out;
  }

  #dataRow(p: Pending, r: Running, s: number, e: number): void {
    const rb = this.#rb;
    const rv = this.#rv;
    if (e - s < 2) throw protocolError("malformed DataRow");
    const n = rv.getInt16(s);
    let o = s + 2;
    if (r.sink) {
      if (n < 1 || e - o < 4) throw protocolError("DataRow without a column");
      // The row's size: its columns' bytes (the message less the count and the lengths).
      const size = e - o - 4 * n;
      if (size > r.cap || r.refused || overBudget(r, size)) {
        if (!r.refused) this.#refuse(p, r, size);
        return;
      }
      r.budget -= size;
      const len = rv.getInt32(o);
      o += 4;
      if (len > e - o) throw protocolError("DataRow column beyond its message");
      r.sink.row(rb, o, len < 0 ? o - 1 : o + len);
      r.result.rowCount++;
      return;
    }
    let fields = r.fields;
    if (!fields && r.prepared?.fields) {
      // A statement prepared earlier in the same batch: its columns arrived with that one.
      fields = r.fields = r.result.fields = r.prepared.fields;
    }
    if (!fields || fields.length !== n) throw protocolError("DataRow does not match its columns");
    const row: Row = {};
    for (let i = 0; i < n; i++) {
      if (e - o < 4) throw protocolError("DataRow shorter than its columns");
      const len = rv.getInt32(o);
      o += 4;
      if (len < 0) {
        row[fields[i].name] = null;
        continue;
      }
      if (len > e - o) throw protocolError("DataRow column beyond its message");
      row[fields[i].name] = parseValue(fields[i].typeOid, dec.decode(rb.subarray(o, o + len)));
      o += len;
    }
    r.result.rows.push(row);
  }

  #auth(s: number, e: number): void {
    const rv = this.#rv;
    if (e - s < 4) throw protocolError("malformed authentication request");
    const code = rv.getInt32(s);
    const pw = this.#cfg.password;
    const needPassword = () => {
      if (pw === undefined) {
        throw new PgConnectionError(
          "08001",
          "the server asks for a password and none is configured",
        );
      }
      return pw;
    };
    switch (code) {
      case 0: // AuthenticationOk
        if (this.#scram) throw protocolError("SCRAM exchange not completed");
        return;
      case 3: // CleartextPassword
        P.password(this.#out, needPassword());
        this.#flush();
        return;
      case 5: { // MD5Password
        if (e - s < 8) throw protocolError("malformed MD5 request");
        P.password(
          this.#out,
          md5Password(this.#cfg.user, needPassword(), this.#rb.slice(s + 4, s + 8)),
        );
        this.#flush();
        return;
      }
      case 10: { // SASL
        const mechs = dec.decode(this.#rb.subarray(s + 4, e)).split("\0").filter(Boolean);
        if (!mechs.includes("SCRAM-SHA-256")) {
          throw new PgConnectionError(
            "08001",
            `the server offers only ${mechs.join(", ")}: svc's client does SCRAM-SHA-256 ` +
              "without channel binding",
          );
        }
        this.#scram = new Scram(needPassword());
        P.saslInitial(this.#out, "SCRAM-SHA-256", this.#scram.first());
        this.#flush();
        return;
      }
      case 11: { // SASLContinue
        const scram = this.#scram;
        if (!scram) throw protocolError("SASLContinue without SASL");
        const data = this.#rb.slice(s + 4, e);
        scram.final(data).then((msg) => {
          if (this.#dead) return;
          P.saslResponse(this.#out, msg);
          this.#flush();
        }, (err) => this.#fail(new PgConnectionError("08001", (err as Error).message, err)));
        return;
      }
      case 12: { // SASLFinal
        const scram = this.#scram;
        if (!scram) throw protocolError("SASLFinal without SASL");
        this.#scram = null;
        try {
          scram.verify(this.#rb.slice(s + 4, e));
        } catch (err) {
          throw new PgConnectionError("08001", (err as Error).message, err);
        }
        return;
      }
      default:
        throw new PgConnectionError(
          "08001",
          `unsupported authentication method (request ${code}): svc's client does trust, ` +
            "password, md5 and scram-sha-256",
        );
    }
  }

  // ---------------------------------------------------------------- ending

  /** Marks the connection dead, closes the socket and fails everything pending with `e`. */
  #fail(e: Error): void {
    if (this.#dead) return;
    this.#dead = e;
    this.#t.close();
    const pending = this.#queue.slice(this.#qHead);
    this.#queue.length = 0;
    this.#qHead = 0;
    for (const p of pending) p.reject(e);
    if (this.#open) this.#flushOpen();
    for (const w of this.#closeWaiters) w(e);
    this.#closeWaiters = [];
  }

  /**
   * Kills the connection at once: the socket is closed and everything pending fails with
   * `reason` (default: a CONNECTION_CLOSED PgConnectionError). For a connection that stopped
   * answering.
   */
  destroy(reason?: Error): void {
    this.#fail(
      reason ?? new PgConnectionError("CONNECTION_CLOSED", "the connection was closed by svc"),
    );
  }

  /**
   * Closes the connection. With `timeoutMs`, waits at most that long for what is in flight to
   * finish first; what is still pending then fails with CONNECTION_ENDED.
   */
  async close(timeoutMs = 0): Promise<void> {
    if (this.#dead) return;
    if (this.#open) this.#flushOpen();
    if (timeoutMs > 0 && this.#queue.length > this.#qHead) {
      const last = this.#queue[this.#queue.length - 1];
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((r) => {
          const prev = last.resolve;
          const prevRej = last.reject;
          last.resolve = (x) => (prev(x), r());
          last.reject = (x) => (prevRej(x), r());
        }),
        new Promise<void>((r) => (timer = setTimeout(r, timeoutMs))),
        this.closed().then(() => {}),
      ]);
      clearTimeout(timer);
    }
    if (this.#dead) return;
    try {
      P.terminate(this.#out);
      const w = this.#out;
      if (!this.#writing) {
        await Promise.race([
          this.#writeAll(w.buf.subarray(0, w.pos)),
          new Promise((r) => setTimeout(r, 100)),
        ]);
      }
    } catch { /* closing anyway */ }
    this.#fail(new PgConnectionError("CONNECTION_ENDED", "the connection was closed"));
  }

  /**
   * Asks the server to cancel what this connection is running (CancelRequest over a separate
   * connection, unencrypted). Resolves once the request was delivered; whether anything was
   * cancelled shows on the running statement (SQLSTATE 57014).
   */
  async cancel(timeoutMs = 5000): Promise<void> {
    if (this.processId === 0) return;
    const w = new P.Writer(16);
    P.cancelRequest(w, this.processId, this.secretKey);
    const bytes = w.take();
    const signal = AbortSignal.timeout(timeoutMs);
    const t = await openTransport(this.#cfg, this.#host, this.#port, { signal }, "disable");
    try {
      let o = 0;
      while (o < bytes.length) o += await t.write(bytes.subarray(o));
      // The server closes the connection once it has read the request.
      const sink = new Uint8Array(16);
      const timer = setTimeout(() => t.close(), timeoutMs);
      try {
        while ((await t.read(sink)) !== null) { /* nothing is sent back */ }
      } catch { /* closed */ }
      clearTimeout(timer);
    } finally {
      t.close();
    }
  }
}
