/**
 * "Did you mean …": the closest name by edit distance, for error messages that teach.
 */

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
 * The candidate closest to `name`, if it is close enough to be a plausible typo (at most a third
 * of the name's length, minimum 2 edits); ties go to the first candidate in order.
 */
export function closest(name: string, candidates: Iterable<string>): string | null {
  const limit = Math.max(2, Math.floor(name.length / 3));
  let best: string | null = null;
  let bestD = Infinity;
  for (const c of candidates) {
    if (c === name) continue;
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
