/**
 * Client disconnects that the HTTP server does not report. Deno's HTTP/1.1 server watches a
 * request's connection for the client going away only when the whole request body arrived with its
 * head (in practice: requests up to 512 bytes, the size of the server's first read). For any other
 * request (a session cookie and a real body are enough) `request.signal` is not aborted while the
 * handler runs, so a client that leaves would keep its statement running, and its pooled
 * connection busy, until `statement_timeout`.
 *
 * {@link ClientWatch} closes that gap on Linux: every {@link TICK_MS} it looks up the TCP
 * connections of the requests in flight for longer than a tick in the kernel's socket table
 * (`/proc/net/tcp`, or `/proc/net/tcp6` for an IPv6 listener) and aborts a request whose
 * connection is no longer established (the client closed it, half-closed it or reset it). Short
 * requests never cost a look-up; elsewhere than Linux it watches nothing.
 *
 * A look-up reads the whole table, whose cost grows with the host: the kernel walks every bucket of
 * its connection hash (≈ 0.8 ms for 262,144 buckets on a 24 GiB machine; the table is larger on
 * larger ones) and the text holds every socket of the network namespace. So after a look-up that
 * took `t` ms the next one waits at least {@link COST_SPACING} × `t` ms: the watch costs at most
 * ≈ 2% of the time, whatever the host, at the price of seeing a client go later on a host where a
 * look-up is dear (docs/operations.md, "Every request's cost is bounded").
 *
 * @module
 */
import { IndexedList } from "../util/indexed_list.ts";

/** How often the connections of requests in flight are looked up, in milliseconds. */
export const TICK_MS = 50;

/** After a look-up of `t` ms, the next waits at least this many times `t` (≈ 2% of the time). */
export const COST_SPACING = 50;

/** Reads a socket table (`/proc/net/tcp` or `/proc/net/tcp6`). */
export type TableReader = (file: string) => Promise<string>;

/** The kernel's TCP_ESTABLISHED, as `/proc/net/tcp` prints it. */
const ESTABLISHED = "01";

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** What a request's client going away aborts (the request's own gate, src/http/enter.ts). */
export interface Abortable {
  abort(reason: unknown): void;
}

/** A watched request's connection; {@link stop} stops watching it. */
export interface Watching {
  /** Stops watching (the request is over, or its streamed answer was sent). */
  stop(): void;
}

/** A request's connection being watched: one object per request (no closures). */
class Watched implements Watching {
  /** The connection's remote address as the socket table prints it (IPv4 and IPv6 forms). */
  keys?: string[];
  /** Its place in the watch's list; -1 once it left. */
  i = -1;

  constructor(
    readonly list: IndexedList<Watched>,
    readonly info: Deno.ServeHandlerInfo,
    readonly target: Abortable,
    readonly since: number,
  ) {}

  stop(): void {
    this.list.remove(this);
  }

  /** The client went away: aborts the request. */
  abort(): void {
    this.target.abort(new DOMException("the client went away", "AbortError"));
  }
}

/** Responses whose body streams after the handler returned: watched until they are sent. */
const streamed = new WeakSet<Response>();

/** Marks a response whose body streams from the database (its request stays watched). */
export function markStreamed(res: Response): Response {
  streamed.add(res);
  return res;
}

/** Whether {@link markStreamed} marked `res`. */
export function isStreamed(res: Response): boolean {
  return streamed.has(res);
}

/**
 * Watches the TCP connections of requests in flight and aborts a request whose client went away
 * (see the module documentation). Call {@link listening} once listening.
 */
export class ClientWatch {
  /** The port svc listens on (0: nothing is watched). */
  port = 0;
  /** The socket table of svc's listener: `tcp6` for an IPv6 one (IPv4 clients included). */
  #file = "/proc/net/tcp";
  /** The requests watched (src/util/indexed_list.ts: not a Set, which requests churn). */
  readonly #watched = new IndexedList<Watched>();
  #timer: ReturnType<typeof setInterval> | undefined;
  #busy = false;
  /** Set once the socket table could not be read: then nothing is watched here. */
  #unreadable = false;
  /** No look-up before this time (performance.now()): see {@link COST_SPACING}. */
  #notBefore = 0;
  readonly #read: TableReader;

  /** A watch reading the socket table with `read` (default: the file itself). */
  constructor(read: TableReader = (file) => Deno.readTextFile(file)) {
    this.#read = read;
  }

  /** Sets the address svc listens on: its port, and which socket table holds its connections. */
  listening(addr: Deno.NetAddr): void {
    this.port = addr.port;
    this.#file = addr.hostname.includes(":") ? "/proc/net/tcp6" : "/proc/net/tcp";
  }

  /** Whether connections can be looked up on this system. */
  static supported(): boolean {
    return Deno.build.os === "linux";
  }

  /**
   * Whether this watch sees every request's client go away (Linux, listening, socket table
   * readable): the request's own `signal` is then not needed (in Deno it costs a pending
   * operation per request and a third of a small request's throughput).
   */
  get covers(): boolean {
    return this.port !== 0 && !this.#unreadable && ClientWatch.supported();
  }

  /**
   * Watches the connection of the request `info` belongs to; `target` is aborted once if its
   * client goes away (with an AbortError DOMException). Returns what stops watching (undefined
   * when nothing is watched).
   */
  watch(info: Deno.ServeHandlerInfo | undefined, target: Abortable): Watching | undefined {
    if (this.port === 0 || info === undefined || !ClientWatch.supported()) return undefined;
    const w = new Watched(this.#watched, info, target, performance.now());
    this.#watched.add(w);
    if (this.#timer === undefined) {
      const timer = setInterval(() => void this.#tick(), TICK_MS);
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
    return w;
  }

  /** Stops watching (shutdown). */
  close(): void {
    this.port = 0;
    this.#watched.clear();
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async #tick(): Promise<void> {
    if (this.#busy) return;
    if (this.#watched.items.length === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    const now = performance.now();
    if (now < this.#notBefore) return;
    this.#busy = true;
    try {
      const due: Watched[] = [];
      // The form of the remote address that the listener's table holds.
      const v6 = this.#file.endsWith("6");
      // A copy: entries leave as they are looked at.
      for (const w of this.#watched.items.slice()) {
        if (now - w.since < TICK_MS) continue;
        let addr: Deno.Addr;
        try {
          addr = w.info.remoteAddr;
        } catch {
          // The request is over (its streamed answer was sent, or it failed).
          this.#watched.remove(w);
          continue;
        }
        w.keys ??= remoteKeys(addr).filter((k) => (k.length > 13) === v6);
        if (w.keys.length === 0) this.#watched.remove(w);
        else due.push(w);
      }
      if (due.length === 0) return;
      const table: SocketTable = { states: new Map(), ports: new Set() };
      let text: string;
      try {
        text = await this.#read(this.#file);
      } catch (e) {
        this.#unreadable = true; // requests use their own signal from now on
        throw e;
      }
      parseTable(text, `:${hex4(this.port)}`, table);
      this.#notBefore = now + COST_SPACING * (performance.now() - now);
      for (const w of due) {
        if (w.i < 0 || !gone(w.keys!, table)) continue;
        this.#watched.remove(w);
        w.abort();
      }
    } catch {
      // The socket table is unreadable here: the server's own signal is all there is.
    } finally {
      this.#busy = false;
    }
  }
}

/** The connections to svc's port: remote address → state, and every remote port. */
export interface SocketTable {
  states: Map<string, string>;
  ports: Set<string>;
}

/**
 * Adds the connections of a `/proc/net/tcp{,6}` text whose local address ends with `local`
 * (":PORT" in hex) to `into`. Lines are `sl: local remote state …`, single spaces between the
 * three: only svc's own connections are sliced out (the table holds every socket of the host's
 * network namespace, possibly thousands).
 */
export function parseTable(text: string, local: string, into: SocketTable): void {
  const needle = `${local} `;
  for (let i = text.indexOf(needle); i >= 0; i = text.indexOf(needle, i + needle.length)) {
    const start = i + needle.length;
    const end = text.indexOf(" ", start);
    if (end < 0) break;
    const remote = text.slice(start, end);
    into.states.set(remote, text.slice(end + 1, end + 3));
    into.ports.add(remote.slice(remote.lastIndexOf(":")));
  }
}

/**
 * Whether the connection whose remote address is one of `keys` is gone: found but no longer
 * established (the client closed or half-closed it), or no connection from its remote port at all
 * (reset). A connection from that port under another address is left alone: the address could
 * be this one's, printed otherwise.
 */
export function gone(keys: string[], table: SocketTable): boolean {
  for (const k of keys) {
    const state = table.states.get(k);
    if (state !== undefined) return state !== ESTABLISHED;
  }
  return !table.ports.has(keys[0].slice(keys[0].lastIndexOf(":")));
}

function hex4(n: number): string {
  return n.toString(16).toUpperCase().padStart(4, "0");
}

/** Address bytes as the socket table prints them: 32-bit words in host byte order. */
function hexWords(bytes: number[]): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 4) {
    const word = bytes.slice(i, i + 4);
    if (LITTLE_ENDIAN) word.reverse();
    for (const b of word) out += b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** The bytes of a dotted IPv4 address, or null. */
function ipv4(s: string): number[] | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  const bytes = parts.map((p) => (/^\d{1,3}$/.test(p) ? Number(p) : NaN));
  return bytes.every((b) => b >= 0 && b <= 255) ? bytes : null;
}

/** The 16 bytes of an IPv6 address (`::` shorthand, embedded IPv4, zone id), or null. */
function ipv6(s: string): number[] | null {
  s = s.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  let tail: number[] = [];
  const lastColon = s.lastIndexOf(":");
  if (s.includes(".", lastColon)) {
    const v4 = ipv4(s.slice(lastColon + 1));
    if (!v4) return null;
    tail = v4;
    s = s.slice(0, lastColon + 1) + "0:0";
  }
  const halves = s.split("::");
  if (halves.length > 2) return null;
  const groups = (h: string) => (h === "" ? [] : h.split(":"));
  const head = groups(halves[0]);
  const rest = halves.length === 2 ? groups(halves[1]) : [];
  const fill = 8 - head.length - rest.length;
  if (fill < 0 || (halves.length === 1 && fill !== 0)) return null;
  const all = [...head, ...Array(fill).fill("0"), ...rest];
  const bytes: number[] = [];
  for (const g of all) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
    const v = parseInt(g, 16);
    bytes.push(v >> 8, v & 0xff);
  }
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

/**
 * The remote address of a TCP connection as `/proc/net/tcp` (8 hex digits) and `/proc/net/tcp6`
 * (32) print it, with the port: an IPv4 client may sit on an IPv6 socket as `::ffff:a.b.c.d`.
 * Empty for anything but TCP.
 */
export function remoteKeys(addr: Deno.Addr): string[] {
  if (addr.transport !== "tcp") return [];
  const port = `:${hex4(addr.port)}`;
  const v4 = ipv4(addr.hostname);
  const v6 = v4 ? [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...v4] : ipv6(addr.hostname);
  if (!v6) return [];
  const mapped = v6.slice(0, 12).every((b, i) => b === (i < 10 ? 0 : 0xff));
  const keys = [hexWords(v6) + port];
  if (mapped) keys.unshift(hexWords(v6.slice(12)) + port);
  return keys;
}
