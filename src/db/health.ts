/**
 * Readiness probe: asks the database through a connection of its own (never the request pool, so
 * an exhausted pool cannot make an orchestrator kill a healthy process), bounded to 1 s.
 */
import { Client } from "../pg/client.ts";

/** How long a readiness check may take. */
export const READY_TIMEOUT_MS = 1000;

/** A dedicated one-connection client for health checks. */
export class HealthProbe {
  readonly #client: Client;
  #pending: Promise<boolean> | null = null;

  /** Opens (lazily) the probe's own connection. */
  constructor(uri: string) {
    this.#client = new Client(uri, {
      applicationName: "svc-health",
      connectTimeoutMs: READY_TIMEOUT_MS,
      maxStatements: 0,
    });
  }

  /** Whether the database answers `select 1` within 1 s; concurrent checks share one query. */
  ready(): Promise<boolean> {
    this.#pending ??= this.#check().finally(() => (this.#pending = null));
    return this.#pending;
  }

  async #check(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const q = this.#client.query("select 1");
    const timeout = new Promise<false>((
      r,
    ) => (timer = setTimeout(() => r(false), READY_TIMEOUT_MS)));
    try {
      const ok = await Promise.race([q.then(() => true as const), timeout]);
      // A connection that did not answer in time is not trusted with the next check.
      if (!ok) this.#client.reset();
      return ok;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      q.catch(() => {}); // a late failure of an abandoned check is not an error
    }
  }

  /** Closes the probe's connection. */
  close(): Promise<void> {
    return this.#client.close(1000);
  }
}
