/**
 * "Drops into a scratch container", checked without a container engine: `deno task rootfs` writes
 * the Dockerfile's final stage into a directory, and the Dockerfile's own ENTRYPOINT runs inside it
 * with `chroot` as the Dockerfile's USER, against a real PostgreSQL. A container runtime mounts
 * /proc for its process; so does this test. Needs root (chroot, mount): ignored otherwise, with a
 * notice.
 */
import assert from "node:assert/strict";
import { chinookDb, psql, stopDb } from "../helpers/db.ts";
import { freePort } from "../../src/db/cluster.ts";
import { LAYOUT, writeRootfs } from "../../scripts/rootfs.ts";
import { waitFor } from "../helpers/wait.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const isRoot = Deno.uid() === 0;
if (!isRoot) console.error("rootfs test ignored: chroot needs root (run the suite as root)");

/** The Dockerfile's final stage: ENTRYPOINT (JSON form), USER and ENV. */
function finalStage(): { entrypoint: string[]; user: string; env: Record<string, string> } {
  const text = Deno.readTextFileSync(`${ROOT}Dockerfile`);
  const last = text.slice(text.lastIndexOf("\nFROM "));
  const ep = last.match(/^ENTRYPOINT (\[.*\])$/m);
  assert.ok(ep, "the final stage has an ENTRYPOINT in JSON form");
  const user = last.match(/^USER (\S+)$/m)?.[1] ?? "0:0";
  const env: Record<string, string> = {};
  for (const m of last.matchAll(/^ENV (.+)$/gm)) {
    for (const kv of m[1].split(/\s+/)) {
      const eq = kv.indexOf("=");
      env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
  }
  return { entrypoint: JSON.parse(ep[1]), user, env };
}

async function du(dir: string): Promise<{ bytes: number; paths: string[] }> {
  let bytes = 0;
  const paths: string[] = [];
  const walk = async (d: string) => {
    for await (const e of Deno.readDir(d)) {
      const p = `${d}/${e.name}`;
      paths.push(p.slice(dir.length));
      if (e.isDirectory) await walk(p);
      else bytes += (await Deno.lstat(p)).size;
    }
  };
  await walk(dir);
  return { bytes, paths };
}

async function sh(cmd: string, args: string[]): Promise<void> {
  const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
  assert.ok(out.success, `${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
}

Deno.test({
  name: "deno task rootfs + the Dockerfile's ENTRYPOINT under chroot serve a read",
  ignore: !isRoot,
  // Owns child processes (the chrooted svc) and a mount.
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const stage = finalStage();
    const dir = await Deno.makeTempDir({ prefix: "svc-rootfs-" });
    let mounted = false;
    let child: Deno.ChildProcess | undefined;
    try {
      await writeRootfs(dir);
      const { bytes, paths } = await du(dir);
      assert.ok(bytes < 200 * 1024 * 1024, `rootfs is ${(bytes / 2 ** 20).toFixed(1)} MiB`);
      assert.ok(!paths.some((p) => p.includes("node_modules")), "no node_modules in the image");
      for (const v of LAYOUT.volumes) assert.ok(paths.includes(v), `volume ${v} exists`);
      assert.equal(stage.entrypoint[0], LAYOUT.deno);
      assert.ok(stage.entrypoint.includes(LAYOUT.bundle));

      await Deno.mkdir(`${dir}/proc`);
      await sh("mount", ["-t", "proc", "proc", `${dir}/proc`]);
      mounted = true;
      const chroot = (args: string[]) =>
        new Deno.Command("chroot", {
          args: [`--userspec=${stage.user}`, dir, ...stage.entrypoint, ...args],
          clearEnv: true,
          env: stage.env,
          stdout: "piped",
          stderr: "piped",
        });

      // The image's own --print-setup-sql creates the roles it will connect as.
      const uri = await chinookDb();
      const setup = await chroot([
        "--print-setup-sql",
        "--pg.user=svc_image_auth",
        "--pg.query.anonymous_role=image_anon",
      ]).output();
      const setupSql = new TextDecoder().decode(setup.stdout);
      assert.ok(setup.success, new TextDecoder().decode(setup.stderr));
      assert.match(setupSql, /grant "image_anon" to "svc_image_auth"/);
      await psql(setupSql + "\ngrant select on genre to image_anon;");

      const port = freePort();
      const u = new URL(uri);
      u.username = "svc_image_auth";
      child = chroot([
        `--pg.uri=${u}`,
        "--pg.query.anonymous_role=image_anon",
        "--http.host=127.0.0.1",
        `--http.port=${port}`,
      ]).spawn();
      await waitFor(async () => {
        const r = await fetch(`http://127.0.0.1:${port}/svc/health/ready`);
        await r.body?.cancel();
        return r.status === 200;
      }, { timeout: 30_000, interval: 100, what: "/svc/health/ready answers 200" });
      const r = await fetch(
        `http://127.0.0.1:${port}/svc?relation=genre&order_by=genre_id&limit=1`,
      );
      assert.equal(r.status, 200);
      assert.equal((await r.json())[0].name, "Rock");
      // The secret was generated into the image's /secrets by the unprivileged user.
      assert.ok(Deno.statSync(`${dir}/secrets/jwt-secret`).isFile);

      child.kill("SIGTERM");
      const [status, out, err] = await Promise.all([
        child.status,
        new Response(child.stdout).text(),
        new Response(child.stderr).text(),
      ]);
      child = undefined;
      assert.equal(status.code, 0, err);
      const output = out + err;
      assert.doesNotMatch(output, /warn/i, "no warning at start-up or shutdown");
      assert.doesNotMatch(output, /legacy behavior/, "no Deno deprecation warning");
    } finally {
      if (child) {
        child.kill("SIGKILL");
        await child.status;
        await child.stdout.cancel().catch(() => {});
        await child.stderr.cancel().catch(() => {});
      }
      if (mounted) await sh("umount", ["-l", `${dir}/proc`]);
      await Deno.remove(dir, { recursive: true });
      await stopDb();
    }
  },
});
