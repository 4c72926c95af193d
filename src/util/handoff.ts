/**
 * Bytes handed to the runtime and then let go of at once. A streamed answer's chunk given to
 * Deno's HTTP response is not copied: the runtime keeps a reference to the chunk's memory until the
 * socket took it, and the chunk's JavaScript object keeps another until a garbage collection finds
 * it dead. While an answer streams, svc allocates little on the JavaScript heap, so young-generation
 * collections are far apart: ≈ 18 MB of dead chunks waited for each one while a batch streamed
 * ≈ 2 GB (docs/performance.md, "Memory"). Detaching a chunk's buffer once the runtime holds its own
 * reference drops the JavaScript side's at once: the memory is freed when the socket took it.
 *
 * Only a buffer no other view still needs may be detached: {@link markSole} marks a view that is
 * the last one of its buffer to be handed on (every earlier view of it was handed on before), and
 * {@link release} detaches it.
 *
 * @module
 */

const sole = new WeakSet<Uint8Array>();

/**
 * Marks `view` as the last view of its buffer handed on: once it was, nothing else reads the
 * buffer, and {@link release} may detach it.
 */
export function markSole(view: Uint8Array): Uint8Array {
  sole.add(view);
  return view;
}

/** Whether {@link markSole} marked `view`. */
export function isSole(view: Uint8Array): boolean {
  return sole.has(view);
}

/**
 * Detaches the buffer of a view marked by {@link markSole}: JavaScript's reference to the memory
 * is dropped now, not at a later collection. Only once whoever the view was handed to holds its
 * own reference (Deno's response body does, from the moment it takes a chunk).
 */
export function release(view: Uint8Array): void {
  if (!sole.delete(view)) return;
  const buffer = view.buffer as ArrayBuffer;
  if (!buffer.detached) buffer.transfer(0);
}
