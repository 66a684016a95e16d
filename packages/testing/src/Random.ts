/**
 * A small seeded generator (sfc32, seeded through splitmix32) for the differential fuzzer: every
 * mutant is a function of (seed, format, index), so a failure reproduces from its numbers alone,
 * whatever ran before it.
 */
export class Random {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  /** A generator for the given numbers (any count, any 32-bit values). */
  constructor(...seeds: readonly number[]) {
    let h = 0x9e3779b9;
    const mix = (): number => {
      h = (h + 0x9e3779b9) | 0;
      let z = h;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    for (const s of seeds) h = (h ^ Math.imul(s | 0, 0x27d4eb2d)) | 0;
    this.#a = mix();
    this.#b = mix();
    this.#c = mix();
    this.#d = mix();
    for (let i = 0; i < 12; i++) this.uint32();
  }

  /** The next 32 random bits. */
  uint32(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0;
    this.#d = (this.#d + 1) | 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) | 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) | 0;
    return t >>> 0;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    if (n <= 0) return 0;
    return Math.floor((this.uint32() / 2 ** 32) * n);
  }

  /** An integer in [min, max]. */
  range(min: number, max: number): number {
    return min + this.int(max - min + 1);
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.uint32() / 2 ** 32 < p;
  }

  /** One of `items` (which must not be empty). */
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  /** `n` random bytes. */
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.uint32() & 0xff;
    return out;
  }
}

/** The bytes of `parts`, one after the other, in a new array. */
export function joinBytes(...parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** `bytes` with `[start, end)` replaced by `insert`. */
export function splice(bytes: Uint8Array, start: number, end: number, insert: Uint8Array = new Uint8Array(0)): Uint8Array {
  return joinBytes(bytes.subarray(0, start), insert, bytes.subarray(end));
}

const encoder = new TextEncoder();

/** UTF-8 bytes of a string (lone surrogates become U+FFFD: use raw bytes to write those). */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Bytes of a latin-1 string (each code unit below 256 one byte). */
export function latin1(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff);
}
