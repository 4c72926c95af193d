/**
 * Every shell example of the README runs, exactly as written, against `deno task dev` (the quick
 * start's own command, on its default port 8080, with a fresh private cluster in a temporary
 * `SVC_DEV_DIR`). The top-level ```sh blocks run in order in one bash session in the repository
 * (the indented ones of "Your own database" are for the reader's own database, not run; a cookie
 * jar written by one block is read by the next). Commands are not rewritten: each curl's HTTP
 * status is taken through a `.curlrc` (`CURL_HOME`) that adds a `--write-out` to stderr.
 *
 * A curl is expected to answer 2xx unless its example says otherwise: a comment naming a status
 * (`# 401 …`) on its last line or on the comment lines right after it. Two commands are not run:
 * `deno task dev` (this test started it) and `deno task test` (this test is part of it).
 * Before this test, the README's worked login example posted to /svc without a content-type and
 * answered 415 while the text promised invoices.
 */
import assert from "node:assert/strict";
import { waitFor } from "../helpers/wait.ts";

const repo = new URL("../../", import.meta.url).pathname;
const PORT = 8080;
const STATUS = "SVC-README-STATUS";

/** A command of an example: its text (continuation lines included) and the status it expects. */
interface Example {
  block: number;
  text: string;
  curl: boolean;
  expect: number | null;
}

/** The ```sh blocks of `markdown`, split into commands with their expected statuses. */
export function shExamples(markdown: string): Example[] {
  const out: Example[] = [];
  const blocks = [...markdown.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  blocks.forEach((body, block) => {
    let current: Example | null = null;
    for (const line of body.split("\n")) {
      if (line.trim() === "") continue;
      const status = line.match(/#\s*(\d{3})\b/);
      if (line.startsWith("#")) {
        // A comment line after a command describes its answer.
        if (current && current.expect === null && status) current.expect = Number(status[1]);
        continue;
      }
      if (/^\s/.test(line) && current) {
        current.text += "\n" + line;
      } else {
        current = { block, text: line, curl: /^curl\s/.test(line), expect: null };
        out.push(current);
      }
      // A trailing comment on the command's line: `… # 401 {…}`.
      const trailing = line.match(/\s#\s*(\d{3})\b/);
      if (trailing) current.expect = Number(trailing[1]);
    }
  });
  return out;
}

const SKIPPED = [/^deno task dev(\s|$)/, /^deno task test(\s|$)/];

async function listening(): Promise<boolean> {
  try {
    const r = await fetch(`http://127.0.0.1:${PORT}/svc/health/ready`);
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
}

Deno.test("the README's shell examples parse into commands with expectations", () => {
  const ex = shExamples(Deno.readTextFileSync(`${repo}README.md`));
  assert.ok(ex.some((e) => e.curl), "the README has curl examples");
  assert.ok(ex.some((e) => SKIPPED[0].test(e.text)), "the quick start runs deno task dev");
});

/** Whether port 8080 can be bound now (a developer's own `deno task dev` may hold it). */
function portFree(): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port: PORT }).close();
    return true;
  } catch {
    return false;
  }
}

// The examples name port 8080: while something else holds it (e.g. the README's own `deno task
// dev`), the test is ignored with a notice; in CI (`CI=true`) that is a failure.
const busy = !portFree() && Deno.env.get("CI") !== "true";
if (busy) {
  console.warn(`notice: port ${PORT} is in use — the README examples test is ignored (stop it)`);
}

Deno.test({
  name: "every shell example in the README runs as written against deno task dev",
  ignore: busy,
  // Owns child processes (deno task dev, its PostgreSQL, bash).
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    assert.ok(
      !(await listening()),
      `port ${PORT} is taken: stop the server on it to run this test`,
    );
    const examples = shExamples(await Deno.readTextFile(`${repo}README.md`));
    const dir = await Deno.makeTempDir({ prefix: "svc-readme-" });
    // The private cluster below it runs as the postgres OS user when the suite runs as root.
    await Deno.chmod(dir, 0o755);
    await Deno.writeTextFile(
      `${dir}/.curlrc`,
      `write-out = "%{stderr}${STATUS} %{http_code}\\n"\n`,
    );
    const dev = new Deno.Command(Deno.execPath(), {
      args: ["task", "dev"],
      cwd: repo,
      env: { SVC_DEV_DIR: `${dir}/dev` },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    let log = "";
    const dec = new TextDecoder();
    const pump = async (s: ReadableStream<Uint8Array>) => {
      for await (const c of s) log += dec.decode(c);
    };
    const pumps = Promise.all([pump(dev.stdout), pump(dev.stderr)]);
    let exited = false;
    dev.status.then(() => (exited = true));
    try {
      await waitFor(() => {
        if (exited) throw new Error(`deno task dev exited:\n${log.slice(-3000)}`);
        return listening();
      }, { timeout: 120_000, interval: 200, what: "deno task dev ready" });
      const blocks = new Map<number, Example[]>();
      for (const e of examples) {
        if (SKIPPED.some((re) => re.test(e.text))) continue;
        blocks.set(e.block, [...(blocks.get(e.block) ?? []), e]);
      }
      assert.ok(blocks.size > 0);
      // One bash session for all blocks, in order; each command as written.
      const script = ["set -e", ...[...blocks.values()].flat().map((e) => e.text)].join("\n");
      const run = await new Deno.Command("bash", {
        args: ["-c", script],
        cwd: repo,
        env: { CURL_HOME: dir },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = dec.decode(run.stdout);
      const stderr = dec.decode(run.stderr);
      assert.equal(run.code, 0, `the examples failed:\n${stderr}\n${stdout}`);
      const statuses = [...stderr.matchAll(new RegExp(`${STATUS} (\\d{3})`, "g"))].map((m) =>
        Number(m[1])
      );
      const curls = [...blocks.values()].flat().filter((e) => e.curl);
      assert.equal(statuses.length, curls.length, `one status per curl:\n${stderr}`);
      const wrong = curls.flatMap((e, i) => {
        const got = statuses[i];
        const ok = e.expect === null ? got >= 200 && got < 400 : got === e.expect;
        return ok ? [] : [`${got} (expected ${e.expect ?? "2xx"}) for:\n${e.text}`];
      });
      assert.deepEqual(wrong, [], `README examples answered otherwise:\n${stdout}`);
    } finally {
      try {
        dev.kill("SIGTERM");
      } catch { /* exited */ }
      await dev.status;
      await pumps;
      await Deno.remove(`${repo}jar`).catch(() => {});
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
