/**
 * Standard base64 (RFC 4648 §4, with `=` padding) over byte arrays, in pieces, so that a tensor of
 * any size streams through without ever becoming one string. `btoa`/`Buffer` are not used: the
 * first needs a string, the second is Node-only.
 */

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const ENCODE = Uint8Array.from(ALPHABET, (c) => c.charCodeAt(0));

/** Sextet value of each ASCII byte, or 255 for bytes outside the alphabet (padding included). */
export const BASE64_VALUE: Uint8Array = (() => {
  const table = new Uint8Array(256).fill(255);
  for (let i = 0; i < 64; i++) table[ENCODE[i]!] = i;
  return table;
})();

/**
 * Encodes `bytes[from, to)` into `out` at `pos`; returns the new position. A final group of 1 or
 * 2 bytes is padded, so callers pass whole groups of 3 except at the end of the data.
 */
export function encodeBase64Into(bytes: Uint8Array, from: number, to: number, out: Uint8Array, pos: number): number {
  let i = from;
  const whole = to - ((to - from) % 3);
  for (; i < whole; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out[pos] = ENCODE[n >>> 18]!;
    out[pos + 1] = ENCODE[(n >>> 12) & 63]!;
    out[pos + 2] = ENCODE[(n >>> 6) & 63]!;
    out[pos + 3] = ENCODE[n & 63]!;
    pos += 4;
  }
  const rest = to - i;
  if (rest > 0) {
    const n = (bytes[i]! << 16) | (rest === 2 ? bytes[i + 1]! << 8 : 0);
    out[pos++] = ENCODE[n >>> 18]!;
    out[pos++] = ENCODE[(n >>> 12) & 63]!;
    out[pos++] = rest === 2 ? ENCODE[(n >>> 6) & 63]! : 0x3d;
    out[pos++] = 0x3d;
  }
  return pos;
}

/**
 * Decodes whole groups of 4 characters `text[from, to)` (ASCII bytes; `to − from` a multiple of 4)
 * into `out` at `pos`. `=` may end only the last group. Returns the new position, or −1 − (index of
 * the first character that is not base64).
 */
export function decodeBase64Into(text: Uint8Array, from: number, to: number, out: Uint8Array, pos: number): number {
  for (let i = from; i < to; i += 4) {
    const a = BASE64_VALUE[text[i]!]!;
    const b = BASE64_VALUE[text[i + 1]!]!;
    const c = BASE64_VALUE[text[i + 2]!]!;
    const d = BASE64_VALUE[text[i + 3]!]!;
    if ((a | b | c | d) !== 255) {
      const n = (a << 18) | (b << 12) | (c << 6) | d;
      out[pos] = n >>> 16;
      out[pos + 1] = (n >>> 8) & 255;
      out[pos + 2] = n & 255;
      pos += 3;
      continue;
    }
    // Padding, only in the last group: "xx==" or "xxx=".
    if (i + 4 !== to || a === 255 || b === 255) return -1 - (a === 255 ? i : b === 255 ? i + 1 : i + 2);
    if (text[i + 3] !== 0x3d) return -1 - (i + 3);
    if (c === 255) {
      if (text[i + 2] !== 0x3d) return -1 - (i + 2);
      out[pos++] = ((a << 2) | (b >>> 4)) & 255;
    } else {
      out[pos++] = ((a << 2) | (b >>> 4)) & 255;
      out[pos++] = ((b << 4) | (c >>> 2)) & 255;
    }
  }
  return pos;
}
