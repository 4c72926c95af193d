/**
 * CPU of planning and compiling a nested write, without I/O: `deno run -A bench/write_plan_cpu.ts
 * [OLD_CHECKOUT]`. Plans and compiles one album with five tracks (the shape of `deno task bench`'s
 * nested write: a parent row and five children taking its generated key) against the hand-built
 * schema of the planner tests, in alternating rounds between this checkout and, when given,
 * another checkout's src/write (e.g. `git archive <commit> | tar -x -C /tmp/old`). Prints µs per
 * write (plan + compile, from a plan template where the checkout has them: src/write/template.ts)
 * per round and the medians.
 *
 * @module
 */
import { parseQuery } from "../src/compile/parse.ts";
import { fakeSchema } from "../tests/write/fake_schema.ts";

const ROUNDS = 9;
const PER_ROUND = 20_000;

type Write = (node: unknown, data: unknown) => { statements: { params: unknown[] }[] };

/** What the server runs: plan and compile, from a plan template where the checkout has them. */
async function load(dir: string): Promise<Write> {
  const p = await import(`${dir}/src/write/plan.ts`);
  const c = await import(`${dir}/src/write/compile.ts`);
  const t = await import(`${dir}/src/write/template.ts`).catch(() => null);
  if (t) return (node, data) => t.planAndCompileWrite(node, data, "/data", { readBack: true });
  return (node, data) =>
    c.compileWrite(p.planWrite(node, data, "/data", { readBack: true }), { readBack: true });
}

const here = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const variants: [string, Write][] = [["new", await load(here)]];
if (Deno.args[0]) variants.unshift(["old", await load(Deno.args[0])]);

const node = parseQuery(fakeSchema(), {
  relation: "album",
  select: ["album_id", "title", "artist_id", "tracks"],
  join: {
    tracks: {
      relation: "track",
      on: { album_id: "album_id" },
      select: ["track_id", "album_id", "name", "milliseconds"],
    },
  },
}, { maxDepth: 6, pointer: "/query" });
const body = JSON.stringify({
  title: "Prague",
  artist_id: 7,
  tracks: [1, 2, 3, 4, 5].map((i) => ({ name: `track ${i}`, milliseconds: 1000 * i })),
});

const times = new Map<string, number[]>(variants.map(([n]) => [n, []]));
let sink = 0;
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? variants : [...variants].reverse();
  for (const [name, v] of order) {
    const t0 = performance.now();
    for (let i = 0; i < PER_ROUND; i++) {
      const w = v(node, [JSON.parse(body)]);
      sink += w.statements.length;
    }
    const us = (performance.now() - t0) * 1000 / PER_ROUND;
    times.get(name)!.push(us);
    console.log(`round ${round + 1} ${name} ${us.toFixed(2)} µs per write`);
  }
}
if (sink === 0) throw new Error("nothing was compiled");
const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (const [name, t] of times) {
  console.log(
    `${name}: median ${median(t).toFixed(2)} µs (${Math.min(...t).toFixed(2)}–${
      Math.max(...t).toFixed(2)
    }) per plan + compile`,
  );
}
