/**
 * `deno task dev`: svc in dev mode, restarted on change. With no database configured (no pg.*
 * flag, SVC_PG__* variable or config file), it starts a private PostgreSQL cluster kept in
 * `.svc/dev/` (or `$SVC_DEV_DIR`) across runs (`--fresh` recreates it), loading the Chinook demo with its roles
 * (`~anonymous` reads, `app_user` writes) when it is new, and stops it on exit. The server runs
 * as a child `deno run --watch` process, so restarts on change keep the database. A busy port
 * stops here with exit 1 (under --watch the child would wait for changes instead).
 */
import { loadChinook, startCluster } from "../src/db/cluster.ts";
import { DEFAULT_V8_FLAGS_ARG } from "../src/process/v8_flags.ts";

const fresh = Deno.args.includes("--fresh");
const withOidc = Deno.args.includes("--with-oidc");
const args = Deno.args.filter((a) => a !== "--fresh" && a !== "--with-oidc");
const env = Deno.env.toObject();
const configured = args.some((a) => a.startsWith("--pg.") || a.startsWith("--config")) ||
  Object.keys(env).some((k) => k.startsWith("SVC_PG__") || k === "SVC_CONFIG");
const root = new URL("..", import.meta.url).pathname;
const flags = [
  "--dev",
  `--pg.query.wellknown_path=${root}wellknown`,
  `--http.templates.path=${root}templates`,
  `--http.static.path=${root}demo/static`,
  `--secrets.dir=${root}.tmp/secrets`,
  `--saml.certificate_path=${root}.tmp/secrets/saml.crt`,
  `--saml.private_key_path=${root}.tmp/secrets/saml.key`,
  `--typescript.helper_path=${root}demo/database.ts`,
];
const port = devPort(args);
if (port !== null && !portFree(port)) {
  console.error(`svc dev: port ${port} is in use (set --http.port)`);
  Deno.exit(1);
}
let stopCluster = () => {};
if (!configured) {
  // SVC_DEV_DIR: another place for the private cluster (the README examples test uses a fresh one).
  const dir = Deno.env.get("SVC_DEV_DIR") ?? `${root}.svc/dev`;
  if (fresh) await Deno.remove(dir, { recursive: true }).catch(() => {});
  console.log(`svc dev: starting the private PostgreSQL in ${dir} …`);
  const cluster = await startCluster({ dir });
  stopCluster = () => cluster.stopSync();
  globalThis.addEventListener("unload", () => stopCluster());
  const uri = cluster.created ? await loadChinook(cluster, "chinook") : cluster.uriFor("chinook");
  if (cluster.created) {
    // The demo application (accounts, /login, /logout, /me): README "Routes".
    await cluster.psql(await Deno.readTextFile(`${root}demo/app.sql`), "chinook");
    console.log("svc dev: loaded the Chinook demo (--fresh recreates it)");
  }
  flags.push(`--pg.uri=${uri}`);
  console.log(`svc dev: database ready at ${uri}`);
  if (withOidc) await cluster.psql((await import("./dev_oidc.ts")).DEV_SSO_SQL, "chinook");
}
if (withOidc) {
  // Optional local OpenID provider (scripts/dev_oidc.ts) and the `openid.dev` SSO entry.
  flags.push(...await (await import("./dev_oidc.ts")).startDevOidc(port ?? 8080));
}
const child = new Deno.Command(Deno.execPath(), {
  args: [
    "run",
    "-A",
    DEFAULT_V8_FLAGS_ARG,
    `--watch=${root}src/,${root}wellknown/,${root}templates/`,
    `${root}main.ts`,
    ...flags,
    ...args,
  ],
  stdin: "inherit",
  stdout: "inherit",
  stderr: "inherit",
}).spawn();
/** Stops the server (and, once it has exited, the database below). */
function stopServer(): void {
  // Under --watch the server's own exit only ends one run: stop the watcher too.
  const kill = (s: Deno.Signal) => {
    try {
      child.kill(s);
    } catch { /* exited */ }
  };
  kill("SIGTERM");
  setTimeout(() => kill("SIGKILL"), 2000);
}
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) Deno.addSignalListener(sig, stopServer);
// A wrapper that is signalled may not pass the signal on: `npx deno task dev` forwards SIGTERM to
// a `sh` that dies and leaves `deno task` and this script orphaned. Whenever one of the wrappers
// goes away, stop.
const ancestors = ancestorPids();
if (ancestors.length) {
  const watch = setInterval(() => {
    if (ancestors.some((p) => !alive(p))) {
      clearInterval(watch);
      console.error("svc dev: the process that started me has gone; stopping");
      stopServer();
    }
  }, 250);
  Deno.unrefTimer(watch);
}
const status = await child.status;
stopCluster();
Deno.exit(status.code);

/**
 * The wrappers this script runs under, nearest first, from /proc (Linux): consecutive ancestors
 * whose command line is this task's invocation (`deno task dev`, npm's `sh -c … task dev`) or npm's
 * `npm exec` / `npx`. The user's own shell and what started it are not wrappers: a dev server left
 * running after its shell exits (nohup, a script) keeps running.
 */
function ancestorPids(): number[] {
  const out: number[] = [];
  let pid = Deno.pid;
  for (let i = 0; i < 16; i++) {
    const ppid = parentOf(pid);
    if (ppid === null || ppid <= 1) break;
    let cmd = "";
    try {
      cmd = Deno.readTextFileSync(`/proc/${ppid}/cmdline`).replaceAll("\0", " ");
    } catch { /* gone */ }
    const wrapper = /\btask\s+dev\b/.test(cmd) || /^npm exec\b|\bnpx(-cli\.js)?\b/.test(cmd);
    if (!wrapper) break;
    out.push(ppid);
    pid = ppid;
  }
  return out;
}

/** The parent pid of `pid` (field 4 of /proc/<pid>/stat), or null off Linux or when gone. */
function parentOf(pid: number): number | null {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ')'.
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return null;
  }
}

/** Whether `pid` still runs (a zombie has exited). */
function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** The port dev will listen on (--http.port, SVC_HTTP__PORT or 8080); null for 0 (any). */
function devPort(argv: string[]): number | null {
  let v: string | undefined = Deno.env.get("SVC_HTTP__PORT");
  argv.forEach((a, i) => {
    if (a.startsWith("--http.port=")) v = a.slice("--http.port=".length);
    else if (a === "--http.port") v = argv[i + 1];
  });
  const n = Number(v ?? 8080);
  return Number.isInteger(n) && n > 0 ? n : null;
}

/** Whether a TCP port can be bound on loopback right now. */
function portFree(p: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port: p }).close();
    return true;
  } catch {
    return false;
  }
}
