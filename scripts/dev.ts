/**
 * `deno task dev`: svc in dev mode, restarted on change. With no database configured (no pg.*
 * flag, SVC_PG__* variable or config file), it first starts a private PostgreSQL cluster, loads
 * the Chinook demo with its roles (`~anonymous` reads, `app_user` writes), and removes the
 * cluster on exit. The server runs as a child `deno run --watch` process, so restarts on change
 * keep the database.
 */
import { loadChinook, startCluster } from "../src/db/cluster.ts";

const args = [...Deno.args];
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
];
let stopCluster = () => {};
if (!configured) {
  console.log("svc dev: starting a private PostgreSQL with the Chinook demo …");
  const cluster = await startCluster();
  stopCluster = () => cluster.stopSync();
  globalThis.addEventListener("unload", () => stopCluster());
  const uri = await loadChinook(cluster, "chinook");
  flags.push(`--pg.uri=${uri}`);
  console.log(`svc dev: database ready at ${uri}`);
}
const child = new Deno.Command(Deno.execPath(), {
  args: [
    "run",
    "-A",
    `--watch=${root}src/,${root}wellknown/,${root}templates/`,
    `${root}main.ts`,
    ...flags,
    ...args,
  ],
  stdin: "inherit",
  stdout: "inherit",
  stderr: "inherit",
}).spawn();
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(sig, () => {
    // Under --watch the server's own exit only ends one run: stop the watcher too.
    const kill = (s: Deno.Signal) => {
      try {
        child.kill(s);
      } catch { /* exited */ }
    };
    kill("SIGTERM");
    setTimeout(() => kill("SIGKILL"), 2000);
  });
}
const status = await child.status;
stopCluster();
Deno.exit(status.code);
