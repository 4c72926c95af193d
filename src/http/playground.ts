/**
 * GET /svc/playground: one self-contained page (markup, style and script inline, no CDN) for
 * browsing the schema from /svc/database.json and running queries against /svc with the page's
 * own session cookie. Inline code is allowed by a per-response nonce under a strict policy.
 */
import { PLAYGROUND_BODY, PLAYGROUND_CSS, PLAYGROUND_JS } from "./playground_assets.ts";

/** A fresh CSP nonce (128 random bits, base64). */
export function cspNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes));
}

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
  const nonce = cspNonce();
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>svc playground</title>
<link rel="icon" href="data:,">
<style nonce="${nonce}">${PLAYGROUND_CSS}</style>
</head>
<body>${PLAYGROUND_BODY}<script nonce="${nonce}">${PLAYGROUND_JS}</script>
</body>
</html>
`;
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
