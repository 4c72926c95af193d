/**
 * The blacklist: relations and functions that behave as nonexistent. Built-in entries cover the
 * system schemas and dangerous functions (in any schema, since extensions such as dblink install
 * into user schemas); `blacklist.relations.<schema>.<name>` / `blacklist.functions.…` config
 * entries add to them (docs/endpoint.md: configuration only adds to the built-in list): `y` lists a name, `n` means "not
 * listed by this configuration" (it can carve an exception out of the configuration's own
 * patterns, never out of the built-in list; such an entry is reported in `warnings`). A name or
 * schema `*` matches all; a trailing `*` in a name is a prefix match.
 */

type Entries = Map<string, Map<string, boolean>>;

/** Built-in relation entries: schema → names (`*` = whole schema). */
export const BUILTIN_RELATIONS: Record<string, string[]> = {
  pg_catalog: ["*"],
  information_schema: ["*"],
  pg_toast: ["*"],
};

/** Built-in function entries, matched in every schema. */
export const BUILTIN_FUNCTIONS: Record<string, string[]> = {
  pg_catalog: ["*"],
  information_schema: ["*"],
  "*": [
    "pg_sleep*",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_advisory_*",
    "pg_try_advisory_*",
    "pg_read_file*",
    "pg_read_binary_file*",
    "pg_ls_*",
    "pg_stat_file",
    "lo_import",
    "lo_export",
    "dblink*",
    "set_config",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_promote",
    "pg_switch_wal",
    "pg_create_restore_point",
    "pg_backup_*",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_file_write",
    "pg_file_rename",
    "pg_file_unlink",
    "pg_logdir_ls",
    "pg_replication_origin_*",
    "pg_create_*_replication_slot",
    "pg_drop_replication_slot",
  ],
};

function toEntries(src: Record<string, string[]>): Entries {
  const m: Entries = new Map();
  for (const [s, names] of Object.entries(src)) m.set(s, new Map(names.map((n) => [n, true])));
  return m;
}

function merge(target: Entries, cfg: Record<string, Record<string, "y" | "n">>) {
  for (const [s, names] of Object.entries(cfg)) {
    let m = target.get(s);
    if (!m) target.set(s, m = new Map());
    for (const [n, yn] of Object.entries(names)) m.set(n, yn === "y");
  }
}

function lookup(entries: Entries, schema: string, name: string): boolean {
  let verdict = false;
  // Most specific wins: exact name > prefix pattern > `*`; schema-specific before `*` schema.
  for (const s of ["*", schema]) {
    const m = entries.get(s);
    if (!m) continue;
    let best = -1;
    for (const [pat, on] of m) {
      let score = -1;
      if (pat === name) score = 1000;
      else if (pat === "*") score = 0;
      else if (pat.endsWith("*") && name.startsWith(pat.slice(0, -1))) score = pat.length;
      if (score > best) {
        best = score;
        verdict = on;
      }
    }
  }
  return verdict;
}

/** Decides whether relations and functions are blacklisted. */
export class Blacklist {
  #relations: Entries;
  #functions: Entries;
  #builtinRelations: Entries;
  #builtinFunctions: Entries;
  /** Configuration entries `n` that try to remove a built-in entry (which stays). */
  readonly warnings: string[] = [];

  /** Built-ins plus the config's `blacklist` section. */
  constructor(
    cfg: {
      relations?: Record<string, Record<string, "y" | "n">>;
      functions?: Record<string, Record<string, "y" | "n">>;
    } = {},
  ) {
    this.#builtinRelations = toEntries(BUILTIN_RELATIONS);
    this.#builtinFunctions = toEntries(BUILTIN_FUNCTIONS);
    this.#relations = new Map();
    this.#functions = new Map();
    merge(this.#relations, cfg.relations ?? {});
    merge(this.#functions, cfg.functions ?? {});
    for (
      const [kind, entries, builtin] of [
        ["relations", cfg.relations, this.#builtinRelations],
        ["functions", cfg.functions, this.#builtinFunctions],
      ] as const
    ) {
      for (const [s, names] of Object.entries(entries ?? {})) {
        for (const [n, yn] of Object.entries(names)) {
          if (yn === "n" && lookup(builtin, s, n)) {
            this.warnings.push(
              `blacklist.${kind}.${s}.${n} = n has no effect: '${s}.${n}' is on the built-in ` +
                "blacklist, which configuration only adds to",
            );
          }
        }
      }
    }
  }

  /** True when the relation (or, with name `*`, the whole schema) is blacklisted. */
  relation(schema: string, name: string): boolean {
    return lookup(this.#builtinRelations, schema, name) || lookup(this.#relations, schema, name);
  }

  /** True when the function is blacklisted. */
  func(schema: string, name: string): boolean {
    return lookup(this.#builtinFunctions, schema, name) || lookup(this.#functions, schema, name);
  }
}
