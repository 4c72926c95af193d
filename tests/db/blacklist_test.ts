import assert from "node:assert/strict";
import { Blacklist } from "../../src/db/blacklist.ts";

Deno.test("the blacklist only adds: n never removes a built-in entry and is reported", () => {
  const b = new Blacklist({
    functions: { "*": { pg_sleep: "n" }, public: { "danger*": "y", danger_ok: "n" } },
    relations: { pg_catalog: { pg_class: "n" }, public: { secret: "y" } },
  });
  assert.equal(b.func("public", "pg_sleep"), true);
  assert.equal(b.relation("pg_catalog", "pg_class"), true);
  assert.equal(b.relation("public", "secret"), true);
  assert.equal(b.relation("public", "artist"), false);
  // n carves an exception out of the configuration's own patterns.
  assert.equal(b.func("public", "danger_zone"), true);
  assert.equal(b.func("public", "danger_ok"), false);
  assert.equal(b.warnings.length, 2);
  assert.match(b.warnings.join("\n"), /pg_sleep/);
  assert.match(b.warnings.join("\n"), /pg_class/);
});
