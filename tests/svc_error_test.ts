import assert from "node:assert/strict";
import { markBatchIndex, STATUS, SvcError } from "../src/svc_error.ts";
import { toSvcError } from "../src/http/error_response.ts";

const ERRORS = new URL("../src/svc_error.ts", import.meta.url).href;
const CONFIG = new URL("../deno.json", import.meta.url).pathname;

/** Runs `deno check` on a probe file of `source` (which imports the errors module). */
async function check(source: string): Promise<{ ok: boolean; output: string }> {
  const dir = await Deno.makeTempDir({ prefix: "svc-errors-probe-" });
  try {
    const file = `${dir}/probe.ts`;
    await Deno.writeTextFile(file, `import { SvcError } from "${ERRORS}";\n${source}\n`);
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--config", CONFIG, file],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const dec = new TextDecoder();
    return { ok: out.success, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a misspelled error code does not compile; a correct one does", async () => {
  const typo = await check(`export const e = new SvcError("QUERY_INVALLID_TYPO", "x");`);
  assert.equal(typo.ok, false, typo.output);
  assert.match(typo.output, /QUERY_INVALLID_TYPO/);

  // A database-looking code is accepted only with the status it maps to.
  const dbTypo = await check(`export const e = new SvcError("PG_UNAVAILBLE", "x");`);
  assert.equal(dbTypo.ok, false, dbTypo.output);
  assert.match(dbTypo.output, /PG_UNAVAILBLE/);

  const good = await check(
    `export const a = new SvcError("QUERY_INVALID", "x");\n` +
      `export const b = new SvcError("PG_23505", "x", { status: 409 });`,
  );
  assert.equal(good.ok, true, good.output);
});

Deno.test("every code has its status from the table", () => {
  for (const [code, status] of Object.entries(STATUS)) {
    assert.equal(new SvcError(code as keyof typeof STATUS, "x").status, status, code);
  }
});

Deno.test("a batch index is attached one way, whatever failed", () => {
  const ctx = { dev: false, anonymous: false };
  const own = new SvcError("QUERY_INVALID", "x", { details: { pointer: "/1" } });
  markBatchIndex(own, 1);
  assert.deepEqual(toSvcError(own, ctx).details, { pointer: "/1", index: 1 });

  const bare = new SvcError("QUERY_INVALID", "x");
  markBatchIndex(bare, 0);
  assert.deepEqual(toSvcError(bare, ctx).details, { index: 0 });

  // A database error converted later: its details keep their shape, with the index beside them.
  const unique = Object.assign(new Error("duplicate key"), {
    code: "23505",
    detail: "Key (id)=(1) already exists.",
    table_name: "t",
  });
  markBatchIndex(unique, 2);
  assert.deepEqual(toSvcError(unique, ctx).details, {
    detail: "Key (id)=(1) already exists.",
    table: "t",
    index: 2,
  });

  // An RSnnn error's details are the function's DETAIL text: kept as the cause, not dropped.
  const raised = Object.assign(new Error("nope"), { code: "RS409", detail: "taken" });
  markBatchIndex(raised, 3);
  const err = toSvcError(raised, ctx);
  assert.equal(err.status, 409);
  assert.deepEqual(err.details, { cause: "taken", index: 3 });

  const internal = new Error("boom");
  markBatchIndex(internal, 4);
  assert.deepEqual(toSvcError(internal, ctx).details, { index: 4 });
});
