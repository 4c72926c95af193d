/**
 * Micro-benchmarks of the pure pipeline stages against the Chinook schema: parse + validate and
 * SQL generation of the 3-level read, and write planning of an invoice with 5 lines.
 * `deno bench -A bench/compile_bench.ts`
 */
import { loadChinook, startCluster } from "../src/db/cluster.ts";
import { introspect } from "../src/db/introspect.ts";
import { parseQuery } from "../src/compile/parse.ts";
import { compileRead } from "../src/compile/sql.ts";
import { planWrite } from "../src/write/plan.ts";

const cluster = await startCluster();
globalThis.addEventListener("unload", () => cluster.stopSync());
const schema = await introspect(await loadChinook(cluster));

const nested = {
  relation: "artist",
  where: ["<=", "artist_id", 20],
  order_by: ["artist_id"],
  join: {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      order_by: ["album_id"],
      join: { tracks: { relation: "track", on: { album_id: "album_id" }, order_by: ["track_id"] } },
    },
  },
};
const invoiceTree = {
  relation: "invoice",
  select: ["invoice_id", "customer_id", "invoice_date", "total", "lines"],
  join: {
    lines: {
      relation: "invoice_line",
      on: { invoice_id: "invoice_id" },
      select: ["invoice_line_id", "track_id", "unit_price", "quantity"],
    },
  },
};
const invoiceData = [{
  customer_id: 1,
  invoice_date: "2026-11-21T10:00:00",
  total: 4.95,
  lines: Array.from({ length: 5 }, (_, i) => ({ track_id: i + 1, unit_price: 0.99, quantity: 1 })),
}];
const opts = { maxDepth: 6, role: "~anonymous" };
const node = parseQuery(schema, nested, opts);
const writeNode = parseQuery(schema, invoiceTree, opts);

Deno.bench("parse + validate the 3-level read", { group: "read" }, () => {
  parseQuery(schema, nested, opts);
});
Deno.bench("compile the 3-level read to SQL", { group: "read" }, () => {
  compileRead(node);
});
Deno.bench("parse + compile the 3-level read", { group: "read", baseline: true }, () => {
  compileRead(parseQuery(schema, nested, opts));
});
Deno.bench("plan the invoice + 5 lines write", { group: "write" }, () => {
  planWrite(writeNode, invoiceData);
});
