/**
 * The files a request's multipart decoding wrote to disk (streamed uploads), known by the body
 * object it returned: what a failed request removes. Never paths read from a body, which a client
 * writes as it likes (a JSON `{"files": [{"path": "/secrets/jwt-secret"}]}` is not an upload).
 *
 * @module
 */

/** Paths written for each decoded body. */
const written = new WeakMap<object, readonly string[]>();

/** Records that decoding produced `body` and wrote `paths`. */
export function recordUploads(body: object, paths: readonly string[]): void {
  written.set(body, paths);
}

/** Removes the files decoding wrote for `body` (best effort); nothing for any other value. */
export async function removeUploads(body: unknown): Promise<void> {
  if (body === null || typeof body !== "object") return;
  const paths = written.get(body);
  if (!paths) return;
  written.delete(body);
  await Promise.all(paths.map((p) => Deno.remove(p).catch(() => {})));
}
