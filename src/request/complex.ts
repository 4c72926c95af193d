/**
 * POST /svc bodies (docs/query.md "ComplexQuery and ComplexResult", "Batches"): a Relation, a well-known
 * reference, a ComplexQuery wrapper, or an array (batch) of those. Validates the wrapper's
 * flags and their combinations; the allow_* gates are the executor's business.
 */
import { isExactNumber } from "../formats/json.ts";
import { type ErrorCode, markBatchIndex, SvcError } from "../svc_error.ts";
import { ptr } from "../compile/parse.ts";

/** One request of a body: what to run and which ComplexQuery flags were given. */
export interface ComplexQuery {
  /** A Relation tree, or `{wellknown, params?}`; validated later by parseQuery. */
  query: unknown;
  /** Present means write. */
  data?: unknown;
  returns?: "none" | "results";
  count?: boolean;
  stats?: boolean;
  query_plan?: boolean;
  sql?: boolean;
  rollback?: boolean;
  /** Whether the response is a ComplexResult envelope (a flag other than rollback is set). */
  complex: boolean;
}

/** A parsed POST body. */
export type Body =
  | { kind: "single"; query: ComplexQuery }
  | { kind: "batch"; items: ComplexQuery[] };

const FLAGS = ["count", "stats", "query_plan", "sql", "rollback"] as const;
const WRAPPER_FIELDS = new Set(["query", "data", "returns", ...FLAGS]);

/**
 * Parses a POST /svc body. Throws QUERY_INVALID, QUERY_UNSUPPORTED_RETURNS,
 * QUERY_COUNT_IS_READ_ONLY, QUERY_STATS_IS_WRITE_ONLY or QUERY_STATS_QUERY_PLAN_CONFLICT with
 * `details.pointer` (and `details.index` inside a batch).
 */
export function parseBody(body: unknown): Body {
  if (!Array.isArray(body)) return { kind: "single", query: parseItem(body, "") };
  if (body.length === 0) throw fail("QUERY_INVALID", "a batch must not be empty", "");
  const items = body.map((item, i) => {
    if (Array.isArray(item)) {
      const e = fail("QUERY_INVALID", "a batch element cannot be a batch", `/${i}`);
      markBatchIndex(e, i);
      throw e;
    }
    try {
      return parseItem(item, `/${i}`);
    } catch (e) {
      markBatchIndex(e, i);
      throw e;
    }
  });
  return { kind: "batch", items };
}

function fail(code: ErrorCode, message: string, pointer: string): SvcError {
  return new SvcError(code, message, { details: { pointer } });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !isExactNumber(v);
}

/** One single body: a wrapper `{query, …}`, or a bare Relation / well-known reference. */
function parseItem(item: unknown, pointer: string): ComplexQuery {
  if (!isObject(item)) {
    throw fail("QUERY_INVALID", "expected a relation, a well-known query or {query, …}", pointer);
  }
  if (!("query" in item)) {
    if ("data" in item) {
      throw fail(
        "QUERY_INVALID",
        "'data' needs 'query': a write is {\"query\": <Relation>, \"data\": [rows]}",
        ptr(pointer, "data"),
      );
    }
    if ("wellknown" in item) checkWellKnown(item, pointer);
    return { query: item, complex: false };
  }
  for (const k of Object.keys(item)) {
    if (!WRAPPER_FIELDS.has(k)) {
      throw fail("QUERY_INVALID", `unknown field '${k}'`, ptr(pointer, k));
    }
  }
  const q: ComplexQuery = { query: item.query, complex: false };
  if (!isObject(item.query)) {
    throw fail(
      "QUERY_INVALID",
      "query must be a relation or a well-known query",
      ptr(pointer, "query"),
    );
  }
  if ("wellknown" in item.query) checkWellKnown(item.query, ptr(pointer, "query"));
  if ("data" in item && item.data !== undefined) q.data = item.data;
  readFlags(item, q, pointer);
  checkRules(q, pointer);
  return q;
}

function checkWellKnown(q: Record<string, unknown>, pointer: string): void {
  if (typeof q.wellknown !== "string" || q.wellknown === "") {
    throw fail("QUERY_INVALID", "wellknown must be a query name", ptr(pointer, "wellknown"));
  }
  for (const k of Object.keys(q)) {
    if (k !== "wellknown" && k !== "params") {
      throw fail("QUERY_INVALID", `unknown field '${k}' of a well-known query`, ptr(pointer, k));
    }
  }
  if (q.params !== undefined && !isObject(q.params)) {
    throw fail("QUERY_INVALID", "params must be an object", ptr(pointer, "params"));
  }
}

function readFlags(item: Record<string, unknown>, q: ComplexQuery, pointer: string): void {
  for (const f of FLAGS) {
    const v = item[f];
    if (v === undefined) continue;
    if (typeof v !== "boolean") {
      throw fail("QUERY_INVALID", `${f} must be a boolean`, ptr(pointer, f));
    }
    q[f] = v;
  }
  if (item.returns !== undefined) {
    if (item.returns !== "none" && item.returns !== "results") {
      throw fail("QUERY_INVALID", "returns must be 'none' or 'results'", ptr(pointer, "returns"));
    }
    q.returns = item.returns;
  }
  q.complex = q.count === true || q.stats === true || q.query_plan === true || q.sql === true;
}

function checkRules(q: ComplexQuery, pointer: string): void {
  const write = "data" in q;
  if (q.returns === "none" && !q.complex) {
    throw fail(
      "QUERY_UNSUPPORTED_RETURNS",
      "returns 'none' needs another flag (count, stats, query_plan or sql)",
      ptr(pointer, "returns"),
    );
  }
  if (q.count && write) {
    throw fail("QUERY_COUNT_IS_READ_ONLY", "count is only for reads", ptr(pointer, "count"));
  }
  if (q.stats && !write) {
    throw fail("QUERY_STATS_IS_WRITE_ONLY", "stats is only for writes", ptr(pointer, "stats"));
  }
  if (q.stats && q.query_plan && write) {
    throw fail(
      "QUERY_STATS_QUERY_PLAN_CONFLICT",
      "stats and query_plan cannot be combined on a write",
      ptr(pointer, "query_plan"),
    );
  }
}
