/**
 * The rows of a plan node as plan.ts builds them, laid out for bulk writes: a write of hundreds of
 * thousands of rows makes one small object per row and nothing else. Each row's values live in
 * its node's columns (one array per column, indexed by row), and its JSON pointer is made only
 * when an error names it. Pure: no I/O.
 */
import type { Fill, PlanRow, RowAction } from "./plan_types.ts";
import type { JsonValue } from "./values.ts";

/** The fills of a row that has none (shared: a row's own array is made at its first fill). */
export const NO_FILLS: Fill[] = [];

/** Escapes a key for a JSON pointer. */
export function escapePointer(key: string): string {
  return key.replaceAll("~", "~0").replaceAll("/", "~1");
}

/**
 * The rows of one query node and their values, column by column. Rows of a node under a
 * readonly one are only checked for shape: they hold no values.
 */
export class NodeRows {
  /** The rows, in payload order. */
  readonly rows: Row[] = [];
  /** Per column: each row's value (`undefined`: the row has none). */
  private readonly columns = new Map<string, (JsonValue | undefined)[]>();

  /**
   * `size`: the number of rows the node will hold (each column's array is made that long at
   * once). `up`: the rows of the parent node (null at the root); `key`: the join's name in the
   * payload; `base`: the payload's pointer (the root's rows are `<base>/<i>`).
   */
  constructor(
    private readonly size: number,
    private readonly up: NodeRows | null,
    private readonly key: string | null,
    private readonly base: string,
  ) {}

  /** A new row, last of the node. `place`: its index in the payload array holding it (-1: a join's one object). */
  add(parentRow: number, place: number, action: RowAction, writes: ReadonlySet<string>): Row {
    const row = new Row(this, this.rows.length, place, parentRow, action, writes);
    this.rows.push(row);
    return row;
  }

  /** The value of `column` of row `at`. */
  get(at: number, column: string): JsonValue | undefined {
    return this.columns.get(column)?.[at];
  }

  /** Sets (or with `undefined`, removes) the value of `column` of row `at`. */
  set(at: number, column: string, v: JsonValue | undefined): void {
    let values = this.columns.get(column);
    if (!values) {
      if (v === undefined) return;
      // Holey and exactly as long as the node's rows: no growth, no sparse dictionary.
      this.columns.set(column, values = new Array(Math.max(this.size, at + 1)));
    }
    values[at] = v;
  }

  /** The JSON pointer of row `at` in the request. */
  pointerOf(row: Row): string {
    if (this.up === null) return `${this.base}/${row.place}`;
    const parent = this.up.rows[row.parentRow];
    const at = `${parent.pointer}/${escapePointer(this.key ?? "")}`;
    return row.place < 0 ? at : `${at}/${row.place}`;
  }
}

/** One payload row of a plan node (see PlanRow). */
export class Row implements PlanRow {
  fills: Fill[] = NO_FILLS;
  present: Set<number> | null = null;
  src: Map<string, number> | undefined = undefined;

  constructor(
    private readonly of: NodeRows,
    private readonly at: number,
    /** Index in the payload array holding the row; -1 for a join's one object. */
    readonly place: number,
    readonly parentRow: number,
    public action: RowAction,
    public writes: ReadonlySet<string>,
  ) {}

  /** The row's JSON pointer in the request (made on each call: only errors need it). */
  get pointer(): string {
    return this.of.pointerOf(this);
  }

  value(column: string): JsonValue | undefined {
    return this.of.get(this.at, column);
  }

  setValue(column: string, v: JsonValue): void {
    this.of.set(this.at, column, v);
  }

  deleteValue(column: string): void {
    this.of.set(this.at, column, undefined);
  }
}
