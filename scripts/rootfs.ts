/**
 * `deno task rootfs <dir>`: writes the container's final stage into `<dir>`, exactly the files the
 * `Dockerfile` copies into its `scratch` image and nothing else:
 *
 * - `/svc/svc.js`: main.ts bundled into one file (with its npm dependencies, patched as
 *   `deno task setup` leaves them), which is also its own worker module;
 * - `/svc/deno`: the Deno runtime running the bundle, plus the shared libraries it links against
 *   (found with `ldd`, copied to the paths the dynamic loader looks them up at);
 * - `/etc/ssl/certs/ca-certificates.crt`: CA certificates (OIDC/SAML metadata over https,
 *   `sslmode=verify-full`);
 * - empty directories for the container defaults: `/secrets` (generated secrets), `/wellknown`
 *   (well-known queries), `/template` (templates), `/tmp`.
 *
 * The tested check of "drops into a scratch container" on a machine without a container engine is
 * `tests/e2e/rootfs_test.ts`: it runs the Dockerfile's ENTRYPOINT in this directory with `chroot`.
 * See docs/deployment.md.
 */
const ROOT = new URL("..", import.meta.url).pathname;

/** Where the runtime, the bundle and the container's documented volumes live in the image. */
export const LAYOUT = {
  deno: "/svc/deno",
  bundle: "/svc/svc.js",
  volumes: ["/secrets", "/wellknown", "/template"],
  caBundle: "/etc/ssl/certs/ca-certificates.crt",
} as const;

/** The uid:gid the image runs as (distroless' "nonroot"); it owns `/secrets`. */
export const RUN_AS = 65532;

const CA_CANDIDATES = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/cert.pem",
];

async function run(cmd: string, args: string[], cwd = ROOT): Promise<string> {
  const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${dec.decode(out.stderr)}`);
  }
  return dec.decode(out.stdout);
}

/** The shared libraries `exe` loads (absolute paths, the loader included), from `ldd`. */
export async function sharedLibraries(exe: string): Promise<string[]> {
  const libs = new Set<string>();
  for (const line of (await run("ldd", [exe])).split("\n")) {
    // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
    const m = line.match(/(?:=>\s*)?(\/\S+)\s+\(0x[0-9a-f]+\)/);
    if (m) libs.add(m[1]);
  }
  return [...libs];
}

async function copyInto(root: string, from: string, to = from, mode?: number): Promise<void> {
  const dest = `${root}${to}`;
  await Deno.mkdir(dest.slice(0, dest.lastIndexOf("/")), { recursive: true });
  // Follows symlinks: the image holds the files themselves.
  await Deno.copyFile(await Deno.realPath(from), dest);
  if (mode !== undefined) await Deno.chmod(dest, mode);
}

/** Writes the final stage into `dir` (created; must be empty or absent). */
export async function writeRootfs(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  for await (const _ of Deno.readDir(dir)) throw new Error(`${dir} is not empty`);
  const root = await Deno.realPath(dir);
  // The image's root: readable and traversable by the unprivileged runtime user.
  await Deno.chmod(root, 0o755);

  await Deno.mkdir(`${root}/svc`, { recursive: true });
  await run(Deno.execPath(), [
    "bundle",
    "--platform",
    "deno",
    "-o",
    `${root}${LAYOUT.bundle}`,
    `${ROOT}main.ts`,
  ]);
  await copyInto(root, Deno.execPath(), LAYOUT.deno, 0o755);
  for (const lib of await sharedLibraries(Deno.execPath())) await copyInto(root, lib);
  const ca = CA_CANDIDATES.find((p) => {
    try {
      return Deno.statSync(p).isFile;
    } catch {
      return false;
    }
  });
  if (!ca) throw new Error(`no CA bundle found (looked at ${CA_CANDIDATES.join(", ")})`);
  await copyInto(root, ca, LAYOUT.caBundle, 0o644);

  for (const v of LAYOUT.volumes) await Deno.mkdir(`${root}${v}`, { recursive: true });
  await Deno.mkdir(`${root}/tmp`, { recursive: true });
  await Deno.chmod(`${root}/tmp`, 0o1777);
  // The runtime user writes generated secrets; it reads everything else.
  if (Deno.uid() === 0) await Deno.chown(`${root}/secrets`, RUN_AS, RUN_AS);
  await Deno.chmod(`${root}/secrets`, 0o700);
}

if (import.meta.main) {
  const dir = Deno.args[0];
  if (!dir) {
    console.error("usage: deno task rootfs <dir>");
    Deno.exit(2);
  }
  await writeRootfs(dir);
  console.log(`rootfs written to ${dir}`);
}
