/**
 * Text-format column values to JS values, by type OID — only where svc needs values
 * (introspection, write statistics, keys, tests). The mapping: int2/int4/oid/float4/float8 →
 * number; bool → boolean; json/jsonb → parsed JSON; date/timestamp/timestamptz → Date; bytea →
 * Uint8Array; arrays of the built-in types → arrays of their elements; everything else (int8,
 * numeric, text, uuid, …) → the text itself.
 */

/** A column of a result (from RowDescription). */
export interface Field {
  /** Column name. */
  name: string;
  /** OID of the table, or 0. */
  tableOid: number;
  /** Attribute number in that table, or 0. */
  column: number;
  /** OID of the column's type. */
  typeOid: number;
  /** Type size (negative: variable). */
  typeSize: number;
  /** Type modifier. */
  typeMod: number;
}

/** A decoded row: column name → value. */
export type Row = Record<string, unknown>;

type Parse = (text: string) => unknown;

const number: Parse = (x) => +x;
const bool: Parse = (x) => x === "t";
const json: Parse = (x) => JSON.parse(x);
const date: Parse = (x) => new Date(x);
const bytea: Parse = (x) => {
  if (!x.startsWith("\\x")) return new TextEncoder().encode(x); // escape format (rare)
  const out = new Uint8Array((x.length - 2) >> 1);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(x.slice(2 + 2 * i, 4 + 2 * i), 16);
  return out;
};

/** Parsers of scalar types. */
const SCALARS = new Map<number, Parse>([
  [21, number], // int2
  [23, number], // int4
  [26, number], // oid
  [700, number], // float4
  [701, number], // float8
  [16, bool],
  [114, json],
  [3802, json], // jsonb
  [1082, date],
  [1114, date],
  [1184, date],
  [17, bytea],
]);

/** Array type OID → element type OID (the built-in ones). */
const ARRAYS = new Map<number, number>([
  [1000, 16], // bool[]
  [1001, 17], // bytea[]
  [1002, 18], // char[]
  [1003, 19], // name[]
  [1005, 21], // int2[]
  [1006, 22], // int2vector[]
  [1007, 23], // int4[]
  [1009, 25], // text[]
  [1028, 26], // oid[]
  [1010, 27], // tid[]
  [1011, 28], // xid[]
  [1012, 29], // cid[]
  [1016, 20], // int8[]
  [1021, 700], // float4[]
  [1022, 701], // float8[]
  [1014, 1042], // bpchar[]
  [1015, 1043], // varchar[]
  [1182, 1082], // date[]
  [1115, 1114], // timestamp[]
  [1185, 1184], // timestamptz[]
  [1183, 1083], // time[]
  [1270, 1266], // timetz[]
  [1187, 1186], // interval[]
  [1231, 1700], // numeric[]
  [199, 114], // json[]
  [3807, 3802], // jsonb[]
  [2951, 2950], // uuid[]
  [1034, 1033], // aclitem[]
  [2287, 2249], // record[]
  [1040, 829], // macaddr[]
  [1041, 869], // inet[]
  [651, 650], // cidr[]
  [2211, 2206], // regtype[]
  [2210, 2202], // regprocedure[]
  [4192, 4089], // regnamespace[]
  [4097, 4096], // regrole[]
  [2208, 2205], // regclass[]
  [1008, 24], // regproc[]
  [3643, 3614], // tsvector[]
  [3645, 3615], // tsquery[]
  [1561, 1560], // bit[]
  [1563, 1562], // varbit[]
  [1017, 600], // point[]
  [1263, 2275], // cstring[]
]);

/** Parses a text value of type `oid`. */
export function parseValue(oid: number, text: string): unknown {
  const scalar = SCALARS.get(oid);
  if (scalar) return scalar(text);
  const elem = ARRAYS.get(oid);
  if (elem !== undefined) return parseArray(text, SCALARS.get(elem));
  return text;
}

/**
 * Parses an array literal (`{1,2,NULL,"a b",{3,4}}`, optionally with `[l:u]=` bounds) into nested
 * arrays, elements through `parse` (text when undefined).
 */
export function parseArray(text: string, parse: Parse | undefined, delim = ","): unknown {
  let i = 0;
  if (text[0] === "[") {
    // Explicit bounds: `[1:2]={…}`.
    i = text.indexOf("=") + 1;
  }
  const el = (raw: string, quoted: boolean): unknown => {
    if (!quoted && raw === "NULL") return null;
    return parse ? parse(raw) : raw;
  };
  const read = (): unknown[] => {
    // text[i] === "{"
    i++;
    const out: unknown[] = [];
    if (text[i] === "}") {
      i++;
      return out;
    }
    for (;;) {
      if (text[i] === "{") {
        out.push(read());
      } else if (text[i] === '"') {
        i++;
        let s = "";
        while (i < text.length && text[i] !== '"') {
          if (text[i] === "\\") i++;
          s += text[i++];
        }
        i++;
        out.push(el(s, true));
      } else {
        let j = i;
        while (j < text.length && text[j] !== delim && text[j] !== "}") j++;
        out.push(el(text.slice(i, j), false));
        i = j;
      }
      if (text[i] === delim) {
        i++;
        continue;
      }
      if (text[i] === "}") {
        i++;
        return out;
      }
      throw new SyntaxError(`malformed array literal: ${text.slice(0, 80)}`);
    }
  };
  if (text[i] !== "{") throw new SyntaxError(`malformed array literal: ${text.slice(0, 80)}`);
  return read();
}
