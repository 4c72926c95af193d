/**
 * A hand-built Schema model (no database) for the pure planner tests: a small Chinook-like
 * database with identity keys, a natural-key link table, a unique natural key and a view.
 */
import type { Column, ForeignKey, Relation, RelationKind, Schema } from "../../src/db/schema.ts";

interface ColSpec {
  type?: string;
  category?: string;
  nullable?: boolean;
  hasDefault?: boolean;
  identity?: null | "always" | "by_default";
  generated?: boolean;
}

let oid = 16000;

function column(name: string, s: ColSpec): Column {
  const type = s.type ?? "integer";
  const category = s.category ??
    (/int|numeric/.test(type) ? "N" : /char|text/.test(type) ? "S" : "U");
  const nullable = s.nullable ?? true;
  const hasDefault = s.hasDefault ?? false;
  const identity = s.identity ?? null;
  const generated = s.generated ?? false;
  return {
    name,
    type,
    typeOid: 0,
    category,
    elementType: null,
    compositeOid: null,
    nullable,
    hasDefault,
    identity,
    generated,
    mandatory: !nullable && !hasDefault && identity === null && !generated,
    comment: null,
  };
}

function relation(
  name: string,
  cols: Record<string, ColSpec>,
  pk: string[],
  opts: { unique?: string[][]; kind?: RelationKind; fks?: [string[], string, string[]][] } = {},
): Relation {
  const columns = Object.entries(cols).map(([n, s]) => column(n, s));
  const kind = opts.kind ?? "table";
  return {
    schema: "public",
    name,
    oid: oid++,
    kind,
    comment: null,
    columns,
    columnMap: new Map(columns.map((c) => [c.name, c])),
    primaryKey: pk,
    unique: opts.unique ?? [],
    foreignKeys: (opts.fks ?? []).map(([c, ref, rc]): ForeignKey => ({
      name: `${name}_${c.join("_")}_fkey`,
      schema: "public",
      relation: name,
      columns: c,
      references: { schema: "public", relation: ref, columns: rc },
    })),
    referencedBy: [],
    insertable: true,
    updatable: kind !== "materialized_view",
    deletable: kind !== "materialized_view",
    computedFields: new Map(),
    selectGrantees: new Set([""]),
    owner: "postgres",
    rowSecurity: false,
    userTriggers: false,
    hasRules: false,
  };
}

const id = { nullable: false, identity: "always" as const };
const text = (n: number, nullable = true): ColSpec => ({
  type: `character varying(${n})`,
  nullable,
});

/** The fake schema. */
export function fakeSchema(): Schema {
  const rels = [
    relation("artist", { artist_id: id, name: text(120) }, ["artist_id"]),
    relation("album", { album_id: id, title: text(160, false), artist_id: { nullable: false } }, [
      "album_id",
    ], {
      fks: [[["artist_id"], "artist", ["artist_id"]]],
    }),
    relation("genre", { genre_id: id, name: text(120) }, ["genre_id"]),
    relation(
      "track",
      {
        track_id: id,
        name: text(200, false),
        album_id: {},
        genre_id: {},
        milliseconds: { nullable: false },
        unit_price: { type: "numeric(10,2)", nullable: false, hasDefault: true },
        created: {
          type: "timestamp without time zone",
          category: "D",
          hasDefault: true,
          nullable: false,
        },
        tags: { type: "text[]", category: "A" },
        meta: { type: "jsonb" },
        name_len: { generated: true },
      },
      ["track_id"],
      {
        fks: [[["album_id"], "album", ["album_id"]], [["genre_id"], "genre", ["genre_id"]]],
      },
    ),
    relation("playlist", { playlist_id: id, name: text(120) }, ["playlist_id"]),
    relation(
      "playlist_track",
      { playlist_id: { nullable: false }, track_id: { nullable: false } },
      [
        "playlist_id",
        "track_id",
      ],
      {
        fks: [[["playlist_id"], "playlist", ["playlist_id"]], [["track_id"], "track", [
          "track_id",
        ]]],
      },
    ),
    relation("tag", { tag_id: id, code: text(20, false), label: text(80) }, ["tag_id"], {
      unique: [["code"]],
    }),
    relation("album_view", { album_id: {}, title: text(160) }, [], { kind: "materialized_view" }),
  ];
  const relations = new Map(rels.map((r) => [`public.${r.name}`, r]));
  for (const r of rels) {
    for (const fk of r.foreignKeys) {
      relations.get(`public.${fk.references.relation}`)!.referencedBy.push(fk);
    }
  }
  return {
    relations,
    functions: new Map(),
    composites: new Map(),
    enums: [],
    typeNames: new Set(["integer", "text", "jsonb"]),
    roles: new Set(["postgres"]),
    memberOf: new Map(),
    schemaUsage: new Map(),
    schemas: ["public"],
    currentUser: "postgres",
    serverVersion: 150000,
    durationMs: 0,
  };
}
