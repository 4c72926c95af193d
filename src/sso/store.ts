/**
 * The shared replay store (`sso.store`): consumed SAML assertion IDs and SSO login states recorded
 * in one PostgreSQL table until they expire, so a replay is refused after a restart and on every
 * replica sharing the database. Each claim is one atomic `insert … on conflict do nothing
 * returning`, on a connection of its own opened as the authenticator (never in a request's
 * transaction, never as the browser's role); expired rows are purged in the background. svc
 * never creates the table: `svc --print-setup-sql --sso.store=<table>` prints it (docs/sso.md,
 * "Replay protection").
 */
import { Client } from "../pg/client.ts";
import { type Config, connectionString, samlEntries, storeTable } from "../config/load.ts";
import { log } from "../observe/log.ts";
import { type OnceStore, storeFull } from "../util/once.ts";
import { reason } from "./common.ts";

/** How often expired rows are purged (also once at start). */
export const PURGE_EVERY_MS = 10 * 60_000;
/** Rows are purged this long after their expiry (tolerates clocks of replicas a little apart). */
const PURGE_GRACE = "5 minutes";
/** Keys longer than this are stored as their SHA-256 (a primary key entry stays small). */
const MAX_KEY = 200;

async function storedKey(key: string): Promise<string> {
  if (key.length <= MAX_KEY) return key;
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key));
  return `sha256:${
    Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("")
  }`;
}

/** The PostgreSQL-backed {@link OnceStore}. */
export class PgOnce implements OnceStore {
  readonly #sql: Client;
  readonly #table: string;
  readonly #claim: string;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  /** `uri`: the authenticator's connection string; `table`: `sso.store`. */
  constructor(readonly uri: string, readonly table: string, connectTimeout = 5) {
    this.#table = storeTable(table);
    this.#claim = `insert into ${this.#table} (ns, key, expires_at) values ($1, $2, $3) ` +
      "on conflict (ns, key) do nothing returning true as ok";
    // One connection, opened on first use and again after it died.
    this.#sql = new Client(uri, {
      connectTimeoutMs: connectTimeout * 1000,
      applicationName: "svc sso store",
    });
  }

  /** See {@link OnceStore.claim}; an unusable store is 503 SSO_NOT_READY (reason logged). */
  async claim(ns: string, key: string, expiresAt: number): Promise<boolean> {
    const until = Number.isFinite(expiresAt) ? expiresAt : Date.now() + 3600_000;
    try {
      const rows = await this.#sql.query(this.#claim, [
        ns,
        await storedKey(key),
        new Date(until).toISOString(),
      ]);
      return rows.length === 1;
    } catch (e) {
      log.error("sso: the replay store {table} cannot record a claim: {reason}", {
        table: this.table,
        reason: reason(e),
      });
      throw storeFull();
    }
  }

  /** Deletes rows expired (for a few minutes); returns how many. */
  async purge(): Promise<number> {
    const [r] = await this.#sql.execute([{
      sql: `delete from ${this.#table} where expires_at < now() - interval '${PURGE_GRACE}'`,
    }]);
    return r.rowCount;
  }

  /** Checks the table now, then purges expired rows every `everyMs` in the background. */
  start(everyMs = PURGE_EVERY_MS): void {
    const run = async () => {
      this.#timer = undefined;
      try {
        const n = await this.purge();
        if (n > 0) log.debug("sso: purged {count} expired replay-store rows", { count: n });
      } catch (e) {
        if (this.#closed) return;
        log.error(
          "sso: the replay store {table} is not usable (create it with --print-setup-sql): {reason}",
          { table: this.table, reason: reason(e) },
        );
      }
      if (this.#closed) return;
      this.#timer = setTimeout(run, everyMs);
      Deno.unrefTimer(this.#timer);
    };
    void run();
  }

  /** Stops purging and closes the connection. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#sql.close(5000);
  }
}

/** Whether the configuration has any SSO entry (`openid.<name>` or `saml.<name>`). */
export function ssoConfigured(cfg: Config): boolean {
  return Object.keys(cfg.openid).length > 0 || samlEntries(cfg).length > 0;
}

/**
 * The process's replay store at startup: a started {@link PgOnce} when `sso.store` is set, else
 * null (the in-memory store stays; with SSO entries, a warning says replay protection is per
 * process).
 */
export function openReplayStore(cfg: Config): PgOnce | null {
  if (cfg.sso.store === undefined) {
    if (ssoConfigured(cfg)) {
      log.warn(
        "sso: replay protection is per process (sso.store is not set): a restart or another replica does not know the assertions and login states already used",
      );
    }
    return null;
  }
  const store = new PgOnce(connectionString(cfg), cfg.sso.store, cfg.pg.connect_timeout);
  store.start();
  return store;
}
