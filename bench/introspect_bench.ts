/**
 * Micro-benchmark: introspection of 1,000 and 5,000 generated tables (each with a primary key,
 * three columns and a foreign key to the previous table). `deno bench -A bench/introspect_bench.ts`
 */
import { startCluster } from "../src/db/cluster.ts";
import { introspect } from "../src/db/introspect.ts";

const cluster = await startCluster();
globalThis.addEventListener("unload", () => cluster.stopSync());

async function generated(db: string, n: number): Promise<string> {
  await cluster.psql(`create database ${db}`);
  const stmts: string[] = [];
  for (let i = 0; i < n; i++) {
    const fk = i > 0 ? `, prev_id int references t${i - 1}(id)` : "";
    stmts.push(
      `create table t${i} (id int generated always as identity primary key, name text not null, v numeric${fk});`,
    );
  }
  await cluster.psql(stmts.join("\n"), db);
  return cluster.uriFor(db);
}

const uri1k = await generated("gen1k", 1000);
const uri5k = await generated("gen5k", 5000);

Deno.bench("introspect 1,000 tables", { n: 10, warmup: 2 }, async () => {
  await introspect(uri1k);
});
Deno.bench("introspect 5,000 tables", { n: 5, warmup: 1 }, async () => {
  await introspect(uri5k);
});
