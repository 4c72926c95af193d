import assert from "node:assert/strict";
import { closest, didYouMean, editDistance } from "../../src/util/suggest.ts";

Deno.test("edit distance and the closest plausible name", () => {
  assert.equal(editDistance("artis", "artist"), 1);
  assert.equal(editDistance("Genre", "genre"), 0);
  assert.equal(closest("artis", ["album", "artist", "track"]), "artist");
  assert.equal(closest("invoce_line", ["invoice", "invoice_line"]), "invoice_line");
  assert.equal(closest("xyz", ["album", "artist"]), null, "too far is no suggestion");
  assert.equal(didYouMean("nmae", ["name", "artist_id"]), "; did you mean 'name'?");
  assert.equal(didYouMean("zzzz", ["name"]), "");
});
