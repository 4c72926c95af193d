/**
 * GET /svc/playground: one self-contained page (markup, style and script inline, no CDN) for
 * browsing the schema from /svc/database.json and running queries against /svc with the page's
 * own session cookie. Inline code is allowed by a per-response nonce under a strict policy.
 *
 * The page is written as real files in ./playground/ (index.html, playground.css, playground.js:
 * plain browser code, formatted and linted with the rest) and imported as text, so `deno run`,
 * `deno compile` and `deno bundle` all carry them in the module graph. The stylesheet link and the
 * script tag of index.html are replaced by the inline, nonce-carrying copies.
 */
import PAGE from "./playground/index.html" with { type: "text" };
import CSS from "./playground/playground.css" with { type: "text" };
import JS from "./playground/playground.js" with { type: "text" };
import { newNonce } from "./csp.ts";

const STYLE_TAG = '<link rel="stylesheet" href="playground.css">';
const SCRIPT_TAG = '<script src="playground.js"></script>';

/** index.html around its stylesheet link and script tag. */
const [BEFORE_STYLE, BETWEEN, AFTER_SCRIPT] = ((): [string, string, string] => {
  const style = PAGE.indexOf(STYLE_TAG);
  const script = PAGE.indexOf(SCRIPT_TAG);
  if (style < 0 || script < style) {
    throw new Error(`playground/index.html must hold ${STYLE_TAG} and then ${SCRIPT_TAG}`);
  }
  return [
    PAGE.slice(0, style),
    PAGE.slice(style + STYLE_TAG.length, script),
    PAGE.slice(script + SCRIPT_TAG.length),
  ];
})();

/** The strict Content-Security-Policy of the playground page for `nonce`. */
export function playgroundCsp(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/** The playground page, with a new nonce in its CSP header and inline tags. */
export function playgroundResponse(): Response {
  const nonce = newNonce();
  const html = `${BEFORE_STYLE}<style nonce="${nonce}">${CSS}</style>${BETWEEN}` +
    `<script nonce="${nonce}">${JS}</script>${AFTER_SCRIPT}`;
  return new Response(html, {
    headers: {
      "content-type": "text/html; charset=utf-8",
      "content-security-policy": playgroundCsp(nonce),
      "x-content-type-options": "nosniff",
      "referrer-policy": "same-origin",
      "cache-control": "no-store",
    },
  });
}
