/**
 * Strict UTF-8 decoding of request bodies: the ASCII fast path and the TextDecoder paths give the
 * same text, and invalid bytes are 400 QUERY_INVALID on both sides of the fast path's size limit.
 */
import assert from "node:assert/strict";
import { ASCII_MAX, decodeUtf8 } from "../../src/request/body.ts";
import { SvcError } from "../../src/svc_error.ts";

const enc = new TextEncoder();

Deno.test("decodeUtf8: ASCII, multi-byte and every byte length around the fast path's limit", () => {
  for (const text of ["", "{}", '{"relation":"track","where":["=","track_id",1]}', "\x00\x7f"]) {
    assert.equal(decodeUtf8(enc.encode(text)), text);
  }
  for (const n of [ASCII_MAX - 1, ASCII_MAX, ASCII_MAX + 1, 2048, 5000]) {
    const ascii = "a".repeat(n);
    assert.equal(decodeUtf8(enc.encode(ascii)), ascii);
    // A multi-byte character at the end, the middle and the start.
    for (const text of [ascii.slice(2) + "é", "ü" + ascii.slice(2), ascii.slice(0, n >> 1) + "€"]) {
      assert.equal(decodeUtf8(enc.encode(text)), text);
    }
  }
  assert.equal(decodeUtf8(enc.encode("名前 🎵")), "名前 🎵");
});

Deno.test("decodeUtf8: invalid UTF-8 is 400 QUERY_INVALID, short or long", () => {
  const bad = [
    [0xff],
    [0x41, 0x80], // a lone continuation byte
    [0xc3], // a truncated sequence
    [0xed, 0xa0, 0x80], // an encoded surrogate
    [0xc0, 0xaf], // an overlong form
  ];
  for (const tail of bad) {
    for (const n of [0, 10, ASCII_MAX, 2048, 3000]) {
      const bytes = new Uint8Array([...enc.encode("a".repeat(n)), ...tail]);
      assert.throws(
        () => decodeUtf8(bytes),
        (e) => e instanceof SvcError && e.code === "QUERY_INVALID" && e.status === 400,
      );
    }
  }
});

Deno.test("decodeUtf8: a real U+FFFD is text; beside invalid bytes it is still refused", () => {
  for (const n of [0, ASCII_MAX, 2048]) {
    const text = "a".repeat(n) + "\uFFFD" + "b";
    assert.equal(decodeUtf8(enc.encode(text)), text);
    const bytes = new Uint8Array([...enc.encode(text), 0xff]);
    assert.throws(
      () => decodeUtf8(bytes),
      (e) => e instanceof SvcError && e.code === "QUERY_INVALID" && e.status === 400,
    );
  }
});
