/**
 * The benchmark cases: for each, the svc request body and the hand-written SQL giving the same
 * answer. The SQL yields one row per root row with a single json column `j`; the answer is the
 * JSON array of those values (which is what svc answers). pgbench runs the SQL inside the same
 * transaction svc runs a request in (see ./pgbench.ts), and bench/run.ts checks before loading
 * that the SQL's answer equals svc's (both parsed as JSON).
 */

/** The well-known query the `wellknown` case calls (written to a temp directory). */
export const WELLKNOWN_FILE = {
  name: "bench_album",
  params: { album_id: { type: "integer" } },
  query: {
    relation: "album",
    where: ["=", "album_id", ["$param", "album_id", "integer"]],
    join: {
      artist: { relation: "artist", on: { artist_id: "artist_id" } },
      tracks: { relation: "track", on: { album_id: "album_id" }, order_by: ["track_id"] },
    },
  },
};

/** One benchmark case. */
export interface Case {
  id: string;
  title: string;
  /** POST /svc body. */
  body: unknown;
  /** Hand-written SQL: one json column `j` per root row, in answer order. */
  sql: string;
  /** Wrap the SQL in a savepoint rolled back after it (what svc does for `rollback: true`). */
  rollback?: boolean;
  /** Turns an answer into a comparable value (e.g. blanks generated keys). */
  normalize?: (answer: unknown) => unknown;
  /** Extract the answer from svc's response body (default: the body itself). */
  fromResponse?: (body: unknown) => unknown;
  /**
   * The SQL as the driverless floor (bench/floor.ts) runs it: the request's `where[2]` bound as
   * `$1`, the way svc binds it (so planned per call as svc's is). Cases without one have no floor.
   */
  floorSql?: string;
}

const PK_TRACK = 1234;
const WK_ALBUM = 141;

/** The track columns in table order, as `row_to_json` emits them. */
const TRACK_ROW = "row_to_json(t)";

/**
 * The value a case's `floorSql` binds as `$1`: the request's `where[2]`, where bench/floor.ts reads
 * it from each request's body.
 */
export function floorKey(c: Pick<Case, "body">): unknown {
  return (c.body as { where: unknown[] }).where[2];
}

/** The primary-key read as the floor (bench/floor.ts) runs it: the key is `$1`. */
export const PK_FLOOR_SQL = `select ${TRACK_ROW} as j from track t where t.track_id = $1`;

/** The nested read's hand-written SQL, the bound of `artist_id` as `$1` (20 in the case). */
const NESTED_READ_SQL =
  "select json_build_object('artist_id', ar.artist_id, 'name', ar.name, 'albums', " +
  "coalesce((select json_agg(json_build_object('album_id', al.album_id, 'title', al.title, " +
  "'artist_id', al.artist_id, 'tracks', coalesce((select json_agg(t order by t.track_id) " +
  "from track t where t.album_id = al.album_id), '[]')) order by al.album_id) " +
  "from album al where al.artist_id = ar.artist_id), '[]')) as j " +
  "from artist ar where ar.artist_id <= $1 order by ar.artist_id";

/** The 20 artists → albums → tracks read (also run against PostGraphile). */
export const NESTED_READ_BODY = {
  relation: "artist",
  where: ["<=", "artist_id", 20],
  order_by: ["artist_id"],
  join: {
    albums: {
      relation: "album",
      on: { artist_id: "artist_id" },
      order_by: ["album_id"],
      join: {
        tracks: { relation: "track", on: { album_id: "album_id" }, order_by: ["track_id"] },
      },
    },
  },
};

const INVOICE_LINES = [
  { track_id: 1, unit_price: 0.99, quantity: 1 },
  { track_id: 2, unit_price: 0.99, quantity: 2 },
  { track_id: 3, unit_price: 0.99, quantity: 1 },
  { track_id: 4, unit_price: 0.99, quantity: 3 },
  { track_id: 5, unit_price: 1.99, quantity: 1 },
];

const INVOICE = {
  customer_id: 7,
  invoice_date: "2026-11-21T10:00:00",
  billing_address: "Klanova 9/506",
  billing_city: "Prague",
  billing_country: "Czech Republic",
  billing_postal_code: "14700",
  total: 9.94,
};

/** Blanks invoice_id / invoice_line_id (generated, so different on every run). */
function blankKeys(answer: unknown): unknown {
  if (Array.isArray(answer)) return answer.map(blankKeys);
  if (answer !== null && typeof answer === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(answer)) {
      out[k] = k === "invoice_id" || k === "invoice_line_id"
        ? (v === null ? null : "<key>")
        : blankKeys(v);
    }
    return out;
  }
  return answer;
}

/** Checks that each line carries its invoice's key, then blanks the keys. */
function normalizeWrite(answer: unknown): unknown {
  if (Array.isArray(answer)) {
    for (const inv of answer as { invoice_id: unknown; lines?: { invoice_id: unknown }[] }[]) {
      for (const l of inv.lines ?? []) {
        if (l.invoice_id !== inv.invoice_id) {
          return { error: "a line's invoice_id differs from its invoice's", answer };
        }
      }
    }
  }
  return blankKeys(answer);
}

/** SQL `values` rows of the invoice lines. */
const LINE_VALUES = INVOICE_LINES.map((l) => `(${l.track_id}, ${l.unit_price}, ${l.quantity})`)
  .join(", ");

/** The cases that run under load, in order. */
export const CASES: Case[] = [
  {
    id: "pk_read",
    title: "single row by primary key",
    body: { relation: "track", where: ["=", "track_id", PK_TRACK] },
    sql: `select ${TRACK_ROW} as j from track t where t.track_id = ${PK_TRACK}`,
    floorSql: PK_FLOOR_SQL,
  },
  {
    id: "nested_read",
    title: "3-level nested read (20 artists → albums → tracks)",
    body: NESTED_READ_BODY,
    sql: NESTED_READ_SQL.replace("$1", String(floorKey({ body: NESTED_READ_BODY }))),
    floorSql: NESTED_READ_SQL,
  },
  {
    id: "nested_write",
    title: "nested write: invoice + 5 lines, rolled back",
    body: {
      query: {
        relation: "invoice",
        select: [
          "invoice_id",
          "customer_id",
          "invoice_date",
          "billing_address",
          "billing_city",
          "billing_country",
          "billing_postal_code",
          "total",
          "lines",
        ],
        join: {
          lines: {
            relation: "invoice_line",
            on: { invoice_id: "invoice_id" },
            select: ["invoice_line_id", "invoice_id", "track_id", "unit_price", "quantity"],
            order_by: ["invoice_line_id"],
          },
        },
      },
      data: [{ ...INVOICE, lines: INVOICE_LINES }],
      rollback: true,
    },
    rollback: true,
    sql: "with i as (insert into invoice (customer_id, invoice_date, billing_address, " +
      "billing_city, billing_country, billing_postal_code, total) values " +
      `(${INVOICE.customer_id}, '${INVOICE.invoice_date}', '${INVOICE.billing_address}', ` +
      `'${INVOICE.billing_city}', '${INVOICE.billing_country}', ` +
      `'${INVOICE.billing_postal_code}', ${INVOICE.total}) returning *), ` +
      "l as (insert into invoice_line (invoice_id, track_id, unit_price, quantity) " +
      `select i.invoice_id, v.track_id, v.unit_price, v.quantity from i, (values ${LINE_VALUES}) ` +
      "as v (track_id, unit_price, quantity) returning *) " +
      "select json_build_object('invoice_id', i.invoice_id, 'customer_id', i.customer_id, " +
      "'invoice_date', i.invoice_date, 'billing_address', i.billing_address, " +
      "'billing_city', i.billing_city, 'billing_country', i.billing_country, " +
      "'billing_postal_code', i.billing_postal_code, 'total', i.total, 'lines', (select json_agg(json_build_object(" +
      "'invoice_line_id', l.invoice_line_id, 'invoice_id', l.invoice_id, 'track_id', l.track_id, " +
      "'unit_price', l.unit_price, 'quantity', l.quantity) order by l.invoice_line_id) from l)) " +
      "as j from i",
    normalize: normalizeWrite,
  },
  {
    id: "wellknown",
    title: "well-known query with a parameter (album + artist + tracks)",
    body: { wellknown: WELLKNOWN_FILE.name, params: { album_id: WK_ALBUM } },
    sql: "select json_build_object('album_id', al.album_id, 'title', al.title, 'artist_id', " +
      "al.artist_id, 'artist', (select row_to_json(ar) from artist ar where ar.artist_id = " +
      "al.artist_id), 'tracks', coalesce((select json_agg(t order by t.track_id) from track t " +
      `where t.album_id = al.album_id), '[]')) as j from album al where al.album_id = ${WK_ALBUM}`,
  },
  {
    id: "big_read",
    title: "100,000-row read (playlist_track → track)",
    body: {
      relation: "playlist_track",
      order_by: ["playlist_id", "track_id"],
      limit: 100000,
      join: {
        track: {
          relation: "track",
          on: { track_id: "track_id" },
          select: ["name", "album_id", "milliseconds", "unit_price"],
        },
      },
    },
    sql: "select json_build_object('playlist_id', pt.playlist_id, 'track_id', pt.track_id, " +
      "'track', json_build_object('name', t.name, 'album_id', t.album_id, 'milliseconds', " +
      "t.milliseconds, 'unit_price', t.unit_price)) as j from playlist_track pt " +
      "join track t on t.track_id = pt.track_id order by pt.playlist_id, pt.track_id limit 100000",
  },
];

/** The nested read as GraphQL for PostGraphile v5 (amber preset naming). */
export const NESTED_READ_GRAPHQL = `{
  allArtists(first: 20, orderBy: ARTIST_ID_ASC) {
    nodes {
      artistId
      name
      albumsByArtistId(orderBy: ALBUM_ID_ASC) {
        nodes {
          albumId
          title
          artistId
          tracksByAlbumId(orderBy: TRACK_ID_ASC) {
            nodes {
              trackId
              name
              albumId
              mediaTypeId
              genreId
              composer
              milliseconds
              bytes
              unitPrice
            }
          }
        }
      }
    }
  }
}`;

/**
 * Turns PostGraphile's answer into svc's shape (snake_case keys, connections → arrays, BigFloat
 * strings → numbers) so that both answers can be compared.
 */
export function graphqlToSvcShape(body: unknown): unknown {
  const rename: Record<string, string> = { albumsByArtistId: "albums", tracksByAlbumId: "tracks" };
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v === null || typeof v !== "object") return v;
    const o = v as Record<string, unknown>;
    if ("nodes" in o && Object.keys(o).length === 1) return walk(o.nodes);
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(o)) {
      const key = rename[k] ?? k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
      out[key] = key === "unit_price" && typeof x === "string" ? Number(x) : walk(x);
    }
    return out;
  };
  const data = (body as { data?: { allArtists?: unknown } }).data;
  return walk(data?.allArtists ?? body);
}

/** Key-order-insensitive deep equality of JSON values; returns the first difference or null. */
export function jsonDiff(a: unknown, b: unknown, path = "$"): string | null {
  if (a === b) return null;
  if (typeof a === "number" && typeof b === "number") {
    return Math.abs(a - b) < 1e-9 ? null : `${path}: ${a} ≠ ${b}`;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return `${path}: array length ${a.length} ≠ ${b.length}`;
    for (let i = 0; i < a.length; i++) {
      const d = jsonDiff(a[i], b[i], `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (
    a !== null && b !== null && typeof a === "object" && typeof b === "object" &&
    !Array.isArray(a) && !Array.isArray(b)
  ) {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    if (ka.join(",") !== kb.join(",")) return `${path}: keys [${ka}] ≠ [${kb}]`;
    for (const k of ka) {
      const d = jsonDiff(
        (a as Record<string, unknown>)[k],
        (b as Record<string, unknown>)[k],
        `${path}.${k}`,
      );
      if (d) return d;
    }
    return null;
  }
  const show = (v: unknown) => JSON.stringify(v)?.slice(0, 80);
  return `${path}: ${show(a)} ≠ ${show(b)}`;
}
