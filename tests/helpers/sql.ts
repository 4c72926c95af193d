/**
 * A small SQL helper for tests, on svc's own client (src/pg/): a tagged template
 * (`` sql`select … ${value}` `` — values become bind parameters), `unsafe(text, params)`,
 * `begin(mode?, body)` on a connection of its own, and `end()`. Rows are decoded as the client
 * decodes them (src/pg/types.ts).
 */
import { Connection } from "../../src/pg/connection.ts";
import type { Row } from "../../src/pg/types.ts";

/** Runs statements: the tagged template and `unsafe`. */
export interface Queryable {
  /** A statement whose `${values}` are bind parameters. */
  <T = Row>(strings: TemplateStringsArray, ...values: unknown[]): Promise<T[]>;
  /** A statement with explicit parameters. */
  unsafe<T = Row>(text: string, params?: readonly unknown[]): Promise<T[]>;
}

/** A test's connection(s) to a database. */
export interface Sql extends Queryable {
  /** Runs `body` in a transaction on a connection of its own (`mode`: e.g. `read only`). */
  begin<T>(body: (tx: Queryable) => Promise<T>): Promise<T>;
  /** The same with a transaction mode. */
  begin<T>(mode: string, body: (tx: Queryable) => Promise<T>): Promise<T>;
  /** Closes every connection. */
  end(): Promise<void>;
}

function template(strings: TemplateStringsArray, values: unknown[]): string {
  let text = strings[0];
  for (let i = 0; i < values.length; i++) text += `$${i + 1}${strings[i + 1]}`;
  return text;
}

function queryable(conn: () => Promise<Connection>): Queryable {
  const unsafe = async <T>(text: string, params: readonly unknown[] = []): Promise<T[]> => {
    const [r] = await (await conn()).execute([{ sql: text, params, prepare: false }]);
    // `count`: the command's row count, as the write engine reads it (src/db/tx.ts).
    return Object.assign(r.rows, { count: r.rowCount }) as unknown as T[];
  };
  const tag = <T>(strings: TemplateStringsArray, ...values: unknown[]) =>
    unsafe<T>(template(strings, values), values);
  return Object.assign(tag, { unsafe }) as Queryable;
}

/** Connections to `uri` for a test (opened on first use). */
export function sqlClient(uri: string): Sql {
  const free: Connection[] = [];
  const all = new Set<Connection>();
  const take = async (): Promise<Connection> => {
    for (;;) {
      const c = free.pop();
      if (!c) break;
      if (!c.error) return c;
      all.delete(c);
    }
    const c = await Connection.connect(uri, { maxStatements: 0 });
    all.add(c);
    return c;
  };
  let shared: Promise<Connection> | null = null;
  const main = async () => {
    const c = await (shared ??= take());
    if (!c.error) return c;
    shared = take();
    return await shared;
  };
  const q = queryable(main);
  const begin = async <T>(
    a: string | ((tx: Queryable) => Promise<T>),
    b?: (tx: Queryable) => Promise<T>,
  ): Promise<T> => {
    const mode = typeof a === "string" ? a : "";
    const body = typeof a === "string" ? b! : a;
    const c = await take();
    try {
      await c.execute([{ sql: `begin ${mode}`.trim(), prepare: false }]);
      try {
        const out = await body(queryable(() => Promise.resolve(c)));
        await c.execute([{ sql: "commit", prepare: false }]);
        return out;
      } catch (e) {
        if (!c.error) await c.simple("rollback").catch(() => {});
        throw e;
      }
    } finally {
      free.push(c);
    }
  };
  return Object.assign(q, {
    begin,
    async end() {
      await Promise.all([...all].map((c) => c.close(1000)));
      all.clear();
      free.length = 0;
      shared = null;
    },
  }) as Sql;
}
