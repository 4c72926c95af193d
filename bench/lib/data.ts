/**
 * The benchmark database: Chinook (demo/chinook.sql, via `loadChinook`) scaled up by copying
 * artists, albums, tracks, invoices, invoice lines and playlist memberships `factor` times with
 * consistent keys. Copy k (0-based, copy 0 is the original) shifts every key of a scaled table by
 * k × (original maximum key), and every foreign key into a scaled table by the same amount, so
 * copy k of an album belongs to copy k of its artist and holds copy k of its tracks. Customers,
 * employees, genres, media types and playlists are not copied (scaled rows point at the same
 * ones). Identity sequences are moved past the new maxima so inserts keep working.
 */
import type { Cluster } from "../../src/db/cluster.ts";
import { loadChinook } from "../../src/db/cluster.ts";

/** Scaled tables: name, key column, the key columns of scaled tables it references. */
const SCALED = [
  { table: "artist", key: "artist_id", refs: {} as Record<string, string> },
  { table: "album", key: "album_id", refs: { artist_id: "artist" } },
  { table: "track", key: "track_id", refs: { album_id: "album" } },
  { table: "invoice", key: "invoice_id", refs: {} },
  {
    table: "invoice_line",
    key: "invoice_line_id",
    refs: { invoice_id: "invoice", track_id: "track" },
  },
] as const;

/** Columns of each scaled table in declaration order (demo/chinook.sql). */
const COLUMNS: Record<string, string[]> = {
  artist: ["artist_id", "name"],
  album: ["album_id", "title", "artist_id"],
  track: [
    "track_id",
    "name",
    "album_id",
    "media_type_id",
    "genre_id",
    "composer",
    "milliseconds",
    "bytes",
    "unit_price",
  ],
  invoice: [
    "invoice_id",
    "customer_id",
    "invoice_date",
    "billing_address",
    "billing_city",
    "billing_state",
    "billing_country",
    "billing_postal_code",
    "total",
  ],
  invoice_line: ["invoice_line_id", "invoice_id", "track_id", "unit_price", "quantity"],
};

/** Text columns that get a " #<copy>" suffix in copies, so copies are told apart when read. */
const SUFFIXED: Record<string, string> = { artist: "name", album: "title" };

/** SQL that multiplies the scaled tables by `factor` (run once, right after loading Chinook). */
export function scaleSql(factor: number): string {
  if (!Number.isInteger(factor) || factor < 1) throw new Error(`bad scale factor ${factor}`);
  const out: string[] = [
    "create temp table bench_max as select " +
    SCALED.map((s) => `(select max(${s.key}) from ${s.table}) as ${s.table}`).join(", ") + ";",
  ];
  if (factor > 1) {
    for (const s of SCALED) {
      const cols = COLUMNS[s.table];
      const refs = s.refs as Record<string, string>;
      const exprs = cols.map((c) => {
        if (c === s.key) return `x.${c} + k * m.${s.table}`;
        if (refs[c]) return `x.${c} + k * m.${refs[c]}`;
        if (SUFFIXED[s.table] === c) return `x.${c} || ' #' || (k + 1)`;
        return `x.${c}`;
      });
      out.push(
        `insert into ${s.table} (${cols.join(", ")}) overriding system value ` +
          `select ${exprs.join(", ")} from ${s.table} x, bench_max m, ` +
          `generate_series(1, ${factor - 1}) k where x.${s.key} <= m.${s.table};`,
      );
    }
    out.push(
      "insert into playlist_track (playlist_id, track_id) " +
        "select x.playlist_id, x.track_id + k * m.track from playlist_track x, bench_max m, " +
        `generate_series(1, ${factor - 1}) k where x.track_id <= m.track;`,
    );
  }
  for (const s of SCALED) {
    out.push(
      `select setval(pg_get_serial_sequence('public.${s.table}', '${s.key}'), ` +
        `(select max(${s.key}) from ${s.table}));`,
    );
  }
  out.push("drop table bench_max;");
  return out.join("\n");
}

/**
 * Grants the anonymous role what the nested-write case needs. svc's anonymous requests run as
 * `~anonymous`, which the demo roles only let read; a merge of invoice lines may also update or
 * delete, so those are granted too.
 */
export const WRITE_GRANTS_SQL =
  `grant insert, update, delete on invoice, invoice_line to "~anonymous";`;

/** Row counts of the tables the cases read. */
export type Counts = Record<string, number>;

/** Creates database `name` with scaled Chinook; returns its URI and the row counts. */
export async function loadScaledChinook(
  cluster: Cluster,
  name: string,
  factor: number,
): Promise<{ uri: string; counts: Counts }> {
  const uri = await loadChinook(cluster, name);
  await cluster.psql(scaleSql(factor) + "\n" + WRITE_GRANTS_SQL, name);
  await cluster.psql("vacuum analyze;", name);
  const tables = ["artist", "album", "track", "invoice", "invoice_line", "playlist_track"];
  const text = await cluster.psql(
    `\\pset tuples_only on\n\\pset format unaligned\n` +
      tables.map((t) => `select '${t}', count(*) from ${t};`).join("\n"),
    name,
  );
  const counts: Counts = {};
  for (const line of text.trim().split("\n")) {
    const [t, n] = line.split("|");
    if (t && n) counts[t] = Number(n);
  }
  return { uri, counts };
}
