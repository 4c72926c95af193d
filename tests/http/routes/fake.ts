/** Hand-built functions and a minimal Schema for the pure route tests (no database). */
import type { Column, Func, FunctionArg, Schema } from "../../../src/db/schema.ts";

function col(name: string, type: string): Column {
  return {
    name,
    type,
    typeOid: 0,
    category: "U",
    elementType: null,
    compositeOid: null,
    nullable: true,
    hasDefault: false,
    identity: null,
    generated: false,
    mandatory: false,
    comment: null,
  };
}

/** Options of {@link fn}. */
export interface FnSpec {
  args?: [string, string, boolean?][];
  returns?: string;
  set?: boolean;
  volatility?: Func["volatility"];
  comment?: string | null;
  fullControl?: boolean;
  grantees?: string[];
}

/** A function `schema.name` (full-control: `(req jsonb) → (resp jsonb, content jsonb)`). */
export function fn(schema: string, name: string, s: FnSpec = {}): Func {
  const inArgs: FunctionArg[] = s.fullControl
    ? [{ name: "req", type: "jsonb", typeOid: 3802, mode: "in", hasDefault: false }]
    : (s.args ?? []).map(([n, t, d]) => ({
      name: n,
      type: t,
      typeOid: 0,
      mode: "in" as const,
      hasDefault: d ?? false,
    }));
  return {
    schema,
    name,
    oid: 0,
    args: inArgs,
    inArgs,
    returns: {
      type: s.fullControl ? "record" : s.returns ?? "integer",
      typeOid: 0,
      set: s.set ?? false,
      columns: s.fullControl ? [col("resp", "jsonb"), col("content", "jsonb")] : null,
      relation: null,
    },
    volatility: s.volatility ?? "volatile",
    comment: s.comment ?? null,
    owner: "owner",
    executeGrantees: new Set(s.grantees ?? ["~anonymous"]),
  };
}

/** A Schema holding only `fns` (roles `~anonymous`, `app_user`, `owner`). */
export function schemaWith(fns: Func[]): Schema {
  const functions = new Map<string, Func[]>();
  for (const f of fns) {
    const k = `${f.schema}.${f.name}`;
    functions.set(k, [...(functions.get(k) ?? []), f]);
  }
  return {
    relations: new Map(),
    functions,
    composites: new Map(),
    enums: [],
    typeNames: new Set(),
    roles: new Set(["~anonymous", "app_user", "owner"]),
    memberOf: new Map([
      ["~anonymous", new Set(["~anonymous", ""])],
      ["app_user", new Set(["app_user", ""])],
    ]),
    schemaUsage: new Map([["app", new Set(["", "owner"])]]),
    schemas: ["app"],
    currentUser: "owner",
    serverVersion: 170000,
    durationMs: 0,
  };
}
