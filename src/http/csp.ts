/**
 * Content-Security-Policy for HTML responses (docs/http.md): the `http.csp.*` directives
 * (each defaulting to `default_src`) or `http.csp.policy` verbatim, or a response's own
 * `resp.csp`, with a fresh per-response nonce added to `script-src` and `style-src`.
 */
import { encodeBase64 } from "./base64.ts";
import { CSP_DIRECTIVES } from "../config/keys.ts";

const DIRECTIVES = CSP_DIRECTIVES;

/** A fresh random nonce (128 bits, base64). */
export function newNonce(): string {
  return encodeBase64(crypto.getRandomValues(new Uint8Array(16)));
}

/**
 * The policy of one response: `override` (a route's `resp.csp`) or the configured one, with
 * `'nonce-<nonce>'` added to `script-src` and `style-src` (created from `default-src` when the
 * policy lacks them).
 */
export function cspFor(
  cfg: Record<string, string | undefined>,
  nonce: string,
  override?: string | null,
): string {
  const base = override ?? cfg.policy ?? configured(cfg);
  return withNonce(base, nonce);
}

/** The policy built from the individual directives. */
function configured(cfg: Record<string, string | undefined>): string {
  const def = cfg.default_src ?? "'self'";
  const parts = [`default-src ${def}`];
  for (const d of DIRECTIVES) parts.push(`${d.replace("_", "-")} ${cfg[d] ?? def}`);
  return parts.join("; ");
}

/** Adds the nonce source to script-src and style-src of a policy. */
export function withNonce(policy: string, nonce: string): string {
  const src = `'nonce-${nonce}'`;
  const parts = policy.split(";").map((p) => p.trim()).filter((p) => p !== "");
  const def = parts.find((p) => /^default-src(\s|$)/i.test(p));
  const defValues = def ? def.slice("default-src".length).trim() : "";
  for (const name of ["script-src", "style-src"]) {
    const i = parts.findIndex((p) => p.toLowerCase().split(/\s+/)[0] === name);
    if (i >= 0) {
      // 'none' cannot be combined with sources: the nonce replaces it.
      const values = parts[i].slice(name.length).trim().split(/\s+/).filter((v) =>
        v !== "" && v !== "'none'"
      );
      parts[i] = [name, ...values, src].join(" ");
    } else {
      const values = defValues.split(/\s+/).filter((v) => v !== "" && v !== "'none'");
      parts.push([name, ...values, src].join(" "));
    }
  }
  return parts.join("; ");
}

/** Whether a response's content type is HTML. */
export function isHtml(contentType: string | null): boolean {
  return contentType !== null && /^\s*text\/html\b/i.test(contentType);
}
