/**
 * A single connection opened on first use and opened again after it died: for the health probe,
 * introspection, scripts and tests — not for requests (the request pool is src/db/pool.ts).
 * Whoever holds a Client owns its one connection: statements run in the order they are issued.
 */
import { Connection, type ConnectionOptions, type Result, type Statement } from "./connection.ts";
import type { ConnectConfig } from "./config.ts";
import type { Row } from "./types.ts";

/** A lazily connected single connection. */
export class Client {
  readonly #config: ConnectConfig | string;
  readonly #opts: ConnectionOptions;
  #conn: Promise<Connection> | null = null;
  #closed = false;

  /** A client of `config` (a connection string or resolved settings); nothing connects yet. */
  constructor(config: ConnectConfig | string, opts: ConnectionOptions = {}) {
    this.#config = config;
    this.#opts = opts;
  }

  /** The open connection, connecting (again) when there is none. */
  connection(): Promise<Connection> {
    if (this.#closed) return Promise.reject(new Error("the client is closed"));
    const current = this.#conn;
    if (current) {
      return current.then((c) => (c.error ? this.#reconnect(current) : c));
    }
    return this.#reconnect(null);
  }

  #reconnect(stale: Promise<Connection> | null): Promise<Connection> {
    if (this.#conn !== stale && this.#conn) return this.#conn;
    const next = Connection.connect(this.#config, this.#opts);
    this.#conn = next;
    next.catch(() => {
      if (this.#conn === next) this.#conn = null;
    });
    return next;
  }

  /** Runs one statement with parameters; resolves its decoded rows. */
  async query<T = Row>(sql: string, params: readonly unknown[] = [], prepare = true): Promise<T[]> {
    const [r] = await (await this.connection()).execute([{ sql, params, prepare }]);
    return r.rows as T[];
  }

  /** Runs statements as one batch (one round trip); see Connection.execute. */
  async execute(stmts: readonly Statement[]): Promise<Result[]> {
    return await (await this.connection()).execute(stmts);
  }

  /** Runs a script through the simple protocol; see Connection.simple. */
  async simple(sql: string): Promise<Result[]> {
    return await (await this.connection()).simple(sql);
  }

  /**
   * Runs `body` in a transaction (`begin <mode>` … `commit`, rolled back when `body` throws).
   * Nothing else may use this client meanwhile.
   */
  async begin<T>(body: (tx: Client) => Promise<T>, mode = ""): Promise<T> {
    const conn = await this.connection();
    await conn.execute([{ sql: `begin ${mode}`.trim(), prepare: false }]);
    try {
      const out = await body(this);
      await conn.execute([{ sql: "commit", prepare: false }]);
      return out;
    } catch (e) {
      if (!conn.error) await conn.simple("rollback").catch(() => {});
      throw e;
    }
  }

  /**
   * Drops the current connection (what it has pending fails); the next use connects anew. For a
   * connection that stopped answering.
   */
  reset(): void {
    const c = this.#conn;
    this.#conn = null;
    c?.then((conn) => conn.destroy(), () => {});
  }

  /** Closes the connection, waiting at most `timeoutMs` for what is in flight. */
  async close(timeoutMs = 1000): Promise<void> {
    this.#closed = true;
    const c = this.#conn;
    this.#conn = null;
    if (!c) return;
    try {
      await (await c).close(timeoutMs);
    } catch { /* never connected */ }
  }
}
