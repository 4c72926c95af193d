/**
 * A private PgBouncer (Debian's /usr/sbin/pgbouncer) in front of a test cluster, in session or
 * transaction pooling mode, on a free loopback port. As root it runs as the `postgres` OS user
 * (PgBouncer refuses root).
 */
import { freePort } from "../../src/db/cluster.ts";
import { exists, type Requirement, testWith } from "./requires.ts";

/** A running PgBouncer. */
export interface Bouncer {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/<database>` through the bouncer. */
  uriFor(database: string): string;
  /** Stops it and removes its directory. */
  stop(): Promise<void>;
}

/**
 * PgBouncer (Debian's /usr/sbin/pgbouncer); `SVC_REQUIRE_PGBOUNCER=1` (CI) makes its absence a
 * failure, elsewhere its tests are ignored with a notice.
 */
export const PGBOUNCER: Requirement = {
  what: "PgBouncer",
  path: exists("/usr/sbin/pgbouncer") ? "/usr/sbin/pgbouncer" : null,
  missing: exists("/usr/sbin/pgbouncer") ? null : "no /usr/sbin/pgbouncer",
  requireEnv: "SVC_REQUIRE_PGBOUNCER",
  install: "apt-get install -y pgbouncer",
};

/** Registers a test that needs PgBouncer (see {@link PGBOUNCER}). */
export function bouncerTest(def: Deno.TestDefinition): void {
  testWith(PGBOUNCER, def);
}

/** The PgBouncer binary, or null when not installed. */
export function pgbouncerBin(): string | null {
  try {
    Deno.statSync("/usr/sbin/pgbouncer");
    return "/usr/sbin/pgbouncer";
  } catch {
    return null;
  }
}

/** Starts PgBouncer in `mode` in front of the PostgreSQL on 127.0.0.1:`pgPort`. */
export async function startBouncer(
  pgPort: number,
  mode: "session" | "transaction",
  poolSize = 2,
): Promise<Bouncer> {
  const bin = pgbouncerBin();
  if (!bin) throw new Error("pgbouncer is not installed (apt-get install pgbouncer)");
  const root = Deno.uid?.() === 0;
  const dir = await Deno.makeTempDir({ prefix: "svc-pgb-" });
  await Deno.chmod(dir, 0o755);
  const port = freePort();
  await Deno.writeTextFile(`${dir}/userlist.txt`, `"postgres" ""\n`);
  await Deno.writeTextFile(
    `${dir}/pgbouncer.ini`,
    [
      "[databases]",
      `* = host=127.0.0.1 port=${pgPort}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${dir}/userlist.txt`,
      `pool_mode = ${mode}`,
      `default_pool_size = ${poolSize}`,
      "max_client_conn = 200",
      `logfile = ${dir}/pgbouncer.log`,
      `pidfile = ${dir}/pgbouncer.pid`,
      "ignore_startup_parameters = extra_float_digits",
      "server_reset_query = DISCARD ALL",
      "",
    ].join("\n"),
  );
  if (root) {
    await new Deno.Command("chown", { args: ["-R", "postgres:postgres", dir] }).output();
  }
  const argv = root
    ? ["runuser", "-u", "postgres", "--", bin, `${dir}/pgbouncer.ini`]
    : [bin, `${dir}/pgbouncer.ini`];
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdout: "null",
    stderr: "piped",
  }).spawn();
  // Ready once it accepts connections.
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const c = await Deno.connect({ hostname: "127.0.0.1", port });
      c.close();
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        const log = await Deno.readTextFile(`${dir}/pgbouncer.log`).catch(() => "");
        throw new Error(`pgbouncer did not start:\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  let stopped = false;
  return {
    port,
    uriFor: (db) => `postgres://postgres@127.0.0.1:${port}/${db}`,
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      await child.status;
      await child.stderr.cancel().catch(() => {});
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}
