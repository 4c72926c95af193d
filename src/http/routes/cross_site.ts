/**
 * Whether a route request came from another site's page: a form there can post
 * `application/x-www-form-urlencoded` (or multipart, or text) to a route without a CORS preflight,
 * with the visitor's cookies, and a login route answering it would put the visitor in the
 * attacker's account (login CSRF). Such a request may not mint a session
 * (src/http/routes/response.ts; docs/routes.md).
 *
 * @module
 */

/**
 * True for a request from another site: `Sec-Fetch-Site: cross-site` (what browsers send), or,
 * without it, an `Origin` whose host is neither the request's nor `publicHost`
 * (`http.public_host`: the host a proxy in front answers for). An origin listed exactly in
 * `http.cors.allowed_origins` is trusted (a separate front end logging in through `fetch`).
 */
export function isCrossSite(
  req: Request,
  allowedOrigins: readonly string[],
  publicHost?: string,
): boolean {
  const origin = req.headers.get("origin");
  if (origin !== null && origin !== "null" && allowedOrigins.includes(origin)) return false;
  const site = req.headers.get("sec-fetch-site");
  if (site !== null) return site === "cross-site";
  if (origin === null) return false;
  if (origin === "null") return true;
  try {
    const host = new URL(origin).host;
    return host !== new URL(req.url).host && host !== publicHost;
  } catch {
    return true;
  }
}
