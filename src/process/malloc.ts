/**
 * glibc's malloc, tuned for a server that streams large answers. Array buffers (answer chunks, the
 * row collector's grown buffers, receive buffers grown by a big row) and the runtime's own Rust
 * allocations come from glibc's malloc. Its defaults raise the mmap threshold to the size of every
 * large block freed (up to 32 MiB), so after the first streamed answer every later 256 KiB–16 MiB
 * chunk is carved from the heap instead; a heap freed in the middle cannot shrink, and the free
 * space stays resident: measured after a batch streaming ≈ 2 GB, the arenas held 78 MiB of which
 * 50–64 MiB free, for the rest of the process's life (docs/performance.md, "Memory").
 *
 * {@link tuneMalloc} fixes the thresholds through `mallopt` (FFI into the C library) at start-up,
 * which also turns glibc's dynamic adjustment off: blocks of {@link MMAP_THRESHOLD} and more get
 * pages of their own, given back to the system when freed, and free space over
 * {@link TRIM_THRESHOLD} at the top of a heap is returned. Small allocations (every per-request
 * buffer of a short answer) are unaffected, but free pages they leave inside a heap are given back
 * by `malloc_trim` every {@link TRIM_INTERVAL_MS} ms. The environment variables `MALLOC_MMAP_THRESHOLD_` /
 * `MALLOC_TRIM_THRESHOLD_`, when set, win (they are read by glibc before svc starts).
 *
 * @module
 */

/** Blocks of this size and more are mapped on their own and returned to the system when freed. */
export const MMAP_THRESHOLD = 128 * 1024;
/** Free space at the top of a heap beyond this is returned to the system. */
export const TRIM_THRESHOLD = 1024 * 1024;

/** How often the heaps' free pages are given back ({@link tuneMalloc}). */
export const TRIM_INTERVAL_MS = 1000;

const M_TRIM_THRESHOLD = -1;
const M_MMAP_THRESHOLD = -3;

/** What {@link tuneMalloc} did. */
export interface MallocTuning {
  /** Whether glibc's thresholds were set. */
  applied: boolean;
  /** Why not, when not. */
  reason?: string;
}

let done: MallocTuning | null = null;

/**
 * Sets glibc's mmap and trim thresholds ({@link MMAP_THRESHOLD}, {@link TRIM_THRESHOLD}) for the
 * whole process, once, and starts the periodic `malloc_trim`. A no-op (with the reason) off Linux/glibc, without the FFI permission, or
 * when the environment sets them.
 */
export function tuneMalloc(): MallocTuning {
  if (done) return done;
  done = apply();
  return done;
}

function apply(): MallocTuning {
  if (Deno.build.os !== "linux" || Deno.build.env !== "gnu") {
    return { applied: false, reason: "not glibc" };
  }
  try {
    if (Deno.permissions.querySync({ name: "ffi" }).state !== "granted") {
      return { applied: false, reason: "no FFI permission" };
    }
    const env = Deno.env.toObject();
    if (env.MALLOC_MMAP_THRESHOLD_ !== undefined || env.MALLOC_TRIM_THRESHOLD_ !== undefined) {
      return { applied: false, reason: "set by the environment" };
    }
  } catch (e) {
    return { applied: false, reason: (e as Error).message };
  }
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    lib = Deno.dlopen("libc.so.6", SYMBOLS);
  } catch (e) {
    return { applied: false, reason: (e as Error).message };
  }
  // The library stays open for the trimming timer.
  const ok = lib.symbols.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) === 1 &&
    lib.symbols.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) === 1;
  if (!ok) return { applied: false, reason: "mallopt refused" };
  // Free pages inside the heaps (a burst of short answers under 128 KiB each, freed by the GC in
  // whatever order) are given back every second; the timer never keeps the process alive.
  const timer = setInterval(() => lib.symbols.malloc_trim(0n), TRIM_INTERVAL_MS);
  Deno.unrefTimer(timer);
  return { applied: true };
}

const SYMBOLS = {
  mallopt: { parameters: ["i32", "i32"], result: "i32" },
  malloc_trim: { parameters: ["usize"], result: "i32" },
} as const;
