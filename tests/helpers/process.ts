/**
 * Spawns the real server process (`deno run -A main.ts …`) for end-to-end tests.
 */
import { freePort } from "../../src/db/cluster.ts";
import { TEST_SECRET } from "./server.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** A server process. */
export interface SvcProcess {
  url: string;
  child: Deno.ChildProcess;
  /** Output collected so far (stdout + stderr). */
  output(): string;
  /** Sends a signal. */
  kill(sig: Deno.Signal): void;
  /** Waits for /svc/health to answer 200 (or `status`). */
  waitHealthy(timeoutMs?: number, status?: number): Promise<void>;
  stop(): Promise<Deno.CommandStatus>;
}

/** Starts `main.ts` with flags; port and secret are chosen here. */
export async function spawnSvc(
  flags: string[],
  env: Record<string, string> = {},
): Promise<SvcProcess> {
  const port = freePort();
  const secrets = await Deno.makeTempDir({ prefix: "svc-secrets-" });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      MAIN,
      "--http.host=127.0.0.1",
      `--http.port=${port}`,
      `--jwt.secret=${TEST_SECRET}`,
      `--secrets.dir=${secrets}`,
      "--logging.handler=json",
      ...flags,
    ],
    env,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  const dec = new TextDecoder();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const c of s) out += dec.decode(c);
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    child,
    output: () => out,
    kill: (sig) => child.kill(sig),
    async waitHealthy(timeoutMs = 20000, status = 200) {
      const end = Date.now() + timeoutMs;
      while (Date.now() < end) {
        try {
          const r = await fetch(`${url}/svc/health`);
          await r.body?.cancel();
          if (r.status === status) return;
        } catch { /* not listening yet */ }
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`svc not healthy (${status}) after ${timeoutMs} ms:\n${out}`);
    },
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* exited */ }
      const st = await child.status;
      await pumps;
      await Deno.remove(secrets, { recursive: true }).catch(() => {});
      return st;
    },
  };
}

/** Runs main.ts to completion (for configuration errors) and returns code and output. */
export async function runSvc(flags: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, ...flags],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}
