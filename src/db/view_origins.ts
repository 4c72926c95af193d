/**
 * Where a view's columns come from, read from the view's `_RETURN` rule (`pg_rewrite.ev_action`,
 * a query tree in PostgreSQL's node text form): each top-level select item's `resorigtbl` /
 * `resorigcol` (the relation column a plain column reference reads, which PostgreSQL records for
 * every view column that is one), and the one relation the view reads when each of its rows is
 * one row of that relation (one relation in its FROM, no grouping, aggregate, DISTINCT, set
 * operation or set-returning select item). docs/query.md "Views" says what svc derives from it.
 * Pure: no I/O.
 *
 * @module
 */

/** A node of a node tree: its type (`QUERY`, `TARGETENTRY`, …) and fields. */
interface TreeNode {
  type: string;
  fields: Map<string, TreeValue>;
}

/** A value of a node tree: an atom (null for `<>`), a list, or a node. */
type TreeValue = string | null | TreeValue[] | TreeNode;

/** A view column's origin: a column (attribute number) of a relation (OID). */
export interface ColumnOrigin {
  rel: number;
  attnum: number;
}

/** What {@link viewOrigins} reads of a view. */
export interface ViewOrigin {
  /** Origins of the view's columns that are plain column references, by view attribute number. */
  columns: Map<number, ColumnOrigin>;
  /** The relation each row of the view is one row of; null when there is no such relation. */
  source: number | null;
  /** Whether the view leaves rows out (a `WHERE`, `LIMIT` or `OFFSET` of its own). */
  filtered: boolean;
}

/** A token of node text: `{ } ( )` (`delim`), a datum's bytes (`datum`), or an atom. */
interface Token {
  value: string;
  /** An atom an unescaped `:` starts: a field name. */
  field: boolean;
  delim: boolean;
  datum: boolean;
}

/** Tokens of node text: `{ } ( )`, datums, and atoms (`field` when an unescaped `:` starts it). */
function tokenize(text: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text[i];
    if (c === " " || c === "\n" || c === "\t" || c === "\r") {
      i++;
      continue;
    }
    if (c === "{" || c === "}" || c === "(" || c === ")") {
      out.push({ value: c, field: false, delim: true, datum: false });
      i++;
      continue;
    }
    // A datum's bytes (`[ 1 0 0 0 ]`, one number a byte: megabytes for a long literal) are one
    // token, never read.
    if (c === "[" && out.length >= 2 && out[out.length - 2].value === ":constvalue") {
      const end = text.indexOf(" ]", i);
      if (end < 0) throw new Error("datum without its end");
      out.push({ value: "[]", field: false, delim: false, datum: true });
      i = end + 2;
      continue;
    }
    const field = c === ":";
    let value = "";
    while (i < n) {
      const d = text[i];
      if (d === "\\" && i + 1 < n) {
        value += text[i + 1];
        i += 2;
        continue;
      }
      if (
        d === " " || d === "\n" || d === "\t" || d === "\r" || d === "{" || d === "}" ||
        d === "(" || d === ")"
      ) break;
      value += d;
      i++;
    }
    out.push({ value, field, delim: false, datum: false });
  }
  return out;
}

/** Reads node text into values; throws on text it does not understand. */
export function readNodeTree(text: string): TreeValue {
  const tokens = tokenize(text);
  let at = 0;
  const next = () => {
    if (at >= tokens.length) throw new Error("node text ends early");
    return tokens[at++];
  };
  const value = (): TreeValue => {
    const t = next();
    if (t.delim) {
      if (t.value === "{") {
        const type = next();
        if (type.delim) throw new Error("node without a type");
        const fields = new Map<string, TreeValue>();
        for (;;) {
          const f = next();
          if (f.delim && f.value === "}") break;
          if (!f.field) throw new Error(`field expected in ${type.value}, got ${f.value}`);
          fields.set(f.value.slice(1), value());
          // A datum's bytes follow its length: `:constvalue 4 [ 1 0 0 0 ]`.
          if (at < tokens.length && tokens[at].datum) at++;
        }
        return { type: type.value, fields };
      }
      if (t.value === "(") {
        const items: TreeValue[] = [];
        while (at < tokens.length && !(tokens[at].delim && tokens[at].value === ")")) {
          items.push(value());
        }
        next();
        return items;
      }
      throw new Error(`unexpected ${t.value}`);
    }
    return t.value === "<>" ? null : t.value;
  };
  const tree = value();
  if (at !== tokens.length) throw new Error("trailing node text");
  return tree;
}

function isNode(v: TreeValue | undefined, type: string): v is TreeNode {
  return typeof v === "object" && v !== null && !Array.isArray(v) && v.type === type;
}

function list(v: TreeValue | undefined): TreeValue[] {
  return Array.isArray(v) ? v : [];
}

/** Whether a field holds nothing (`<>`, an empty list, or `false`). */
function empty(v: TreeValue | undefined): boolean {
  return v === undefined || v === null || v === "false" || (Array.isArray(v) && v.length === 0);
}

/**
 * The origins of the view `viewOid` from its `_RETURN` rule's action text; null when the text is
 * not one query tree this reader understands (then nothing is derived from the view).
 */
export function viewOrigins(action: string, viewOid: number): ViewOrigin | null {
  let tree: TreeValue;
  try {
    tree = readNodeTree(action);
  } catch {
    return null;
  }
  const query = list(tree)[0];
  if (list(tree).length !== 1 || !isNode(query, "QUERY")) return null;
  const q = query.fields;
  const columns = new Map<number, ColumnOrigin>();
  for (const te of list(q.get("targetList"))) {
    if (!isNode(te, "TARGETENTRY") || te.fields.get("resjunk") === "true") continue;
    const resno = Number(te.fields.get("resno"));
    const rel = Number(te.fields.get("resorigtbl"));
    const attnum = Number(te.fields.get("resorigcol"));
    if (resno > 0 && rel > 0 && attnum > 0) columns.set(resno, { rel, attnum });
  }
  // Before PostgreSQL 16 a view's range table starts with OLD and NEW: the view itself.
  const relations = list(q.get("rtable")).filter((rte) =>
    !(isNode(rte, "RANGETBLENTRY") && Number(rte.fields.get("relid")) === viewOid)
  );
  const one = relations.length === 1 && isNode(relations[0], "RANGETBLENTRY") &&
      relations[0].fields.get("rtekind") === "0"
    ? Number(relations[0].fields.get("relid"))
    : null;
  const rowForRow = ["hasAggs", "hasTargetSRFs", "groupClause", "groupingSets", "distinctClause"]
    .every((f) => empty(q.get(f))) && empty(q.get("setOperations")) && empty(q.get("havingQual"));
  const jointree = q.get("jointree");
  const filtered = !(isNode(jointree, "FROMEXPR") && empty(jointree.fields.get("quals"))) ||
    !empty(q.get("limitCount")) || !empty(q.get("limitOffset"));
  return { columns, source: one !== null && one > 0 && rowForRow ? one : null, filtered };
}
