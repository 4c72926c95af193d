/**
 * A real streaming replica of a test cluster: `pg_basebackup -R -X stream` from the primary over
 * loopback into a private directory, started as a hot standby on a free port by the same OS user
 * as the test clusters (`postgres` when the tests run as root). Stopped with the test process.
 */
import {
  type Cluster,
  findPgBin,
  freePort,
  psqlCommand,
  runCommand,
} from "../../src/db/cluster.ts";
import { waitFor } from "./wait.ts";

/** A running (or stopped) streaming replica. */
export interface Replica {
  port: number;
  dir: string;
  /** Connection string of the superuser for `database`. */
  uriFor(database: string): string;
  /** Runs SQL as superuser on the replica (psql's output). */
  psql(sql: string, database?: string): Promise<string>;
  /** `pg_ctl -D <data> <args…>` as the cluster's owner (stop, start). */
  ctl(args: string[]): Promise<string>;
  /** Stops the server (fast) and removes the directory. */
  remove(): Promise<void>;
}

/** Seconds since the last commit the replica replayed (it grows while the primary is idle). */
export async function replayAge(replica: Replica, database: string): Promise<number> {
  return Number(
    await replica.psql(
      "select extract(epoch from now() - pg_last_xact_replay_timestamp())",
      database,
    ),
  );
}

function isRoot(): boolean {
  return Deno.uid?.() === 0;
}

const run = (cmd: string[], asPostgres: boolean, stdin?: string) =>
  runCommand(cmd, { asPostgres, stdin });

/**
 * Starts a streaming replica of `primary` (a cluster of tests/helpers/db.ts or
 * src/db/cluster.ts; initdb's pg_hba.conf trusts replication connections from 127.0.0.1) and
 * waits until it streams.
 */
export async function startReplica(primary: Cluster): Promise<Replica> {
  const bin = findPgBin();
  if (!bin) throw new Error("PostgreSQL server binaries not found");
  const dir = await Deno.makeTempDir({ prefix: "svc-replica-" });
  if (isRoot()) {
    await Deno.chmod(dir, 0o755);
    await run(["chown", "postgres:postgres", dir], false);
  }
  const data = `${dir}/data`;
  const port = freePort();
  await run([
    `${bin}/pg_basebackup`,
    "-h",
    "127.0.0.1",
    "-p",
    String(primary.port),
    "-U",
    "postgres",
    "-D",
    data,
    "-R",
    "-X",
    "stream",
    "--no-sync",
    "--checkpoint=fast",
  ], true);
  // The copied postgresql.conf names the primary's port and socket directory: later lines win.
  const conf = [
    `port = ${port}`,
    `unix_socket_directories = '${dir}'`,
    "hot_standby = on",
    "wal_retrieve_retry_interval = '200ms'",
  ].join("\n");
  await run(["sh", "-c", `cat >> '${data}/postgresql.conf'`], true, `\n${conf}\n`);
  const ctl = (args: string[]) =>
    run([`${bin}/pg_ctl`, "-D", data, "-l", `${dir}/log`, ...args], true);
  await ctl(["-w", "start"]);
  const uriFor = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  const psql = (sql: string, database = "postgres") =>
    run(psqlCommand(bin, port, database, ["-A", "-t"]), false, sql);
  let removed = false;
  const replica: Replica = {
    port,
    dir,
    uriFor,
    psql,
    ctl,
    async remove() {
      if (removed) return;
      removed = true;
      await ctl(["-m", "immediate", "-w", "stop"]).catch(() => {});
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
  globalThis.addEventListener("unload", () => {
    if (removed) return;
    const argv = [`${bin}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "stop"];
    const full = isRoot() ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
    new Deno.Command(full[0], { args: full.slice(1), stdout: "null", stderr: "null" })
      .outputSync();
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch { /* gone */ }
  });
  await waitFor(
    async () =>
      (await psql("select count(*) from pg_stat_wal_receiver where status = 'streaming'"))
        .trim() === "1",
    { what: "the replica streaming" },
  );
  return replica;
}
