/**
 * A private, throwaway PostgreSQL cluster: used by `deno task dev` (embedded demo database),
 * by every test file and by the benchmarks. It runs the system's PostgreSQL binaries (found on
 * PATH or under /usr/lib/postgresql/<version>/bin), as the `postgres` OS user when we are root
 * (PostgreSQL refuses to run as root), in a private temporary directory on a free loopback port.
 */

/** A running private cluster. */
export interface Cluster {
  /** Connection string of the superuser `postgres` on database `postgres`. */
  uri: string;
  port: number;
  /** Directory holding data, socket and log. */
  dir: string;
  /** Connection string for another database of this cluster. */
  uriFor(database: string): string;
  /** Runs SQL through psql (as superuser) against a database; throws with psql's stderr. */
  psql(sql: string, database?: string): Promise<string>;
  /** Stops the server and removes the directory. */
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
      Deno.statSync(`${realDir}/psql`);
      return realDir;
    } catch { /* next */ }
  }
  return null;
}

function isRoot(): boolean {
  return Deno.uid?.() === 0;
}

async function run(cmd: string[], opts: { asPostgres: boolean; stdin?: string }): Promise<string> {
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

/** Returns a free TCP port on 127.0.0.1. */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/** Starts a new private cluster. Throws when no PostgreSQL binaries are installed. */
export async function startCluster(opts: { port?: number; log?: boolean } = {}): Promise<Cluster> {
  const bin = findPgBin();
  if (!bin) {
    throw new Error(
      "PostgreSQL server binaries not found (looked on PATH and in /usr/lib/postgresql/*/bin); " +
        "install them (Debian: apt-get install postgresql) or set pg.uri",
    );
  }
  const dir = await Deno.makeTempDir({ prefix: "svc-pg-" });
  const port = opts.port ?? freePort();
  if (isRoot()) {
    await Deno.chmod(dir, 0o755);
    await run(["chown", "postgres:postgres", dir], { asPostgres: false });
  }
  const data = `${dir}/data`;
  await run([
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
  await run(["sh", "-c", `cat >> '${data}/postgresql.conf'`], { asPostgres: true, stdin: conf });
  await run([`${bin}/pg_ctl`, "-D", data, "-l", `${dir}/log`, "-w", "start"], {
    asPostgres: true,
  });
  const psqlBin = `${bin}/psql`;
  const uriFor = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  let stopped = false;
  return {
    uri: uriFor("postgres"),
    port,
    dir,
    uriFor,
    psql: (sql, database = "postgres") =>
      run([
        psqlBin,
        "-X",
        "-q",
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
      ], {
        asPostgres: false,
        stdin: sql,
      }),
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        await run([`${bin}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "stop"], {
          asPostgres: true,
        });
      } catch { /* already down */ }
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
    stopSync() {
      if (stopped) return;
      stopped = true;
      const argv = [`${bin}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "stop"];
      const full = isRoot() ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
      new Deno.Command(full[0], { args: full.slice(1), stdout: "null", stderr: "null" })
        .outputSync();
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch { /* gone */ }
    },
  };
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
