import assert from "node:assert/strict";
import {
  closest,
  didYouMean,
  editDistance,
  ranked,
  SuggestingError,
} from "../../src/util/suggest.ts";

Deno.test("edit distance and the closest plausible name", () => {
  assert.equal(editDistance("artis", "artist"), 1);
  assert.equal(editDistance("Genre", "genre"), 0);
  assert.equal(closest("artis", ["album", "artist", "track"]), "artist");
  assert.equal(closest("invoce_line", ["invoice", "invoice_line"]), "invoice_line");
  assert.equal(closest("xyz", ["album", "artist"]), null, "too far is no suggestion");
  assert.equal(didYouMean("nmae", ["name", "artist_id"]), "; did you mean 'name'?");
  assert.equal(didYouMean("zzzz", ["name"]), "");
});

Deno.test("a suggesting error offers the closest candidate the role may use, once", () => {
  const email = { name: "email", need: { relation: 1, column: "email" } };
  const candidates = [{ name: "emails" }, email, { name: "far_away" }];
  assert.deepEqual(ranked("emai", candidates).map((c) => c.name), ["email", "emails"]);
  const render = (hint: string) => `unknown column 'emai'${hint}`;
  const hidden = new SuggestingError("QUERY_UNKNOWN_COLUMN", "emai", candidates, render, {});
  assert.equal(hidden.message, "unknown column 'emai'", "no hint before it is settled");
  hidden.settle((c) => c.need === undefined);
  assert.equal(hidden.message, "unknown column 'emai'; did you mean 'emails'?");
  hidden.settle(() => true);
  assert.equal(hidden.message, "unknown column 'emai'; did you mean 'emails'?", "settled once");
  const shown = new SuggestingError("QUERY_UNKNOWN_COLUMN", "emai", candidates, render, {});
  shown.settle(() => true);
  assert.equal(shown.message, "unknown column 'emai'; did you mean 'email'?");
  assert.equal(shown.code, "QUERY_UNKNOWN_COLUMN");
  assert.equal(shown.status, 400);
});
