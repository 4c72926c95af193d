import assert from "node:assert/strict";
import { chinookDb, schemaOf } from "../helpers/db.ts";

Deno.test("introspection of chinook: FKs both ways, identity and mandatory columns", async () => {
  const s = await schemaOf(await chinookDb());
  const album = s.relations.get("public.album")!;
  assert.deepEqual(album.primaryKey, ["album_id"]);
  assert.deepEqual(album.foreignKeys.map((f) => f.references.relation), ["artist"]);
  const artist = s.relations.get("public.artist")!;
  assert.deepEqual(artist.referencedBy.map((f) => f.relation), ["album"]);
  assert.equal(album.columnMap.get("album_id")!.identity, "always");
  assert.equal(album.columnMap.get("album_id")!.mandatory, false);
  assert.equal(album.columnMap.get("title")!.mandatory, true);
});
