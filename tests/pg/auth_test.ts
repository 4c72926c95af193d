/**
 * Authentication against real servers, PostgreSQL 15 (Debian) and 18 (the npm package): trust,
 * password, md5 and scram-sha-256 chosen by pg_hba.conf lines, md5 and SCRAM password storage
 * (password_encryption), SASLprep, a Unix socket, and the connection settings coming from the
 * environment and a pgpass file when the connection string is silent.
 */
import assert from "node:assert/strict";
import { Connection } from "../../src/pg/connection.ts";
import { PgConnectionError, PgError } from "../../src/pg/errors.ts";
import { authCluster, PASSWORD, PREP_PASSWORD, ROLES } from "./helpers.ts";

async function who(uri: string): Promise<{ user: string; ssl: boolean }> {
  const c = await Connection.connect(uri, { connectTimeoutMs: 10_000 });
  try {
    const [r] = await c.execute([{
      sql: "select current_user as u, coalesce((select ssl from pg_stat_ssl " +
        "where pid = pg_backend_pid()), false) as ssl",
    }]);
    return { user: r.rows[0].u as string, ssl: r.rows[0].ssl as boolean };
  } finally {
    await c.close();
  }
}

async function refused(uri: string, code: string): Promise<void> {
  await assert.rejects(
    () => Connection.connect(uri, { connectTimeoutMs: 10_000 }),
    (e: unknown) => {
      assert.ok(e instanceof PgError || e instanceof PgConnectionError, String(e));
      assert.equal((e as { code: string }).code, code, String(e));
      return true;
    },
  );
}

for (const embedded of [false, true]) {
  Deno.test({
    name: `auth: every method against PostgreSQL ${embedded ? "18 (npm)" : "15 (Debian)"}`,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn(t) {
      const ac = await authCluster({ embedded });
      try {
        assert.equal(ac.version, embedded ? 18 : 15);
        await t.step("trust", async () => {
          assert.equal((await who(ac.uri(ROLES.trust))).user, ROLES.trust);
        });
        await t.step("password (cleartext)", async () => {
          assert.equal((await who(ac.uri(ROLES.password, PASSWORD))).user, ROLES.password);
          await refused(ac.uri(ROLES.password, "wrong"), "28P01");
        });
        await t.step("md5 with an md5-stored password", async () => {
          assert.equal((await who(ac.uri(ROLES.md5, PASSWORD))).user, ROLES.md5);
          await refused(ac.uri(ROLES.md5, "wrong"), "28P01");
        });
        await t.step("scram-sha-256", async () => {
          assert.equal((await who(ac.uri(ROLES.scram, PASSWORD))).user, ROLES.scram);
          await refused(ac.uri(ROLES.scram, "wrong"), "28P01");
        });
        await t.step("md5 in pg_hba.conf with a SCRAM-stored password: SCRAM", async () => {
          const uri = ac.uri(ROLES.md5ScramStored, PASSWORD);
          assert.equal((await who(uri)).user, ROLES.md5ScramStored);
          await refused(ac.uri(ROLES.md5ScramStored, "wrong"), "28P01");
        });
        await t.step("scram-sha-256 with a password SASLprep maps", async () => {
          assert.equal((await who(ac.uri(ROLES.scramPrep, PREP_PASSWORD))).user, ROLES.scramPrep);
          // The mapped form is the same password.
          const mapped = PREP_PASSWORD.replace("\u00A0", " ").replace("\u00AD", "")
            .normalize("NFKC");
          assert.equal((await who(ac.uri(ROLES.scramPrep, mapped))).user, ROLES.scramPrep);
        });
        await t.step("a password asked for and none configured: 08001", async () => {
          await refused(ac.uri(ROLES.scram), "08001");
          await refused(ac.uri(ROLES.password), "08001");
        });
        await t.step("Unix socket", async () => {
          const uri = `postgres://${ROLES.trust}@${
            encodeURIComponent(ac.cluster.dir)
          }:${ac.cluster.port}/postgres`;
          assert.equal((await who(uri)).user, ROLES.trust);
          const kv = `host=${ac.cluster.dir} port=${ac.cluster.port} user=${ROLES.trust} ` +
            "dbname=postgres";
          assert.equal((await who(kv)).user, ROLES.trust);
        });
        await t.step("settings from the environment where the string is silent", async () => {
          const keys = ["PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGAPPNAME"];
          const saved = keys.map((k) => Deno.env.get(k));
          try {
            Deno.env.set("PGHOST", "127.0.0.1");
            Deno.env.set("PGPORT", String(ac.cluster.port));
            Deno.env.set("PGUSER", ROLES.scram);
            Deno.env.set("PGPASSWORD", PASSWORD);
            Deno.env.set("PGDATABASE", "postgres");
            Deno.env.set("PGAPPNAME", "from-env");
            const c = await Connection.connect("postgres://");
            const [r] = await c.execute([{
              sql: "select current_user as u, current_setting('application_name') as a",
            }]);
            await c.close();
            assert.deepEqual(r.rows[0], { u: ROLES.scram, a: "from-env" });
            // The string wins over the environment.
            assert.equal((await who(ac.uri(ROLES.md5, PASSWORD))).user, ROLES.md5);
          } finally {
            keys.forEach((k, i) =>
              saved[i] === undefined ? Deno.env.delete(k) : Deno.env.set(k, saved[i]!)
            );
          }
        });
        await t.step("password from a pgpass file", async () => {
          const file = `${ac.cluster.dir}/pgpass`;
          await Deno.writeTextFile(
            file,
            `# comment\n127.0.0.1:${ac.cluster.port}:*:${ROLES.scram}:${
              PASSWORD.replaceAll(":", "\\:")
            }\n`,
            { mode: 0o600 },
          );
          const uri = ac.uri(ROLES.scram, undefined, { passfile: file });
          assert.equal((await who(uri)).user, ROLES.scram);
        });
      } finally {
        await ac.cluster.stop();
      }
    },
  });
}
