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

/**
 * Starts `main.ts` with flags; port and secret are chosen here. `denoArgs` go before the script
 * (e.g. `--inspect=…`).
 */
export async function spawnSvc(
  flags: string[],
  env: Record<string, string> = {},
  denoArgs: string[] = [],
): Promise<SvcProcess> {
  const port = freePort();
  const secrets = await Deno.makeTempDir({ prefix: "svc-secrets-" });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      ...denoArgs,
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

/** GET on a fresh connection (the kernel spreads new connections over svc's workers). */
export async function freshGet(url: string): Promise<{ status: number; body: string }> {
  const client = Deno.createHttpClient({});
  try {
    const r = await fetch(url, { client });
    return { status: r.status, body: await r.text() };
  } finally {
    client.close();
  }
}

/** The value of the first `/svc/metrics` line matching `line` (0 when there is none). */
export async function metricValue(url: string, line: RegExp): Promise<number> {
  const text = (await freshGet(`${url}/svc/metrics`)).body;
  const m = text.split("\n").find((l) => line.test(l));
  return m ? Number(m.split(" ").pop()) : 0;
}

/** Worker numbers found in the JSON access-log lines of `path`. */
export function workersInLog(svc: SvcProcess, path: string): Set<number> {
  const seen = new Set<number>();
  for (const line of svc.output().split("\n")) {
    if (!line.startsWith("{")) continue;
    const rec = JSON.parse(line) as { properties?: { path?: string; worker?: number } };
    if (rec.properties?.path === path && typeof rec.properties.worker === "number") {
      seen.add(rec.properties.worker);
    }
  }
  return seen;
}
