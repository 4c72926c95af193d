/**
 * How long fetched IdP metadata may be used: `saml.<name>.metadata_refresh`, shortened by the
 * metadata's own `cacheDuration` (an xs:duration) and `validUntil` (on the EntityDescriptor, an
 * enclosing EntitiesDescriptor or a role descriptor). Metadata already past its validUntil is
 * refused.
 */
import { parseXml } from "./saml_verify.ts";

/** When to fetch the metadata again and when it stops being usable. */
export interface MetadataTiming {
  /** Milliseconds until the next fetch. */
  refreshIn: number;
  /** The earliest validUntil (ms since the epoch), if any. */
  expiresAt?: number;
}

/** Milliseconds of the duration's fields in order: years, months, days, hours, minutes, seconds. */
const UNITS = [365 * 86400_000, 30 * 86400_000, 86400_000, 3600_000, 60_000, 1000];

/** An xs:duration (`P1DT2H`, `PT30M`) in milliseconds; undefined when it is not one. */
export function durationMs(text: string): number | undefined {
  const m =
    /^P(?:(\d+(?:\.\d+)?)Y)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/
      .exec(text.trim());
  if (!m || text.trim() === "P" || text.trim().endsWith("T")) return undefined;
  let ms = 0;
  UNITS.forEach((unit, i) => {
    if (m[i + 1] !== undefined) ms += Number(m[i + 1]) * unit;
  });
  return ms;
}

/** The timing of metadata `xml` fetched at `now`; throws when it has expired. */
export function metadataTiming(
  xml: string,
  refreshSeconds: number,
  now = Date.now(),
): MetadataTiming {
  const doc = parseXml(xml);
  let refreshIn = refreshSeconds * 1000;
  let expiresAt: number | undefined;
  const all = doc.getElementsByTagNameNS("*", "*") as unknown as ArrayLike<Element>;
  for (const el of Array.from(all)) {
    const until = el.getAttribute("validUntil");
    if (until) {
      const t = /(Z|[+-]\d{2}:\d{2})$/.test(until.trim()) ? Date.parse(until) : NaN;
      if (!Number.isFinite(t)) throw new Error(`IdP metadata has an unreadable validUntil`);
      expiresAt = Math.min(expiresAt ?? Infinity, t);
    }
    const cache = el.getAttribute("cacheDuration");
    const ms = cache ? durationMs(cache) : undefined;
    if (ms !== undefined) refreshIn = Math.min(refreshIn, ms);
  }
  if (expiresAt !== undefined) {
    if (expiresAt <= now) {
      throw new Error(`IdP metadata expired at ${new Date(expiresAt).toISOString()} (validUntil)`);
    }
    refreshIn = Math.min(refreshIn, expiresAt - now);
  }
  return { refreshIn, expiresAt };
}
