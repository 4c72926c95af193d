/** Base64 without dependencies (standard alphabet, padded). */

/** Encodes bytes as base64. */
export function encodeBase64(bytes: Uint8Array): string {
  let s = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    s += String.fromCharCode(...bytes.subarray(i, i + step));
  }
  return btoa(s);
}
