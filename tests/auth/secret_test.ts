import assert from "node:assert/strict";
import { join } from "node:path";
import { loadSecret, SECRET_FILE_NAME, SecretError } from "../../src/auth/secret.ts";

const encode = (s: string) => new TextEncoder().encode(s);

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "svc-secret-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

Deno.test("loadSecret: configured secret of ≥ 32 bytes is returned as UTF-8", async () => {
  await withTempDir(async (dir) => {
    const secret = "s".repeat(32);
    assert.deepEqual(await loadSecret({ secret, secretsDir: dir }), encode(secret));
    // 11 × "€" is 11 characters but 33 UTF-8 bytes.
    const euro = "€".repeat(11);
    assert.deepEqual(await loadSecret({ secret: euro, secretsDir: dir }), encode(euro));
    // The secrets directory is not touched when a secret is configured.
    assert.equal(await exists(join(dir, SECRET_FILE_NAME)), false);
  });
});

Deno.test("loadSecret: short configured secret throws SecretError naming jwt.secret", async () => {
  await withTempDir(async (dir) => {
    // 10 × "€" is 30 bytes; 31 ASCII characters is 31 bytes; "" is given but empty.
    for (const secret of ["s".repeat(31), "€".repeat(10), ""]) {
      await assert.rejects(loadSecret({ secret, secretsDir: dir }), (err: unknown) => {
        assert.ok(err instanceof SecretError);
        assert.ok(err instanceof Error);
        assert.equal(err.name, "SecretError");
        assert.match(err.message, /jwt\.secret/);
        assert.match(err.message, /32 bytes/);
        return true;
      });
    }
  });
});

Deno.test("loadSecret: generates a 0600 secret file when missing, then reuses it", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "nested", "secrets");
    const first = await loadSecret({ secretsDir: dir });
    const path = join(dir, SECRET_FILE_NAME);
    const info = await Deno.stat(path);
    assert.ok(info.isFile);
    if (Deno.build.os !== "windows") {
      assert.equal(info.mode! & 0o777, 0o600);
      assert.equal((await Deno.stat(dir)).mode! & 0o077, 0);
    }
    const text = (await Deno.readTextFile(path)).trim();
    // 64 random bytes → 86 base64url characters, no padding.
    assert.match(text, /^[A-Za-z0-9_-]{86}$/);
    assert.deepEqual(first, encode(text));
    // No temp files are left behind.
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), [SECRET_FILE_NAME]);

    const second = await loadSecret({ secretsDir: dir });
    assert.deepEqual(second, first);

    // A different directory gets a different random secret.
    const other = await loadSecret({ secretsDir: join(root, "other") });
    assert.notDeepEqual(other, first);
  });
});

Deno.test("loadSecret: create=false makes a missing file a SecretError naming it, creating nothing", async () => {
  await withTempDir(async (dir) => {
    const path = join(dir, SECRET_FILE_NAME);
    await assert.rejects(
      loadSecret({ secretsDir: dir, create: false }),
      (e) => e instanceof SecretError && e.message.includes(`${path} does not exist`),
    );
    assert.equal(await exists(path), false);
  });
});

Deno.test("loadSecret: existing secret file is trimmed and used as UTF-8", async () => {
  await withTempDir(async (dir) => {
    const secret = "file-secret-0123456789-abcdefghijklmnop";
    await Deno.writeTextFile(join(dir, SECRET_FILE_NAME), `  ${secret}\n\n`, { mode: 0o600 });
    assert.deepEqual(await loadSecret({ secretsDir: dir }), encode(secret));
  });
});

Deno.test("loadSecret: too-short secret file throws SecretError", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(join(dir, SECRET_FILE_NAME), "short\n");
    await assert.rejects(loadSecret({ secretsDir: dir }), SecretError);
  });
});

Deno.test("loadSecret: concurrent first starts agree on one secret", async () => {
  await withTempDir(async (dir) => {
    const results = await Promise.all(
      Array.from({ length: 8 }, () => loadSecret({ secretsDir: dir })),
    );
    for (const r of results) assert.deepEqual(r, results[0]);
    const text = (await Deno.readTextFile(join(dir, SECRET_FILE_NAME))).trim();
    assert.deepEqual(results[0], encode(text));
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), [SECRET_FILE_NAME]);
  });
});

Deno.test("loadSecret: a secrets.dir svc cannot create is a SecretError saying what to set", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // Under a regular file: no directory can be made there, whoever runs the test.
    const file = `${dir}/plain`;
    await Deno.writeTextFile(file, "x");
    await assert.rejects(
      loadSecret({ secretsDir: `${file}/secrets` }),
      (e) =>
        e instanceof SecretError && /secrets\.dir/.test(e.message) &&
        /jwt\.secret/.test(e.message) && e.message.includes(`${file}/secrets/jwt-secret`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("svc with a secrets.dir it cannot create stops with exit 2 naming it, not a listen error", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/plain`, "x");
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../../main.ts", import.meta.url).pathname,
        "--http.host=127.0.0.1",
        "--http.port=0",
        `--secrets.dir=${dir}/plain/secrets`,
        "--pg.uri=postgres://nobody@127.0.0.1:1/none",
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, err);
    assert.match(err, /secrets\.dir/);
    assert.doesNotMatch(err, /cannot listen/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
