/**
 * `deno task dev` under a wrapper that does not pass its signal on — as `npx deno task dev` runs
 * it (npm forwards SIGTERM to a `sh -c … task dev` that dies and orphans `deno task`): when the
 * wrapper goes, dev stops its server. Before the ancestor watch in scripts/dev.ts, the server kept
 * answering after its wrapper was gone.
 */
import { chinookDb, stopDb } from "../helpers/db.ts";
import { TEST_SECRET } from "../helpers/server.ts";
import { freePort } from "../../src/db/cluster.ts";
import { waitFor } from "../helpers/wait.ts";

const repo = new URL("../../", import.meta.url).pathname;

async function answers(port: number): Promise<boolean> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/svc/health/live`);
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
}

Deno.test({
  name: "deno task dev stops its server when the wrapper that started it is killed",
  // Owns child processes.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const uri = await chinookDb();
    const port = freePort();
    const secrets = await Deno.makeTempDir({ prefix: "svc-dev-wrap-" });
    // `; true` keeps sh from exec'ing deno: sh stays the wrapper, as under npx.
    const script = `'${Deno.execPath()}' task dev --pg.uri=${uri} --http.host=127.0.0.1 ` +
      `--http.port=${port} --jwt.secret=${TEST_SECRET} --secrets.dir=${secrets} ` +
      `--logging.level=error; true`;
    const wrapper = new Deno.Command("sh", {
      args: ["-c", script],
      cwd: repo,
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      await waitFor(() => answers(port), { timeout: 60_000, interval: 100, what: "dev serves" });
      wrapper.kill("SIGTERM"); // sh dies at once; deno task and dev.ts are orphaned
      await wrapper.status;
      await waitFor(async () => !(await answers(port)), {
        interval: 100,
        what: "the server stopped after its wrapper went away",
      });
    } finally {
      try {
        wrapper.kill("SIGKILL");
      } catch { /* gone */ }
      // Anything left (on failure): stop it by the port it holds.
      await new Deno.Command("pkill", { args: ["-f", `--http.port=${port}`] }).output();
      await Deno.remove(secrets, { recursive: true }).catch(() => {});
      await stopDb();
    }
  },
});
