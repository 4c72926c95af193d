import assert from "node:assert/strict";
import { emptyDb, schemaOf, stopDb } from "../helpers/db.ts";
import { Blacklist } from "../../src/db/blacklist.ts";
import { databaseJson } from "../../src/client/database_json.ts";
import { visibleAs } from "../../src/client/visible.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/kitchen.sql", import.meta.url));

Deno.test("introspection of the kitchen fixture", async () => {
  const uri = await emptyDb("kitchen", fixture);
  const s = await schemaOf(uri, new Blacklist({ relations: { secret: { "*": "y" } } }));
  const person = s.relations.get("public.person")!;
  assert.equal(person.kind, "table");
  assert.equal(person.comment, "People");
  assert.deepEqual(person.primaryKey, ["id"]);
  assert.deepEqual(person.unique, [["nick"]]);
  const col = (n: string) => person.columnMap.get(n)!;
  assert.equal(col("id").identity, "by_default");
  assert.equal(col("name").mandatory, true);
  assert.equal(col("feeling").mandatory, false); // has a default
  assert.equal(col("feeling").category, "E");
  assert.equal(col("search").generated, true);
  assert.equal(col("search").mandatory, false);
  assert.equal(col("tags").elementType, "text");
  const home = col("home");
  assert.ok(home.compositeOid !== null);
  assert.deepEqual(s.composites.get(home.compositeOid!)!.fields.map((f) => f.name), [
    "street",
    "city",
    "zip",
  ]);
  assert.deepEqual(s.enums.find((e) => e.name === "mood")!.labels, ["sad", "ok", "happy"]);
  assert.ok(person.computedFields.has("person_label"));
  assert.equal(person.referencedBy[0].relation, "pet");
  // views: updatable simple view, non-updatable aggregate view
  const adult = s.relations.get("public.adult_person")!;
  assert.equal(adult.kind, "view");
  assert.equal(adult.insertable, true);
  assert.equal(adult.updatable, true);
  const summary = s.relations.get("public.person_summary")!;
  assert.equal(summary.updatable, false);
  assert.equal(s.relations.get("public.measurement")!.kind, "partitioned_table");
  assert.ok(s.relations.has("public.measurement_2026"));
  // set-returning function returning rows of a relation
  const search = s.functions.get("public.search_people")![0];
  assert.equal(search.returns.set, true);
  assert.deepEqual(search.returns.relation, { schema: "public", name: "person" });
  assert.equal(search.comment, "Full-text search");
  assert.equal(search.volatility, "stable");
  assert.deepEqual(search.inArgs.map((a) => [a.name, a.type]), [["q", "text"]]);
  // blacklist: configured schema and built-in dangerous names in any schema
  assert.equal(s.relations.has("secret.keys"), false);
  assert.equal(s.functions.has("public.pg_sleep_forever"), false);
  assert.ok(!s.schemas.includes("secret"));
  assert.ok(
    ![...s.relations.keys()].some((k) =>
      k.startsWith("pg_catalog.") || k.startsWith("information_schema.")
    ),
  );
});

Deno.test("database.json shape (docs/endpoint.md)", async () => {
  const s = await schemaOf(await emptyDb("kitchen", fixture));
  const doc = databaseJson(s, null, [{ name: "q", params: { a: { type: "integer" } } }]) as {
    schemas: {
      name: string;
      relations: Record<string, unknown>[];
      functions: Record<string, unknown>[];
    }[];
    wellknown: unknown[];
  };
  const pub = doc.schemas.find((x) => x.name === "public")!;
  const person = pub.relations.find((r) => r.name === "person")!;
  assert.deepEqual(Object.keys(person).sort(), [
    "columns",
    "comment",
    "computed_fields",
    "foreign_keys",
    "kind",
    "name",
    "primary_key",
    "unique",
  ]);
  assert.deepEqual((person.columns as Record<string, unknown>[])[0], {
    name: "id",
    type: "integer",
    nullable: false,
    has_default: false,
    identity: "by_default",
    generated: false,
    mandatory: false,
  });
  assert.deepEqual(person.computed_fields, [{ name: "person_label", type: "text" }]);
  const pet = pub.relations.find((r) => r.name === "pet")!;
  // The table's foreign key, and the same key to the view showing person's key.
  assert.deepEqual(pet.foreign_keys, [{
    name: "pet_owner_id_fkey",
    columns: ["owner_id"],
    references: { schema: "public", relation: "person", columns: ["id"] },
  }, {
    name: "pet_owner_id_fkey",
    columns: ["owner_id"],
    references: { schema: "public", relation: "adult_person", columns: ["id"] },
  }]);
  const fn = pub.functions.find((f) => f.name === "search_people")!;
  assert.deepEqual(Object.keys(fn).sort(), [
    "arguments",
    "comment",
    "name",
    "returns",
    "route",
    "volatility",
  ]);
  assert.deepEqual(fn.arguments, [{ name: "q", type: "text", mode: "in", has_default: false }]);
  assert.deepEqual(fn.returns, { type: "person", set: true });
  assert.deepEqual(doc.wellknown, [{ name: "q", params: { a: { type: "integer" } } }]);
});

Deno.test("database.json is filtered by the role's privileges", async () => {
  const uri = await emptyDb("kitchen", fixture);
  const c = (await import("../helpers/db.ts")).psql;
  await c(
    `do $$ begin create role viewer nologin; exception when duplicate_object then null; end $$;
    grant usage on schema public to viewer; grant select on pet to viewer;
    revoke execute on function search_people(text) from public;`,
    "kitchen",
  );
  const s = await schemaOf(uri);
  const doc = databaseJson(s, await visibleAs(uri, "viewer", s), []) as {
    schemas: {
      relations: { name: string; foreign_keys: unknown[] }[];
      functions: { name: string }[];
    }[];
  };
  const rels = doc.schemas.flatMap((x) => x.relations);
  assert.deepEqual(rels.map((r) => r.name), ["pet"]);
  // Its foreign key points at a relation the role cannot see.
  assert.deepEqual(rels[0].foreign_keys, []);
  const fns = doc.schemas.flatMap((x) => x.functions.map((r) => r.name));
  assert.ok(!fns.includes("search_people"));
  // EXECUTE by default (PUBLIC), but its argument is the row type of a hidden relation.
  assert.ok(!fns.includes("person_label"));
});

Deno.test("row-level security, user triggers and rules per relation; a foreign key's triggers are not the user's", async () => {
  const uri = await emptyDb(
    "facts",
    `create table parent (id int primary key);
     create table child (id int primary key, parent_id int references parent);
     create table guarded (id int primary key);
     alter table guarded enable row level security;
     create table watched (id int primary key);
     create function nop() returns trigger language plpgsql as $$ begin return null; end $$;
     create trigger nop after insert on watched for each row execute function nop();
     create table ruled (id int primary key);
     create rule keep as on delete to ruled do instead nothing;`,
  );
  const s = await schemaOf(uri);
  const facts = (name: string) => {
    const r = s.relations.get(`public.${name}`)!;
    return [r.rowSecurity, r.userTriggers, r.hasRules];
  };
  assert.deepEqual(facts("parent"), [false, false, false]);
  assert.deepEqual(facts("child"), [false, false, false]);
  assert.deepEqual(facts("guarded"), [true, false, false]);
  assert.deepEqual(facts("watched"), [false, true, false]);
  assert.deepEqual(facts("ruled"), [false, false, true]);
});

Deno.test("stop cluster", () => stopDb());
