/**
 * TLS against a real PostgreSQL 15 with `ssl = on` and a certificate (DNS name `localhost` only)
 * signed by a throwaway CA: every sslmode, the CA checked, the host name checked by verify-full
 * only, and the session really encrypted (pg_stat_ssl; a hostssl-only role).
 */
import assert from "node:assert/strict";
import { Connection } from "../../src/pg/connection.ts";
import { authCluster, PASSWORD, ROLES } from "./helpers.ts";

async function ssl(uri: string): Promise<{ ssl: boolean; encrypted: boolean; user: string }> {
  const c = await Connection.connect(uri, { connectTimeoutMs: 10_000 });
  try {
    const [r] = await c.execute([{
      sql: "select current_user as u, coalesce((select ssl from pg_stat_ssl " +
        "where pid = pg_backend_pid()), false) as ssl",
    }]);
    return { ssl: r.rows[0].ssl as boolean, encrypted: c.encrypted, user: r.rows[0].u as string };
  } finally {
    await c.close();
  }
}

async function fails(uri: string, pattern: RegExp): Promise<void> {
  await assert.rejects(
    () => Connection.connect(uri, { connectTimeoutMs: 10_000 }),
    (e: Error) => {
      assert.match(`${(e as { code?: string }).code} ${e.message}`, pattern);
      return true;
    },
  );
}

Deno.test({
  name: "tls: sslmode disable/prefer/require/verify-ca/verify-full with a self-signed CA",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const ac = await authCluster({ tls: true });
    const ca = ac.certs!.caFile;
    const other = ac.certs!.otherCaFile;
    try {
      const u = (mode: string, extra: Record<string, string> = {}, host = "127.0.0.1") =>
        ac.uri(ROLES.tlsOnly, PASSWORD, { sslmode: mode, ...extra }, host);
      await t.step("disable: unencrypted (and the hostssl-only role is refused)", async () => {
        const r = await ssl(ac.uri(ROLES.scram, PASSWORD, { sslmode: "disable" }));
        assert.deepEqual([r.ssl, r.encrypted], [false, false]);
        await fails(u("disable"), /28000/);
      });
      await t.step("prefer and require without a CA: encrypted, not verified", async () => {
        for (const mode of ["prefer", "require"]) {
          const r = await ssl(u(mode));
          assert.deepEqual([r.ssl, r.encrypted, r.user], [true, true, ROLES.tlsOnly], mode);
        }
      });
      await t.step("verify-ca: the right CA passes whatever the host name", async () => {
        const r = await ssl(u("verify-ca", { sslrootcert: ca }));
        assert.deepEqual([r.ssl, r.encrypted], [true, true]);
      });
      await t.step("verify-ca: another CA fails", async () => {
        await fails(u("verify-ca", { sslrootcert: other }), /08001.*TLS handshake/);
      });
      await t.step("verify-full: the right host name passes", async () => {
        const r = await ssl(u("verify-full", { sslrootcert: ca }, "localhost"));
        assert.deepEqual([r.ssl, r.encrypted], [true, true]);
      });
      await t.step("verify-full: a wrong host name fails", async () => {
        // 127.0.0.1 is not a name in the certificate.
        await fails(u("verify-full", { sslrootcert: ca }), /08001.*TLS handshake/);
      });
      await t.step("verify-full: no CA given (only Deno's roots) fails", async () => {
        await fails(u("verify-full", {}, "localhost"), /08001.*TLS handshake/);
      });
      await t.step("require with a CA verifies it (as libpq)", async () => {
        assert.equal((await ssl(u("require", { sslrootcert: ca }))).ssl, true);
        await fails(u("require", { sslrootcert: other }), /08001.*TLS handshake/);
      });
      await t.step("an unreadable sslrootcert is a clear error", async () => {
        await fails(
          u("verify-full", { sslrootcert: "/nonexistent.crt" }, "localhost"),
          /08001.*sslrootcert/,
        );
      });
    } finally {
      await ac.cluster.stop();
    }
  },
});

Deno.test({
  name: "tls: a server without TLS — require refuses, prefer falls back to unencrypted",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const ac = await authCluster({});
    try {
      const uri = (mode: string) => ac.uri(ROLES.scram, PASSWORD, { sslmode: mode });
      await fails(uri("require"), /08001.*does not support TLS/);
      await fails(uri("verify-full"), /08001.*does not support TLS/);
      const r = await ssl(uri("prefer"));
      assert.deepEqual([r.ssl, r.encrypted], [false, false]);
      const a = await ssl(uri("allow"));
      assert.deepEqual([a.ssl, a.encrypted], [false, false]);
    } finally {
      await ac.cluster.stop();
    }
  },
});
