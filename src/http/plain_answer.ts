/**
 * A handler's answer before it is a Response: its body, content type and status. The server
 * (src/http/server.ts) builds the Response once, with every header of finish and decorate given
 * to its constructor: a Response whose headers are changed after it was built loses Deno.serve's
 * fast path (its headers are then copied and sent apart from the body), measured as a tenth of a
 * primary-key read's CPU. See docs/performance.md.
 *
 * @module
 */
import type { Body } from "../query/context.ts";

/** An answer the server turns into a Response with all its headers at once. */
export class PlainAnswer {
  /** An answer of `body` typed `contentType`, with `status`. */
  constructor(
    readonly body: Body,
    readonly contentType: string,
    readonly status: number = 200,
  ) {}
}
