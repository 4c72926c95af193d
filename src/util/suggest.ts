/**
 * "Did you mean …": the closest name by edit distance, for error messages that teach. A hint
 * names only what the request's role holds a privilege on (see {@link SuggestingError}).
 */
import { type ErrorCode, SvcError } from "../svc_error.ts";

/** Levenshtein distance between two strings (case-insensitive). */
export function editDistance(a: string, b: string): number {
  a = a.toLowerCase();
  b = b.toLowerCase();
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(
        prev[j] + 1,
        cur[j - 1] + 1,
        prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    prev = cur;
  }
  return prev[b.length];
}

/**
 * Names longer than this get no hint: PostgreSQL's identifiers are at most 63 bytes, and the
 * distance costs the product of the two lengths (a client's 4 MB name against every candidate
 * held a worker for seconds).
 */
export const MAX_HINTED_NAME = 128;

/** The edits a typo of `name` may have (a third of its length, at least 2). */
function typoLimit(name: string): number {
  return Math.max(2, Math.floor(name.length / 3));
}

/** Whether `candidate` may be within `limit` edits of `name` (lengths alone can rule it out). */
function mayBeWithin(name: string, candidate: string, limit: number): boolean {
  return Math.abs(name.length - candidate.length) <= limit;
}

/**
 * The candidate closest to `name`, if it is close enough to be a plausible typo (at most a third
 * of the name's length, minimum 2 edits); ties go to the first candidate in order. None for a
 * name over {@link MAX_HINTED_NAME} characters.
 */
export function closest(name: string, candidates: Iterable<string>): string | null {
  if (name.length > MAX_HINTED_NAME) return null;
  const limit = typoLimit(name);
  let best: string | null = null;
  let bestD = Infinity;
  for (const c of candidates) {
    if (c === name || !mayBeWithin(name, c, limit)) continue;
    const d = editDistance(name, c);
    if (d < bestD && d <= limit) {
      best = c;
      bestD = d;
    }
  }
  return best;
}

/** `"; did you mean 'x'?"` when a close candidate exists, else "". */
export function didYouMean(name: string, candidates: Iterable<string>): string {
  const c = closest(name, candidates);
  return c === null ? "" : `; did you mean '${c}'?`;
}

/**
 * What a role must hold for a name to be suggested to it, asked of PostgreSQL per request: any
 * privilege on a relation (table or column level), any privilege on a column, or EXECUTE on one
 * of some functions; always with USAGE on the schema.
 */
export type Need =
  | { relation: number }
  | { relation: number; column: string }
  | { functions: number[] };

/** A name a "did you mean" hint may offer; without `need` it is offered to anyone. */
export interface Candidate {
  name: string;
  need?: Need;
}

/** Most candidates a hint considers (the closest ones), bounding the privilege question. */
const MAX_RANKED = 32;

/**
 * The candidates close enough to `name` to be a plausible typo (as {@link closest}), closest
 * first (ties in the given order), at most 32; none for a name over {@link MAX_HINTED_NAME}.
 */
export function ranked(name: string, candidates: Iterable<Candidate>): Candidate[] {
  if (name.length > MAX_HINTED_NAME) return [];
  const limit = typoLimit(name);
  const out: { c: Candidate; d: number; i: number }[] = [];
  let i = 0;
  for (const c of candidates) {
    i++;
    if (c.name === name || !mayBeWithin(name, c.name, limit)) continue;
    const d = editDistance(name, c.name);
    if (d <= limit) out.push({ c, d, i });
  }
  out.sort((a, b) => a.d - b.d || a.i - b.i);
  return out.slice(0, MAX_RANKED).map((x) => x.c);
}

/**
 * An unknown-name error whose "did you mean" hint depends on what the request's role may use.
 * Its message starts without a hint; {@link SuggestingError.settle} adds the closest candidate
 * the role holds a privilege on, once that is known (the HTTP layer asks PostgreSQL; without a
 * role, e.g. for a well-known query at load, every candidate counts).
 */
export class SuggestingError extends SvcError {
  /** The unknown name, the names it may have meant, and the message for a hint ("" for none). */
  readonly suggest: { name: string; candidates: Candidate[]; render: (hint: string) => string };
  #settled = false;

  /** `render(hint)` builds the message; `hint` is "" or `"; did you mean 'x'?"`. */
  constructor(
    code: ErrorCode,
    name: string,
    candidates: Iterable<Candidate>,
    render: (hint: string) => string,
    details: unknown,
  ) {
    super(code, render(""), { details });
    this.suggest = { name, candidates: ranked(name, candidates), render };
  }

  /** Whether the hint was settled already. */
  get settled(): boolean {
    return this.#settled;
  }

  /** Sets the message with the closest candidate that `usable` accepts (once). */
  settle(usable: (c: Candidate) => boolean): void {
    if (this.#settled) return;
    this.#settled = true;
    const c = this.suggest.candidates.find(usable);
    this.message = this.suggest.render(c === undefined ? "" : `; did you mean '${c.name}'?`);
  }
}
