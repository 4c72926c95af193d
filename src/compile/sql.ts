/**
 * The SQL generator for reads: one parameterized statement per read, producing one row per root
 * row with a single column `j` (a json object, keys in select order), assembled entirely in
 * PostgreSQL. A row is a record: a subquery selects its items under their keys as column names
 * and `to_json` / `json_agg` turn its rows into JSON (json_build_object only where a key cannot be
 * a column name). Incoming joins are correlated subqueries aggregated with `json_agg` (an empty
 * array when nothing matches); outgoing joins are correlated subqueries yielding one object or
 * null. Every value is a bind parameter sent as text (`$n::text::<type>`), so the statement's
 * parameter types never depend on the client library's type inference; every identifier and key
 * is quoted with `ident()`. The SQL text depends only on the query's shape and keys (see
 * {@link shapeKey}).
 */
import { isExactNumber } from "../formats/json.ts";
import { type Column, ident, identifierBytes, MAX_IDENTIFIER_BYTES } from "../db/schema.ts";
import { SvcError } from "../svc_error.ts";
import { paramsError, WIRE_MAX_PARAMS } from "../db/bind_limit.ts";
import type {
  CompiledRead,
  CompileOptions,
  Expr,
  JoinNode,
  LiteralValue,
  OrderTerm,
  RelationNode,
  SelectItem,
  Statement,
} from "./ast.ts";
import { argumentOf, sourceColumns } from "./parse.ts";

/** json_build_object takes at most 100 arguments; wider objects use json_object_agg. */
const MAX_BUILD_PAIRS = 50;

/** A select list holds at most 1,664 entries; wider rows are built as objects. */
const MAX_RECORD_COLUMNS = 1600;

/**
 * Whether `key` can be a record's column name, the JSON key `to_json` then writes: not empty (a
 * zero-length quoted identifier is an error), no NUL (statement text is NUL-terminated on the
 * wire), and short enough that PostgreSQL keeps it whole (it truncates longer names). Other keys
 * are bound as text values of json_build_object.
 */
function recordKey(key: string): boolean {
  return key.length > 0 && !key.includes("\0") && key.length <= MAX_IDENTIFIER_BYTES &&
    identifierBytes(key) <= MAX_IDENTIFIER_BYTES;
}

/** The output items of a node's rows (write-only items are left out). */
function outputs(node: RelationNode): SelectItem[] {
  return node.select.filter((it) => it.mode !== "set");
}

/**
 * The whole row of the relation or subquery `alias` as a value: `"alias".*`. A bare `"alias"` would
 * name a column instead where the relation has one of that name (a key of a record can be
 * anything).
 */
function wholeRow(alias: string): string {
  return `${ident(alias)}.*`;
}

/** The alias of a node's row record: `"<alias>_r"`, never a relation's alias (`t<n>`). */
function recordAlias(node: RelationNode): string {
  return ident(`${node.sqlAlias}_r`);
}

/**
 * Whether the output is exactly the relation's own columns, in table order, under their own
 * names: then `alias.*` is the row's record (and `row_to_json(alias.*)` its JSON).
 */
function isWholeRow(node: RelationNode, items: SelectItem[]): boolean {
  if (node.source.kind !== "relation") return false;
  const cols = node.source.relation.columns;
  return items.length === cols.length && items.every((it, i) => {
    if (it.name !== cols[i].name || it.value.kind !== "expr") return false;
    const e = it.value.expr;
    return e.kind === "column" && e.scope === node.sqlAlias && e.column.name === cols[i].name;
  });
}

/**
 * The most bytes the JSON text of one value of `column` can take (the value's own text, quotes
 * and escapes included), or null when its type does not bound it. Only built-in types whose JSON
 * form has a known longest text: a domain or any other type is unbounded. Generous on purpose.
 */
function valueBound(column: Column): number | null {
  switch (column.typeOid) {
    case 16: // boolean
    case 21: // smallint
    case 23: // integer
    case 20: // bigint
    case 26: // oid
      return 24;
    case 700: // real
    case 701: // double precision
    case 2950: // uuid
      return 48;
    case 1082: // date
    case 1083: // time
    case 1266: // time with time zone
    case 1114: // timestamp
    case 1184: // timestamp with time zone
      return 80;
    case 1700: { // numeric(p,s): at most p or s digits, a sign, a point, a zero; or a quoted NaN
      const m = /^numeric\((\d+)(?:,(\d+))?\)$/.exec(column.type);
      return m ? Number(m[1]) + Number(m[2] ?? 0) + 16 : null;
    }
    case 1042: // character(n)
    case 1043: { // character varying(n): n characters, each at most 6 bytes once escaped
      const m = /^(?:character|character varying)\((\d+)\)$/.exec(column.type);
      return m ? 6 * Number(m[1]) + 2 : null;
    }
  }
  return null;
}

/**
 * The most bytes one row's JSON object of `node` can take whatever the data (keys, spacing of
 * json_build_object and json_object_agg, values), or null when something in it is unbounded (an
 * incoming join's array, text, json, arrays, expressions). An outgoing join is its object or null.
 */
function rowBound(node: RelationNode): number | null {
  let total = 4;
  for (const it of node.select) {
    if (it.mode === "set") continue;
    let value: number | null = null;
    if (it.value.kind === "join") {
      value = it.value.join.direction === "outgoing" ? rowBound(it.value.join.node) : null;
    } else if (it.value.expr.kind === "column") {
      value = valueBound(it.value.expr.column);
    }
    if (value === null) return null;
    // The key: each UTF-16 unit at most 6 bytes once escaped, its quotes, ` : ` and `, `.
    total += 6 * it.name.length + 7 + Math.max(value, 4);
  }
  return total;
}

/** SQL of the binary operators that compile to `(a <op> b)`. */
const BINARY: Record<string, string> = {
  "=": "=",
  "<>": "<>",
  "<": "<",
  "<=": "<=",
  ">": ">",
  ">=": ">=",
  is_distinct_from: "IS DISTINCT FROM",
  is_not_distinct_from: "IS NOT DISTINCT FROM",
  "@>": "@>",
  "<@": "<@",
  "&&": "&&",
  "+": "+",
  "-": "-",
  "*": "*",
  "/": "/",
  "||": "||",
};
/** Pattern operators: the pattern is text. */
const PATTERN: Record<string, string> = {
  like: "LIKE",
  ilike: "ILIKE",
  not_like: "NOT LIKE",
  not_ilike: "NOT ILIKE",
  "~": "~",
  "~*": "~*",
};
const BOOLEAN_RESULT = new Set([
  ...Object.keys(BINARY).filter((o) => !["+", "-", "*", "/", "||"].includes(o)),
  ...Object.keys(PATTERN),
  "and",
  "or",
  "not",
  "in",
  "not_in",
  "between",
  "is_null",
  "is_not_null",
  "fts",
]);

/**
 * Compiles a parsed read into its statement (and, with `opts.count`, a count statement).
 * With `opts.rootKeys` the root's where, order_by, distinct_on, limit and offset are replaced by
 * the given key tuples, returned in their order (the write read-back).
 */
export function compileRead(node: RelationNode, opts: CompileOptions = {}): CompiledRead {
  const rows = new Compiler(node, opts.params).rootSelect(node, opts);
  const out: CompiledRead = { rows };
  if (opts.count) out.count = new Compiler(node, opts.params).countSelect(node);
  return out;
}

/** The relation a write's answer select reads its inserted rows from (see {@link returningRead}). */
export const RETURNED = "svc_w";

/**
 * A write's answer built over the rows its INSERT returned, when the select allows it: every
 * output item a plain column of the root relation (no join, computed field, cast or other
 * expression). The select reads {@link RETURNED} (a CTE of the returned `columns`) under the
 * root's alias, so each row's JSON is built by the same expression as the read-back's — the same
 * keys, in the same order, the same rendering of every value. Its key names are bound from
 * `$<firstParam>` on (the INSERT takes the parameters before). Null when the select needs more.
 */
export function returningRead(
  node: RelationNode,
  firstParam: number,
): { columns: string[]; rows: Statement } | null {
  if (node.source.kind !== "relation" || node.joins.length > 0) return null;
  const columns: string[] = [];
  for (const it of node.select) {
    if (it.mode === "set") continue;
    if (it.value.kind !== "expr") return null;
    const e = it.value.expr;
    if (e.kind !== "column" || e.scope !== node.sqlAlias) return null;
    if (!columns.includes(e.column.name)) columns.push(e.column.name);
  }
  if (columns.length === 0) return null;
  const c = new Compiler(node);
  for (let i = 1; i < firstParam; i++) c.params.push(null);
  const sql = c.rows(node, `FROM ${ident(RETURNED)} AS ${ident(node.sqlAlias)}`, false).sql;
  const rows = c.read(sql, node, false);
  return { columns, rows: { ...rows, params: rows.params.slice(firstParam - 1) } };
}

/**
 * The `where` of `node` as a condition over its alias (`node.sqlAlias`), its values bound as `$1`,
 * `$2`, … (the scope of a write root's delete).
 */
export function compileCondition(
  node: RelationNode,
  params?: Record<string, unknown>,
): Statement {
  if (!node.where) throw new SvcError("INTERNAL", "compileCondition without where");
  const c = new Compiler(node, params);
  return c.statement(c.condition(node.where));
}

/**
 * A canonical string of the query's shape: the tree without literal values (only their SQL
 * type class). Two reads with the same shapeKey and options compile to the same SQL text.
 */
export function shapeKey(node: RelationNode, opts: CompileOptions = {}): string {
  return JSON.stringify([
    nodeShape(node),
    opts.count === true,
    opts.rootKeys?.columns ?? null,
  ]);
}

/** Compilation state of one statement: its bind parameters and the tree's parent links. */
class Compiler {
  readonly params: (string | null)[] = [];
  readonly parents = new Map<RelationNode, RelationNode>();
  readonly memo = new Map<Expr, string>();

  constructor(root: RelationNode, private readonly values?: Record<string, unknown>) {
    const walk = (n: RelationNode) => {
      for (const j of n.joins) {
        this.parents.set(j.node, n);
        walk(j.node);
      }
    };
    walk(root);
  }

  /** Adds a bind parameter sent as text and converted to `type`. */
  bind(value: string | null, type: string): string {
    this.params.push(value);
    const p = `$${this.params.length}::text`;
    return type === "text" ? p : `${p}::${type}`;
  }

  statement(sql: string): Statement {
    // The hard limit here, before the statement goes anywhere; pg.query.max_params is checked
    // where every statement is sent (src/db/run_as.ts).
    if (this.params.length > WIRE_MAX_PARAMS) {
      throw paramsError(this.params.length, WIRE_MAX_PARAMS)!;
    }
    return { sql, params: this.params };
  }

  rootSelect(node: RelationNode, opts: CompileOptions): Statement {
    if (opts.rootKeys) return this.read(this.rootKeysSelect(node, opts), node, false);
    const from = [`FROM ${this.from(node)}`];
    if (node.where) from.push(`WHERE ${this.condition(node.where)}`);
    from.push(...this.tail(node));
    const sorted = node.orderBy.length > 0 || node.limit !== null || node.offset !== null ||
      node.distinctOn.length > 0;
    const { sql, outerOffset } = this.rows(node, from.join(" "), sorted, this.distinct(node));
    return this.read(sql, node, outerOffset && node.offset !== null);
  }

  /**
   * `SELECT <one row's JSON> AS "j" <rest>` (rest: FROM … WHERE … ORDER BY …), the row built as a
   * record where it can be: the items under their keys in a subquery holding `rest`, turned into
   * JSON by `to_json` above it. That costs PostgreSQL less than json_build_object, and a sorted,
   * limited read builds JSON only for the rows it returns (docs/performance.md, "Rows as
   * records"). `sorted` tells whether `rest` sorts, limits or picks rows (then the subquery is
   * kept as it is); a whole row that is not is `row_to_json(alias.*)`, which saves PostgreSQL the
   * subquery's row (≈ 2 µs of a primary-key read). `distinct` is its DISTINCT ON clause, if any.
   * `outerOffset` tells whether `rest` stayed in the outer select (its OFFSET, if any, then
   * fences it).
   */
  rows(
    node: RelationNode,
    rest: string,
    sorted: boolean,
    distinct = "",
  ): { sql: string; outerOffset: boolean } {
    const items = outputs(node);
    if (!sorted && isWholeRow(node, items)) {
      return {
        sql: `SELECT row_to_json(${wholeRow(node.sqlAlias)}) AS "j" ${rest}`,
        outerOffset: true,
      };
    }
    const list = this.record(node, items);
    if (list === null) {
      return {
        sql: `SELECT ${distinct}${this.object(node)} AS "j" ${rest}`,
        outerOffset: true,
      };
    }
    const r = recordAlias(node);
    return {
      sql: `SELECT to_json(${r}.*) AS "j" FROM (SELECT ${distinct}${list} ${rest}) AS ${r}`,
      outerOffset: false,
    };
  }

  /**
   * The select list of one output row as a record: every item under its key as its column name
   * (the relation's own columns as `alias.*` for a whole row), or null when some key cannot be a
   * column name ({@link recordKey}) or there is no item.
   */
  record(node: RelationNode, items: SelectItem[]): string | null {
    if (isWholeRow(node, items)) return wholeRow(node.sqlAlias);
    if (items.length === 0 || items.length > MAX_RECORD_COLUMNS) return null;
    if (!items.every((it) => recordKey(it.name))) return null;
    return items.map((it) => `${this.item(it)} AS ${ident(it.name)}`).join(", ");
  }

  /** A read's rows: the statement with its row bound and whether it has an OFFSET. */
  read(sql: string, node: RelationNode, hasOffset: boolean): Statement {
    const out = this.statement(sql);
    out.hasOffset = hasOffset;
    const bound = rowBound(node);
    if (bound !== null) out.maxRowBytes = bound;
    return out;
  }

  rootKeysSelect(node: RelationNode, opts: CompileOptions): string {
    const keys = opts.rootKeys!;
    if (keys.columns.length === 0) throw new SvcError("INTERNAL", "rootKeys without columns");
    const cols = sourceColumns(node.source);
    const arrays = keys.columns.map((name, i) => {
      const col = cols.find((c) => c.name === name);
      if (!col) throw new SvcError("INTERNAL", `rootKeys: unknown column '${name}'`);
      if (keys.settings !== undefined) {
        return `current_setting(${quoteLiteral(keys.settings[i])})::text[]::${
          hintType(col.type)
        }[]`;
      }
      const values = keys.rows.map((r) => r[i]);
      return this.bind(pgArray(values), `${hintType(col.type)}[]`);
    });
    if (keys.settings !== undefined && keys.single) {
      // One root row: its key is the settings' one element, an index lookup with nothing to order.
      // The element is cast, not the array: no per-element array coercion to set up per execution.
      const eq = keys.columns.map((c, i) => {
        const type = hintType(cols.find((col) => col.name === c)!.type);
        return `${ident(node.sqlAlias)}.${ident(c)} = ` +
          `(current_setting(${quoteLiteral(keys.settings![i])})::text[])[1]::${type}`;
      });
      return this.rows(node, `FROM ${this.from(node)} WHERE ${eq.join(" AND ")}`, false).sql;
    }
    const names = keys.columns.map((_, i) => `"k${i}"`);
    const on = keys.columns.map((c, i) => `${ident(node.sqlAlias)}.${ident(c)} = "k".${names[i]}`);
    // Keys from a setting are unknown to the planner: an implied `= ANY(…)` per column lets it
    // use the key's index instead of hashing the whole relation. The array is a sub-select (an
    // init plan, computed once): as a plain expression a sequential scan parsed the whole setting
    // again for every row it met, quadratic in the rows written (found by a hostile probe).
    const any = keys.settings === undefined ? "" : ` WHERE ${
      keys.columns.map((c, i) => {
        // `ANY((SELECT …))` alone would read as ANY over a sub-query's rows: the cast makes it
        // an array expression.
        const type = hintType(cols.find((col) => col.name === c)!.type);
        return `${ident(node.sqlAlias)}.${ident(c)} = ANY((SELECT ${arrays[i]})::${type}[])`;
      }).join(" AND ")
    }`;
    return this.rows(
      node,
      `FROM ${this.from(node)} ` +
        `JOIN unnest(${arrays.join(", ")}) WITH ORDINALITY AS "k"(${names.join(", ")}, "ord") ` +
        `ON ${on.join(" AND ")}${any} ORDER BY "k"."ord"`,
      true,
    ).sql;
  }

  countSelect(node: RelationNode): Statement {
    const where = node.where ? ` WHERE ${this.condition(node.where)}` : "";
    if (node.distinctOn.length === 0) {
      return this.statement(`SELECT count(*) AS "count" FROM ${this.from(node)}${where}`);
    }
    return this.statement(
      `SELECT count(*) AS "count" FROM (SELECT ${this.distinct(node)}1 FROM ${
        this.from(node)
      }${where}) AS "c"`,
    );
  }

  /** DISTINCT ON clause (with trailing space) or "". */
  distinct(node: RelationNode): string {
    if (node.distinctOn.length === 0) return "";
    return `DISTINCT ON (${node.distinctOn.map((e) => this.shared(e)).join(", ")}) `;
  }

  /**
   * An expression compiled once per statement: DISTINCT ON and ORDER BY share the same Expr
   * objects and must show PostgreSQL the same text (the same placeholders).
   */
  shared(e: Expr): string {
    let s = this.memo.get(e);
    if (s === undefined) this.memo.set(e, s = this.expr(e, null));
    return s;
  }

  /** ORDER BY / LIMIT / OFFSET clauses. */
  tail(node: RelationNode): string[] {
    const parts: string[] = [];
    if (node.orderBy.length) {
      parts.push(`ORDER BY ${node.orderBy.map((t) => this.order(t)).join(", ")}`);
    }
    if (node.limit !== null) parts.push(`LIMIT ${this.bind(String(node.limit), "bigint")}`);
    if (node.offset !== null) parts.push(`OFFSET ${this.bind(String(node.offset), "bigint")}`);
    return parts;
  }

  order(t: OrderTerm): string {
    const nulls = t.nulls ? ` NULLS ${t.nulls.toUpperCase()}` : "";
    return `${this.shared(t.expr)} ${t.dir.toUpperCase()}${nulls}`;
  }

  /** The FROM item of a node: its relation or function call, aliased. */
  from(node: RelationNode): string {
    const alias = ident(node.sqlAlias);
    const src = node.source;
    if (src.kind === "relation") {
      return `${ident(src.relation.schema)}.${ident(src.relation.name)} AS ${alias}`;
    }
    const variadic: string[] = [];
    const args = src.args.flatMap((a, i) => {
      const decl = argumentOf(src.func, a, i);
      const hint = decl && !decl.type.startsWith("any") ? hintType(decl.type) : null;
      const value = a.value.kind === "literal" && hint !== null
        ? this.literal(a.value.value, hint, true)
        : this.expr(a.value, hint);
      const named = a.name === null ? value : `${ident(a.name)} => ${value}`;
      if (decl?.mode !== "variadic") return [named];
      // PostgreSQL's syntax: `VARIADIC "xs" => …` (the keyword precedes the named notation), and
      // the VARIADIC argument comes last, wherever a named one stood in the request.
      variadic.push(`VARIADIC ${named}`);
      return [];
    });
    const call = `${ident(src.func.schema)}.${ident(src.func.name)}(${
      [...args, ...variadic].join(", ")
    })`;
    const scalar = src.func.returns.columns === null;
    return `${call} AS ${alias}${scalar ? `(${ident(src.columns[0].name)})` : ""}`;
  }

  /**
   * The json object of one row of `node`, keys bound in select order: the form of a row whose
   * keys cannot all be column names ({@link recordKey}).
   */
  object(node: RelationNode): string {
    const pairs = outputs(node).map((it) => [this.bind(it.name, "text"), this.item(it)]);
    if (pairs.length <= MAX_BUILD_PAIRS) {
      return `json_build_object(${pairs.map(([k, v]) => `${k}, ${v}`).join(", ")})`;
    }
    const rows = pairs.map(([k, v], i) => `(${i}, ${k}, to_json(${v}))`);
    return `(SELECT json_object_agg("kv"."k", "kv"."v" ORDER BY "kv"."n") FROM (VALUES ${
      rows.join(", ")
    }) AS "kv"("n", "k", "v"))`;
  }

  item(it: SelectItem): string {
    if (it.value.kind === "join") return this.join(it.value.join);
    const e = it.value.expr;
    if (e.kind === "computed" && e.set) {
      return `(SELECT coalesce(json_agg("x".*), '[]'::json) FROM ${ident(e.schema)}.${
        ident(e.fn)
      }(${wholeRow(e.scope)}) AS "x")`;
    }
    return this.expr(e, null);
  }

  /**
   * A joined relation's value: an array (incoming) or an object or null (outgoing), from a
   * subquery that filters, orders and limits its rows, each a record (an object where a key cannot
   * be a column name). json_agg takes the rows in the subquery's order (nothing between the two
   * reorders them); the subquery's Sort costs less than an ordered aggregate's own, and JSON is
   * built only for the rows a limit keeps (docs/performance.md, "Rows as records").
   */
  join(j: JoinNode): string {
    const node = j.node;
    const list = this.record(node, outputs(node));
    const r = recordAlias(node);
    const sub = [
      `SELECT ${this.distinct(node)}${list ?? `${this.object(node)} AS "j"`}`,
      this.fromWhere(j),
      ...this.tail(node),
    ].join(" ");
    // The row's JSON (outgoing) and json_agg's argument (incoming, a record as it is).
    const row = list === null ? `${r}."j"` : `to_json(${r}.*)`;
    if (j.direction === "outgoing") return `(SELECT ${row} FROM (${sub}) AS ${r})`;
    const arg = list === null ? row : `${r}.*`;
    return `(SELECT coalesce(json_agg(${arg}), '[]'::json) FROM (${sub}) AS ${r})`;
  }

  /** `FROM <joined> WHERE <join condition> [AND <joined where>]`. */
  fromWhere(j: JoinNode): string {
    const node = j.node;
    const parent = this.parents.get(node);
    if (!parent) throw new SvcError("INTERNAL", `join '${j.key}' has no parent`);
    const conds = j.on.map(([c, pc]) =>
      `${ident(node.sqlAlias)}.${ident(c)} = ${ident(parent.sqlAlias)}.${ident(pc)}`
    );
    if (node.where) conds.push(this.condition(node.where));
    return `FROM ${this.from(node)} WHERE ${conds.join(" AND ")}`;
  }

  condition(e: Expr): string {
    return this.expr(e, "boolean");
  }

  /** Compiles an expression; `hint` types untyped literals (strings, null) in its position. */
  expr(e: Expr, hint: string | null): string {
    switch (e.kind) {
      case "column":
        return `${ident(e.scope)}.${ident(e.column.name)}`;
      case "computed": {
        const call = `${ident(e.schema)}.${ident(e.fn)}(${wholeRow(e.scope)})`;
        return e.set ? `ARRAY(SELECT ${call})` : call;
      }
      case "joined":
        return `(SELECT ${ident(e.join.node.sqlAlias)}.${ident(e.column.name)} ${
          this.fromWhere(e.join)
        })`;
      case "field":
        return `(${this.expr(e.expr, null)}).${ident(e.field)}`;
      case "literal":
        return this.literal(e.value, hint, false);
      case "array":
        return this.array(e.items, hint);
      case "cast":
        if (e.expr.kind === "literal") return this.literal(e.expr.value, e.type, true);
        return `(${this.expr(e.expr, null)})::${e.type}`;
      case "agg":
        return this.agg(e);
      case "param":
        return this.bind(encodeParam(this.values?.[e.name], e.cast), e.cast);
      case "op":
        return this.op(e.op, e.args);
    }
  }

  /** A literal as a bind parameter: typed by `hint` (strings, null; all when forced). */
  literal(v: LiteralValue, hint: string | null, force: boolean): string {
    const type = force && hint !== null ? hint : literalType(v, hint);
    return this.bind(v === null ? null : isExactNumber(v) ? v.rawJSON : String(v), type);
  }

  array(items: Expr[], hint: string | null): string {
    const elem = hint?.endsWith("[]") ? hint.slice(0, -2) : firstType(items);
    if (items.length === 0) return `ARRAY[]::${elem ?? "text"}[]`;
    return `ARRAY[${items.map((i) => this.expr(i, elem)).join(", ")}]`;
  }

  agg(e: Extract<Expr, { kind: "agg" }>): string {
    const arg = e.expr ? this.expr(e.expr, null) : "*";
    const filter = e.filter ? ` FILTER (WHERE ${this.condition(e.filter)})` : "";
    return `(SELECT ${e.fn}(${arg})${filter} ${this.fromWhere(e.join)})`;
  }

  op(op: string, args: Expr[]): string {
    if (op === "and" || op === "or") {
      return `(${args.map((a) => this.condition(a)).join(` ${op.toUpperCase()} `)})`;
    }
    if (op === "not") return `(NOT ${this.condition(args[0])})`;
    if (op === "is_null") return `(${this.expr(args[0], null)} IS NULL)`;
    if (op === "is_not_null") return `(${this.expr(args[0], null)} IS NOT NULL)`;
    if (Object.hasOwn(BINARY, op)) {
      const [a, b] = args;
      return `(${this.expr(a, typeOf(b))} ${BINARY[op]} ${this.expr(b, typeOf(a))})`;
    }
    if (Object.hasOwn(PATTERN, op)) {
      return `(${this.expr(args[0], "text")} ${PATTERN[op]} ${this.expr(args[1], "text")})`;
    }
    if (op === "->" || op === "->>") {
      return `(${this.expr(args[0], "jsonb")} ${op} ${this.expr(args[1], "text")})`;
    }
    if (op === "in" || op === "not_in") return this.inList(op, args);
    if (op === "between") {
      const [lo, a, hi] = args;
      const t = typeOf(a) ?? typeOf(lo) ?? typeOf(hi);
      return `(${this.expr(a, t)} BETWEEN ${this.expr(lo, t)} AND ${this.expr(hi, t)})`;
    }
    if (op === "fts") {
      const [col, q, cfg] = args;
      const vector = this.expr(col, "tsvector");
      const query = cfg
        ? `${this.expr(cfg, "regconfig")}, ${this.expr(q, "text")}`
        : this.expr(q, "text");
      return `(${vector} @@ websearch_to_tsquery(${query}))`;
    }
    throw new SvcError("INTERNAL", `unknown operator '${op}'`);
  }

  /** `a IN (v…)`; a single array-valued param, `arr` or cast compiles to `a = ANY(v)`. */
  inList(op: string, args: Expr[]): string {
    const [a, ...values] = args;
    const only = values.length === 1 ? values[0] : null;
    const arrayType = only && ["param", "array", "cast"].includes(only.kind) ? typeOf(only) : null;
    if (only && arrayType?.endsWith("[]")) {
      const elem = typeOf(a) ?? arrayType.slice(0, -2);
      const cmp = op === "in" ? "= ANY" : "<> ALL";
      return `(${this.expr(a, elem)} ${cmp}(${this.expr(only, `${elem}[]`)}))`;
    }
    const t = typeOf(a) ?? firstType(values);
    const list = values.map((v) => this.expr(v, t)).join(", ");
    return `(${this.expr(a, t)} ${op === "in" ? "IN" : "NOT IN"} (${list}))`;
  }
}

/** The SQL type a literal is bound as: numbers and booleans by value, the rest by hint. */
function literalType(v: LiteralValue, hint: string | null): string {
  if (isExactNumber(v)) {
    // An integer in bigint's range compares with a bigint key as one (its index still serves).
    if (!/^-?\d+$/.test(v.rawJSON)) return "numeric";
    const n = BigInt(v.rawJSON);
    return n >= -(2n ** 63n) && n < 2n ** 63n ? "bigint" : "numeric";
  }
  if (typeof v === "number") {
    if (!Number.isInteger(v)) return "numeric";
    if (Math.abs(v) <= 2147483647) return "integer";
    return Number.isSafeInteger(v) ? "bigint" : "numeric";
  }
  if (typeof v === "boolean") return "boolean";
  return hint ?? "text";
}

/**
 * A column type usable as a cast target for a compared value: typmods dropped (so that a cast
 * never truncates or rounds), `character` → `bpchar`, `bit` → `varbit`.
 */
/** A SQL string literal (for constant text from the code, never request values). */
function quoteLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

function hintType(type: string): string {
  const m = /^(.*?)((?:\[\])*)$/.exec(type.replaceAll(/\(\d+(,\d+)?\)/g, ""))!;
  const base = m[1] === "character" ? "bpchar" : m[1] === "bit" ? "varbit" : m[1];
  return base + m[2];
}

/** The SQL type of an expression when it is known without the database, else null. */
function typeOf(e: Expr): string | null {
  switch (e.kind) {
    case "column":
    case "joined":
      return hintType(e.column.type);
    case "field":
      return hintType(e.type);
    case "computed":
      return e.set ? null : hintType(e.type);
    case "cast":
      return hintType(e.type);
    case "param":
      return hintType(e.cast);
    case "literal":
      return e.value === null || typeof e.value === "string" ? null : literalType(e.value, null);
    case "array": {
      const t = firstType(e.items);
      return t === null ? null : `${t}[]`;
    }
    case "agg":
      return e.fn === "count" ? "bigint" : e.fn.startsWith("bool_") ? "boolean" : null;
    case "op":
      if (BOOLEAN_RESULT.has(e.op)) return "boolean";
      if (e.op === "->>") return "text";
      if (e.op === "->") return typeOf(e.args[0]) === "json" ? "json" : "jsonb";
      return null;
  }
}

function firstType(items: Expr[]): string | null {
  for (const i of items) {
    const t = typeOf(i);
    if (t !== null) return t;
  }
  return null;
}

/** Encodes a well-known parameter's JSON value as the text of its cast type. */
function encodeParam(v: unknown, cast: string): string | null {
  if (v === undefined || v === null) return null;
  if (cast === "jsonb" || cast === "json") return JSON.stringify(v);
  if (cast.endsWith("[]") && Array.isArray(v)) return pgArray(v);
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (isExactNumber(v)) return v.rawJSON;
  return JSON.stringify(v);
}

/** A PostgreSQL array literal of JSON values (nested arrays become dimensions). */
export function pgArray(values: unknown[]): string {
  const item = (v: unknown): string => {
    if (v === null || v === undefined) return "NULL";
    if (Array.isArray(v)) return pgArray(v);
    const s = typeof v === "string" ? v : typeof v === "object" ? JSON.stringify(v) : String(v);
    return `"${s.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
  };
  return `{${values.map(item).join(",")}}`;
}

// ---------------------------------------------------------------------------------------------
// Shape keys

function nodeShape(n: RelationNode): unknown {
  const src = n.source;
  return [
    n.sqlAlias,
    src.kind === "relation"
      ? [src.relation.schema, src.relation.name]
      : [src.func.oid, src.args.map((a) => [a.name, exprShape(a.value)])],
    n.where && exprShape(n.where),
    n.select.map((it) => [
      it.mode,
      // A key is a record's column name in the SQL text (see recordKey).
      it.name,
      it.value.kind === "join" ? it.value.join.key : exprShape(it.value.expr),
    ]),
    n.joins.map((j) => [j.key, j.direction, j.on, nodeShape(j.node)]),
    n.limit !== null,
    n.offset !== null,
    n.orderBy.map((t) => [exprShape(t.expr), t.dir, t.nulls]),
    n.distinctOn.map(exprShape),
  ];
}

function exprShape(e: Expr): unknown {
  switch (e.kind) {
    case "column":
      return [e.scope, e.column.name];
    case "computed":
      return ["f", e.scope, e.schema, e.fn, e.set];
    case "joined":
      return ["j", e.join.node.sqlAlias, e.column.name];
    case "field":
      return ["d", exprShape(e.expr), e.field];
    case "literal":
      return ["l", literalType(e.value, "?")];
    case "array":
      return ["a", e.items.map(exprShape)];
    case "cast":
      return ["c", exprShape(e.expr), e.type];
    case "agg":
      return [
        "g",
        e.fn,
        e.join.node.sqlAlias,
        e.expr && exprShape(e.expr),
        e.filter && exprShape(e.filter),
      ];
    case "param":
      return ["p", e.name, e.cast];
    case "op":
      return ["o", e.op, e.args.map(exprShape)];
  }
}
