/**
 * A bulk write's plan costs a small, fixed number of bytes per row (plan_rows.ts: one small
 * object per row, values column by column, pointers made only for errors; siblings share their
 * fills): 200,000 flat rows and a 124,000-row three-level nested write, measured in a process of
 * their own with a forced collection around the planning (plan_heap.ts).
 */
import assert from "node:assert/strict";

Deno.test("planning a bulk write keeps at most ~170 bytes a flat row and ~300 a nested one", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--v8-flags=--expose-gc",
      new URL("./plan_heap.ts", import.meta.url).pathname,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const bytes = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    flat: number;
    nested: number;
  };
  // Before plan_rows.ts: ~330 and ~620 bytes (a Map of values, a pointer string and an input
  // object per row, a fills array and object per child row).
  assert.ok(bytes.flat < 170, `flat: ${bytes.flat.toFixed(0)} bytes a row`);
  assert.ok(bytes.nested < 300, `nested: ${bytes.nested.toFixed(0)} bytes a row`);
});
