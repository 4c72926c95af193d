/**
 * The generator on the kitchen fixture (enum, composite, array, generated and identity columns,
 * view, partitioned table, computed field, set-returning function, other schema): the mapping of
 * PostgreSQL types, determinism, schema selection, and a typed use of it that `deno check` accepts.
 */
import assert from "node:assert/strict";
import { emptyDb, schemaOf, stopDb } from "../helpers/db.ts";
import { generateClient } from "../../src/client/generate.ts";
import { checkTypes } from "./check.ts";

const fixture = await Deno.readTextFile(new URL("../fixtures/kitchen.sql", import.meta.url));

const USE = `import { func, relation } from "./database.ts";
type Eq<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;
function expectType<T extends true>(_?: T): void {}
const people = relation("person", (j) => ({
  select: ["name", "feeling", "home", "tags", "search", "person_label", "pet"],
  join: { pet: j.pet({ select: ["name"] }) },
}));
type P = Awaited<ReturnType<typeof people.get>>[number];
expectType<Eq<P, {
  name: string;
  feeling: "sad" | "ok" | "happy";
  home: { street: string | null; city: string | null; zip: string | null } | null;
  tags: (string)[];
  search: string | null;
  person_label: string | null;
  pet: { name: string }[];
}>>();
type W = Parameters<typeof people.write>[0][number];
// generated column 'search' is not writable; identity 'id' and defaulted 'feeling' are optional
expectType<Eq<W, {
  name: string;
  feeling?: "sad" | "ok" | "happy";
  home?: { street: string | null; city: string | null; zip: string | null } | null;
  tags?: (string)[];
  pet?: readonly { name: string }[];
}>>();
// @ts-expect-error not a label of the enum
people.write([{ name: "x", feeling: "angry" }]);
// @ts-expect-error the generated column cannot be written
people.write([{ name: "x", search: "a" }]);
const found = func("search_people", { q: "ada" }, (j) => ({ select: ["name", "pet"], join: { pet: j.pet() } }));
type F = Awaited<ReturnType<typeof found.get>>[number];
expectType<Eq<F["pet"][number], { id: number; owner_id: number; name: string }>>();
const summary = relation("person_summary");
type S = Awaited<ReturnType<typeof summary.get>>[number];
expectType<Eq<S, { name: string | null; pets: number | null }>>();
relation("measurement", { select: ["logdate", "peak"] });
relation("secret.keys", { select: ["id", "k"] });
// A view showing its table's key takes the table's foreign keys (docs/query.md "Views").
relation("adult_person", (j) => ({ join: { pet: j.pet() } }));
// @ts-expect-error an aggregate view takes none, so nothing to join
relation("person_summary", (j) => ({ join: { pet: j.pet() } }));
`;

const STRICT = {
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  noImplicitOverride: true,
  noUnusedLocals: true,
  noUnusedParameters: true,
  noImplicitReturns: true,
  noPropertyAccessFromIndexSignature: true,
};

Deno.test("generator: kitchen fixture types, determinism, schemas", async () => {
  const uri = await emptyDb("kitchen_ts", fixture);
  const schema = await schemaOf(uri);
  const g = await generateClient(schema, [], { visible: null, schemas: null });
  const g2 = await generateClient(schema, [], { visible: null, schemas: null });
  assert.equal(g.text, g2.text);
  assert.equal(g.hash, g2.hash);
  assert.ok(g.text.includes('"secret.keys": {'));
  assert.ok(g.text.includes('"secret.keys": ["secret", "keys", {'));
  const pub = await generateClient(schema, [], { visible: null, schemas: ["public"] });
  assert.ok(!pub.text.includes('"secret.keys"'));
  assert.notEqual(pub.hash, g.hash);
  const dir = await Deno.makeTempDir({ prefix: "svc-gen-" });
  try {
    await Deno.writeTextFile(`${dir}/database.ts`, g.text);
    const r = await checkTypes(dir, USE, "use.ts");
    assert.ok(r.success, r.output);
    // The file itself also passes under a project's strictest compiler options.
    await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ compilerOptions: STRICT }));
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--quiet", "--config", `${dir}/deno.json`, `${dir}/database.ts`],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("teardown", () => stopDb());
