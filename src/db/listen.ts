/**
 * Reload everywhere: every svc process `LISTEN`s on `pg.notify_channel` (default `svc`) on a
 * connection of its own — never one of the request pool — and `NOTIFY svc, 'reload'` reloads it
 * exactly as SIGUSR1 does (with workers the main thread listens once and reloads every worker).
 *
 * - The connection goes to `pg.listen_uri` when set (behind a pooler in transaction mode the
 *   listen connection must reach PostgreSQL directly: a pooler hands the server connection to
 *   another client after each statement, and its notifications are lost), else `pg.uri`.
 * - A lost connection (the server restarted, the backend was terminated, a network that stopped
 *   answering the liveness ping) is opened again and `LISTEN` sent again, after a backoff of
 *   100 ms doubling up to 5 s while attempts fail. Notifications sent meanwhile are lost, so once
 *   `LISTEN` is back after a loss svc reloads once.
 * - A burst of notifications (a migration, an event trigger firing per DDL command) becomes few
 *   reloads: the first one starts a reload {@link RELOAD_DELAY_MS} later, those arriving before
 *   it starts join it, and those arriving while it runs start one more after it (the running
 *   reload may have read the catalog before their change committed).
 * - Payloads: `reload` (any case, surrounding blanks ignored) or empty reload; any other payload is
 *   ignored and logged (warn, at most once a minute), so the channel can be shared.
 *
 * @module
 */
import { Connection } from "../pg/connection.ts";
import { log } from "../observe/log.ts";
import { identifierBytes, MAX_IDENTIFIER_BYTES } from "./schema.ts";

/**
 * Why `name` cannot be a notification channel (null when it can): 1 to 63 bytes of UTF-8, no NUL,
 * no surrounding blanks. It is always sent quoted, so any other character is fine and case is kept.
 */
export function channelProblem(name: string): string | null {
  const bytes = identifierBytes(name);
  if (bytes === 0) return "an empty channel name";
  if (bytes > MAX_IDENTIFIER_BYTES) {
    return `a channel name of ${bytes} bytes (PostgreSQL keeps at most ${MAX_IDENTIFIER_BYTES})`;
  }
  if (name.includes("\0")) return "a NUL character in the channel name";
  if (name !== name.trim()) return "blanks around the channel name";
  return null;
}

/** `name` as a quoted SQL identifier (throws when {@link channelProblem} finds a problem). */
export function quoteChannel(name: string): string {
  const problem = channelProblem(name);
  if (problem) throw new Error(problem);
  return `"${name.replaceAll('"', '""')}"`;
}

/** Options of a {@link Listener}. */
export interface ListenerOptions {
  /** Connection string of the listen connection. */
  uri: string;
  /** The channel (unquoted; quoted by the listener). */
  channel: string;
  /** Every notification's payload, in order. */
  onNotification(payload: string): void;
  /**
   * Called once `LISTEN` is in place again after the connection was lost (never after the first
   * `LISTEN`): notifications sent meanwhile were lost.
   */
  onReconnect?(): void;
  /** Milliseconds between liveness pings of an idle connection (default 10 s). */
  pingMs?: number;
  /** Milliseconds a connect or a ping may take (default 5 s). */
  timeoutMs?: number;
}

/** Delay before the next attempt after `failures` failed ones: 100 ms doubling, at most 5 s. */
export function listenBackoffMs(failures: number): number {
  return failures === 0 ? 0 : Math.min(100 * 2 ** (failures - 1), 5000);
}

/**
 * One connection that `LISTEN`s on a channel and keeps doing so: reconnects and listens again
 * whenever the connection is lost, until {@link close}.
 */
export class Listener {
  readonly #opts: ListenerOptions;
  readonly #sql: string;
  readonly #stop = new AbortController();
  #conn: Connection | null = null;
  #running: Promise<void> | null = null;
  #listens = 0;
  #waiters: (() => void)[] = [];

  /** A listener of `opts.channel` (throws on an unusable channel name); {@link start} runs it. */
  constructor(opts: ListenerOptions) {
    this.#opts = opts;
    this.#sql = `LISTEN ${quoteChannel(opts.channel)}`;
  }

  /** Starts connecting and listening (in the background); a second call does nothing. */
  start(): this {
    this.#running ??= this.#run();
    return this;
  }

  /** Whether `LISTEN` is in place now. */
  get listening(): boolean {
    return this.#conn !== null && this.#conn.error === null;
  }

  /** Backend process id of the listen connection (null while there is none). */
  get backendPid(): number | null {
    return this.listening ? this.#conn!.processId : null;
  }

  /** How many times `LISTEN` was put in place (1 + reconnections). */
  get listens(): number {
    return this.#listens;
  }

  /** Resolves once `LISTEN` is in place for the `n`-th time (default: the first). */
  listened(n = 1): Promise<void> {
    if (this.#listens >= n) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (this.#listens >= n) resolve();
        else this.#waiters.push(check);
      };
      this.#waiters.push(check);
    });
  }

  /** Stops listening and closes the connection. */
  async close(): Promise<void> {
    this.#stop.abort(new Error("the listener is closed"));
    const conn = this.#conn;
    this.#conn = null;
    await conn?.close(500).catch(() => {});
    await this.#running;
  }

  async #run(): Promise<void> {
    const { uri, channel } = this.#opts;
    const timeoutMs = this.#opts.timeoutMs ?? 5000;
    const signal = this.#stop.signal;
    let failures = 0;
    let lastError = "";
    while (!signal.aborted) {
      const wait = listenBackoffMs(failures);
      if (wait > 0 && !(await pause(wait, signal))) break;
      let conn: Connection | null = null;
      try {
        conn = await Connection.connect(uri, {
          applicationName: "svc-listen",
          connectTimeoutMs: timeoutMs,
          maxStatements: 0,
          signal,
          onNotification: (n) => {
            if (n.channel === channel && !signal.aborted) this.#opts.onNotification(n.payload);
          },
        });
        await withTimeout(conn.simple(this.#sql), timeoutMs, conn);
      } catch (e) {
        conn?.destroy();
        if (signal.aborted) break;
        failures++;
        const message = (e as Error).message;
        // One line per distinct failure, not one per attempt of an outage.
        if (message !== lastError) {
          log.warn("cannot listen on channel {channel}: {error}; retrying", {
            channel,
            error: message,
          });
          lastError = message;
        }
        continue;
      }
      if (signal.aborted) {
        await conn.close(100).catch(() => {});
        break;
      }
      failures = 0;
      lastError = "";
      this.#conn = conn;
      const again = this.#listens > 0;
      this.#listens++;
      for (const w of this.#waiters.splice(0)) w();
      if (again) {
        log.info("listening on channel {channel} again", { channel });
        this.#opts.onReconnect?.();
      } else {
        log.debug("listening on channel {channel}", { channel });
      }
      const why = await this.#watch(conn, timeoutMs);
      if (this.#conn === conn) this.#conn = null;
      if (signal.aborted) break;
      log.warn("the listen connection was lost ({error}); listening again", {
        channel,
        error: why.message,
      });
    }
  }

  /** Resolves with the reason once `conn` is dead; pings it while it is idle. */
  async #watch(conn: Connection, timeoutMs: number): Promise<Error> {
    const pingMs = this.#opts.pingMs ?? 10_000;
    const closed = conn.closed();
    for (;;) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const tick = new Promise<"ping">((r) => (timer = setTimeout(() => r("ping"), pingMs)));
      const outcome = await Promise.race([closed, tick]);
      clearTimeout(timer);
      if (outcome !== "ping") return outcome;
      try {
        await withTimeout(conn.simple("select 1"), timeoutMs, conn);
      } catch (e) {
        conn.destroy(e instanceof Error ? e : new Error(String(e)));
        return await closed;
      }
    }
  }
}

/** `p`, or a rejection (and `conn` destroyed) once `ms` passed. */
async function withTimeout<T>(p: Promise<T>, ms: number, conn: Connection): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const e = new Error(`no answer within ${ms} ms`);
      conn.destroy(e);
      reject(e);
    }, ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Waits `ms`; false when `signal` aborted first. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** Milliseconds between the first notification of a burst and the reload it starts. */
export const RELOAD_DELAY_MS = 100;

/**
 * Turns a burst of triggers into few runs of `run`: a trigger starts a run `delayMs` later; the
 * triggers arriving before it starts join it; those arriving while it runs start one more run
 * after it.
 */
export class Coalescer {
  readonly #run: () => Promise<unknown>;
  readonly #delayMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running: Promise<unknown> | null = null;
  #again = false;
  #closed = false;
  /** Runs started so far. */
  runs = 0;

  /** Coalesces triggers of `run` (whose failures are its own to report). */
  constructor(run: () => Promise<unknown>, delayMs = RELOAD_DELAY_MS) {
    this.#run = run;
    this.#delayMs = delayMs;
  }

  /** Asks for a run. */
  trigger(): void {
    if (this.#closed || this.#timer !== undefined) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.runs++;
      this.#running = this.#run().catch(() => {}).finally(() => {
        this.#running = null;
        if (this.#again) {
          this.#again = false;
          this.trigger();
        }
      });
    }, this.#delayMs);
  }

  /** Whether a run is scheduled or running. */
  get busy(): boolean {
    return this.#timer !== undefined || this.#running !== null;
  }

  /** Cancels a scheduled run and ignores later triggers; waits for a running one. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}

/** Whether a payload asks for a reload: `reload` (any case, blanks around ignored) or empty. */
export function isReloadPayload(payload: string): boolean {
  const p = payload.trim().toLowerCase();
  return p === "" || p === "reload";
}

/** The reload listener of a process, as main.ts runs it. */
export interface ReloadListener {
  /** The listen connection and its state. */
  listener: Listener;
  /** Notifications ignored so far (payloads other than a reload). */
  readonly ignored: number;
  /** Whether a reload it asked for is scheduled or running. */
  readonly pending: boolean;
  /** Stops listening; a reload it started may finish. */
  close(): Promise<void>;
}

/** What {@link listenForReload} needs of the configuration. */
export interface ListenConfig {
  /** `pg.notify_channel` ("" disables listening). */
  channel: string;
  /** `pg.listen_uri`, else `pg.uri`. */
  uri: string;
}

/**
 * Listens on the configured channel and reloads (through `reload`, the same path as SIGUSR1) on
 * a reload notification and once after a lost listen connection is back. Null when the channel is
 * "" (listening disabled).
 */
export function listenForReload(
  cfg: ListenConfig,
  reload: () => Promise<boolean>,
  opts: { delayMs?: number; pingMs?: number } = {},
): ReloadListener | null {
  if (cfg.channel === "") return null;
  const coalescer = new Coalescer(reload, opts.delayMs);
  let warnedAt = -Infinity;
  let ignored = 0;
  const listener = new Listener({
    uri: cfg.uri,
    channel: cfg.channel,
    pingMs: opts.pingMs,
    onNotification: (payload) => {
      if (isReloadPayload(payload)) return coalescer.trigger();
      ignored++;
      if (Date.now() - warnedAt < 60_000) return;
      warnedAt = Date.now();
      log.warn(
        "notification {payload} on channel {channel} ignored (only 'reload' is understood)",
        { payload: payload.slice(0, 200), channel: cfg.channel },
      );
    },
    onReconnect: () => coalescer.trigger(),
  }).start();
  return {
    listener,
    get ignored() {
      return ignored;
    },
    get pending() {
      return coalescer.busy;
    },
    async close() {
      // A reload already running finishes on its own (as one started by SIGUSR1 would).
      void coalescer.close();
      await listener.close();
    },
  };
}
