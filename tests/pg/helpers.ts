/**
 * Clusters for the client's tests: a private PostgreSQL 15 (Debian) or 18 (the npm package)
 * cluster with login roles per authentication method, a pg_hba.conf choosing the method by role,
 * and optionally TLS with a certificate signed by a throwaway CA.
 */
import { type Cluster, runCommand, startCluster } from "../../src/db/cluster.ts";
import { Connection } from "../../src/pg/connection.ts";

/** The password of every test role. */
export const PASSWORD = "s3cret pw";
/** A non-ASCII SCRAM password that SASLprep changes (fullwidth letters, a no-break space). */
export const PREP_PASSWORD = "ｐäss\u00A0wörd\u00AD";

/** Roles created by {@link authCluster}, one per pg_hba method. */
export const ROLES = {
  trust: "u_trust",
  password: "u_password",
  md5: "u_md5",
  scram: "u_scram",
  /** md5 in pg_hba.conf but a SCRAM verifier stored: the server does SCRAM. */
  md5ScramStored: "u_md5_scram",
  /** SCRAM with a password SASLprep maps. */
  scramPrep: "u_scram_prep",
  /** Only over TLS (hostssl). */
  tlsOnly: "u_tls",
} as const;

const sh = (cmd: string[], stdin?: string) => runCommand(cmd, { asPostgres: false, stdin });

/** Files of a throwaway CA and a server certificate it signed. */
export interface Certs {
  /** PEM of the CA certificate. */
  caFile: string;
  /** PEM of another CA that signed nothing here. */
  otherCaFile: string;
  cert: string;
  key: string;
}

/** A CA and a server certificate for DNS name `localhost` only (not 127.0.0.1). */
export async function makeCerts(dir: string): Promise<Certs> {
  const p = (f: string) => `${dir}/${f}`;
  // A self-signed CA: `openssl req -x509` with a fresh key.
  const ca = (key: string, crt: string, cn: string) =>
    sh([
      "openssl",
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      p(key),
      "-out",
      p(crt),
      "-days",
      "2",
      "-subj",
      `/CN=${cn}`,
    ]);
  await ca("ca.key", "ca.crt", "svc test CA");
  await ca("other.key", "other.crt", "other CA");
  await sh([
    "openssl",
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    p("server.key"),
    "-out",
    p("server.csr"),
    "-subj",
    "/CN=localhost",
  ]);
  await Deno.writeTextFile(
    p("ext.cnf"),
    "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
  );
  await sh([
    "openssl",
    "x509",
    "-req",
    "-in",
    p("server.csr"),
    "-CA",
    p("ca.crt"),
    "-CAkey",
    p("ca.key"),
    "-CAcreateserial",
    "-out",
    p("server.crt"),
    "-days",
    "2",
    "-extfile",
    p("ext.cnf"),
  ]);
  return {
    caFile: p("ca.crt"),
    otherCaFile: p("other.crt"),
    cert: p("server.crt"),
    key: p("server.key"),
  };
}

/** A cluster set up for the authentication and TLS tests. */
export interface AuthCluster {
  cluster: Cluster;
  /** Major version of the server. */
  version: number;
  /** TLS files when started with `tls`. */
  certs?: Certs;
  /** `postgres://role:password@host:port/postgres?…` for a role. */
  uri(role: string, password?: string, params?: Record<string, string>, host?: string): string;
}

/**
 * Starts a cluster (`embedded`: PostgreSQL 18 from the npm package) with a role per method and a
 * pg_hba.conf that picks the method by role; `tls` turns ssl on with a fresh CA.
 */
export async function authCluster(opts: { embedded?: boolean; tls?: boolean }): Promise<
  AuthCluster
> {
  const cluster = await startCluster({ embedded: opts.embedded ?? false });
  const data = `${cluster.dir}/data`;
  const q = (s: string) => `'${s.replaceAll("'", "''")}'`;
  await cluster.psql(`
    create role ${ROLES.trust} login;
    create role ${ROLES.password} login password ${q(PASSWORD)};
    create role ${ROLES.scram} login password ${q(PASSWORD)};
    create role ${ROLES.md5ScramStored} login password ${q(PASSWORD)};
    create role ${ROLES.scramPrep} login password ${q(PREP_PASSWORD)};
    create role ${ROLES.tlsOnly} login password ${q(PASSWORD)};
    set password_encryption = 'md5';
    create role ${ROLES.md5} login password ${q(PASSWORD)};
  `);
  const hba = [
    "local all all trust",
    `host all ${ROLES.trust} 127.0.0.1/32 trust`,
    `host all ${ROLES.password} 127.0.0.1/32 password`,
    `host all ${ROLES.md5} 127.0.0.1/32 md5`,
    `host all ${ROLES.md5ScramStored} 127.0.0.1/32 md5`,
    `host all ${ROLES.scram} 127.0.0.1/32 scram-sha-256`,
    `host all ${ROLES.scramPrep} 127.0.0.1/32 scram-sha-256`,
    `hostssl all ${ROLES.tlsOnly} 127.0.0.1/32 scram-sha-256`,
    `hostssl all ${ROLES.tlsOnly} ::1/128 scram-sha-256`,
    `hostnossl all ${ROLES.tlsOnly} 0.0.0.0/0 reject`,
    "host all postgres 127.0.0.1/32 trust",
    "host all all ::1/128 scram-sha-256",
  ];
  await Deno.writeTextFile(`${data}/pg_hba.conf`, hba.join("\n") + "\n");
  let certs: Certs | undefined;
  if (opts.tls) {
    certs = await makeCerts(cluster.dir);
    await sh(["chown", "postgres:postgres", certs.cert, certs.key]).catch(() => {});
    await Deno.chmod(certs.key, 0o600);
    await Deno.writeTextFile(
      `${data}/postgresql.conf`,
      `\nssl = on\nssl_cert_file = '${certs.cert}'\nssl_key_file = '${certs.key}'\n` +
        "listen_addresses = '127.0.0.1,::1'\n",
      { append: true },
    );
  }
  await cluster.ctl(["restart", "-m", "fast", "-w"]);
  const probe = await Connection.connect(cluster.uri);
  const version = parseInt(probe.parameters.get("server_version") ?? "0");
  await probe.close();
  return {
    cluster,
    version,
    certs,
    uri(role, password, params = {}, host = "127.0.0.1") {
      const auth = password === undefined
        ? encodeURIComponent(role)
        : `${encodeURIComponent(role)}:${encodeURIComponent(password)}`;
      const qs = new URLSearchParams(params).toString();
      return `postgres://${auth}@${host}:${cluster.port}/postgres${qs ? `?${qs}` : ""}`;
    },
  };
}
