/**
 * Test harness: one private PostgreSQL cluster per test file (started on first use, stopped by
 * `stopDb()` or at process exit), with the Chinook demo loaded into database `chinook`.
 */
import { type Cluster, loadChinook, startCluster } from "../../src/db/cluster.ts";
import { introspect } from "../../src/db/introspect.ts";
import type { Schema } from "../../src/db/schema.ts";
import { Blacklist } from "../../src/db/blacklist.ts";

let cluster: Promise<Cluster> | null = null;
let started: Cluster | null = null;
const databases = new Map<string, Promise<string>>();

/** The cluster of this test file. */
export function testCluster(): Promise<Cluster> {
  cluster ??= startCluster().then((c) => (started = c));
  return cluster;
}

/**
 * A database of the cluster with Chinook loaded, plus `extraSql` run after it (fixtures).
 * Each distinct `name` is created once per test file.
 */
export function chinookDb(name = "chinook", extraSql = ""): Promise<string> {
  let p = databases.get(name);
  if (!p) {
    p = (async () => {
      const c = await testCluster();
      const uri = await loadChinook(c, name);
      if (extraSql) await c.psql(extraSql, name);
      return uri;
    })();
    databases.set(name, p);
  }
  return p;
}

/** An empty database of the cluster with `sql` run in it. */
export function emptyDb(name: string, sql = ""): Promise<string> {
  let p = databases.get(name);
  if (!p) {
    p = (async () => {
      const c = await testCluster();
      await c.psql(`create database ${name}`);
      if (sql) await c.psql(sql, name);
      return c.uriFor(name);
    })();
    databases.set(name, p);
  }
  return p;
}

/** Introspects a test database. */
export function schemaOf(uri: string, blacklist = new Blacklist()): Promise<Schema> {
  return introspect(uri, blacklist);
}

/** Runs SQL as superuser in a test database. */
export async function psql(sql: string, database = "chinook"): Promise<string> {
  return (await testCluster()).psql(sql, database);
}

/**
 * The single value of a one-row, one-column query run as superuser (psql's aligned output parsed:
 * header, rule, value; the "(1 row)" footer is never mistaken for the value).
 */
export async function scalar(sql: string, database = "chinook"): Promise<string> {
  const lines = (await psql(sql, database)).split("\n");
  if (lines.length < 4 || !/^-+$/.test(lines[1].trim()) || lines[3].trim() !== "(1 row)") {
    throw new Error(`not a single value: ${lines.join("\n")}`);
  }
  return lines[2].trim();
}

/** Stops the cluster (call from the last test of a file, or rely on sanitizers being off). */
export async function stopDb(): Promise<void> {
  if (!cluster) return;
  const c = await cluster;
  cluster = null;
  started = null;
  databases.clear();
  await c.stop();
}

globalThis.addEventListener("unload", () => {
  // The test process is exiting: stop the cluster synchronously and remove its directory.
  started?.stopSync();
});
