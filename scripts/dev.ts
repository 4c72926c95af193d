/**
 * `deno task dev`: svc in dev mode. With no database configured (no pg.* flag, SVC_PG__* variable
 * or config file), it starts a private PostgreSQL cluster, loads the Chinook demo with its roles
 * (`~anonymous` reads, `app_user` writes) and removes the cluster on exit.
 */
import { loadConfigAsync } from "../src/config/load.ts";
import { loadChinook, startCluster } from "../src/db/cluster.ts";
import { start } from "../main.ts";

const args = [...Deno.args];
const env = Deno.env.toObject();
const configured = args.some((a) => a.startsWith("--pg.") || a.startsWith("--config")) ||
  Object.keys(env).some((k) => k.startsWith("SVC_PG__") || k === "SVC_CONFIG");
const root = new URL("..", import.meta.url).pathname;
const defaults = [
  "--dev",
  `--pg.query.wellknown_path=${root}wellknown`,
  `--http.templates.path=${root}templates`,
  `--secrets.dir=${root}.tmp/secrets`,
  `--saml.certificate_path=${root}.tmp/secrets/saml.crt`,
  `--saml.private_key_path=${root}.tmp/secrets/saml.key`,
];
let stopCluster: (() => void) | null = null;
if (!configured) {
  console.log("svc dev: starting a private PostgreSQL with the Chinook demo …");
  const cluster = await startCluster();
  stopCluster = () => cluster.stopSync();
  globalThis.addEventListener("unload", () => stopCluster?.());
  const uri = await loadChinook(cluster, "chinook");
  defaults.push(`--pg.uri=${uri}`);
  console.log(`svc dev: database ready at ${uri}`);
}
const cfg = await loadConfigAsync({ args: [...defaults, ...args], env });
const server = await start(cfg);
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(sig, async () => {
    await server.shutdown();
    stopCluster?.();
    Deno.exit(0);
  });
}
Deno.addSignalListener("SIGUSR1", () => void server.runtime.reload("signal"));
await server.ready;
console.log(`svc dev: serving http://localhost:${server.port}/svc (try /svc/database.json)`);
