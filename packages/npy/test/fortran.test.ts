/**
 * The Fortran-order repack against a direct index computation, for random shapes, element sizes
 * and slab budgets (many slabs, split axes past the first), through random-access and
 * forward-only readers.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { StreamCursor } from "../src/Payload.js";
import { type RangeReader, fortranToC, reverseAxes } from "../src/fortranToC.js";

/** Element i of the C-order output, read from Fortran-order storage by its multi-index. */
function naive(stored: Uint8Array, shape: readonly number[], itemSize: number): Uint8Array {
  const n = shape.reduce((a, d) => a * d, 1);
  const out = new Uint8Array(n * itemSize);
  const index = new Array<number>(shape.length).fill(0);
  for (let i = 0; i < n; i++) {
    let f = 0;
    let stride = 1;
    for (let k = 0; k < shape.length; k++) {
      f += index[k]! * stride;
      stride *= shape[k]!;
    }
    out.set(stored.subarray(f * itemSize, (f + 1) * itemSize), i * itemSize);
    for (let k = shape.length - 1; k >= 0; k--) {
      if (++index[k]! < shape[k]!) break;
      index[k] = 0;
    }
  }
  return out;
}

const randomReader = (bytes: Uint8Array): RangeReader => ({ random: true, read: async (o, l) => bytes.subarray(o, o + l) });

function forwardReader(bytes: Uint8Array, piece: number): StreamCursor & { passes: number } {
  let passes = 0;
  const cursor = new StreamCursor(async function* () {
    passes++;
    for (let at = 0; at < bytes.byteLength; at += piece) yield bytes.subarray(at, at + piece);
  }) as StreamCursor & { passes: number };
  Object.defineProperty(cursor, "passes", { get: () => passes });
  return cursor;
}

async function collect(chunks: AsyncIterable<Uint8Array>, chunkSize: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const c of chunks) {
    expect(c.byteLength).toBeLessThanOrEqual(chunkSize);
    parts.push(new Uint8Array(c));
  }
  return Buffer.concat(parts);
}

describe("fortranToC", () => {
  it("equals the direct index computation for any shape, element size, slab and chunk", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 0, max: 7 }), { minLength: 0, maxLength: 5 }),
        fc.constantFrom(1, 2, 4, 8),
        fc.integer({ min: 1, max: 4000 }),
        fc.integer({ min: 1, max: 300 }),
        fc.boolean(),
        fc.integer({ min: 1, max: 50 }),
        async (shape, itemSize, slab, chunk, random, piece) => {
          const total = shape.reduce((a, d) => a * d, 1) * itemSize;
          const stored = Uint8Array.from({ length: total }, (_, i) => (i * 131 + 7) & 0xff);
          const chunkSize = Math.max(itemSize, chunk - (chunk % itemSize));
          const reader = random ? randomReader(stored) : forwardReader(stored, piece);
          const out = await collect(fortranToC(reader, shape, itemSize, { slabSize: slab, chunkSize }), chunkSize);
          expect(Buffer.from(out).equals(Buffer.from(naive(stored, shape, itemSize)))).toBe(true);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("uses one pass of a forward-only reader when one slab holds the array", async () => {
    const shape = [6, 5, 4];
    const stored = Uint8Array.from({ length: 120 * 4 }, (_, i) => i & 0xff);
    const reader = forwardReader(stored, 64);
    await collect(fortranToC(reader, shape, 4, { chunkSize: 1024 }), 1024);
    expect(reader.passes).toBe(1);
  });

  it("splits past the first axis when one index of it exceeds the slab (a 2 × 1000 array, 64-byte slabs)", async () => {
    const shape = [2, 1000];
    const stored = Uint8Array.from({ length: 2000 * 4 }, (_, i) => (i * 17) & 0xff);
    const out = await collect(fortranToC(randomReader(stored), shape, 4, { slabSize: 64, chunkSize: 64 }), 64);
    expect(Buffer.from(out).equals(Buffer.from(naive(stored, shape, 4)))).toBe(true);
  });

  it("hands out fresh buffers the consumer may keep and modify", async () => {
    const shape = [8, 8];
    const stored = Uint8Array.from({ length: 64 * 2 }, (_, i) => i);
    const kept: Uint8Array[] = [];
    for await (const c of fortranToC(randomReader(stored), shape, 2, { slabSize: 32, chunkSize: 32 })) kept.push(c);
    const expected = naive(stored, shape, 2);
    expect(Buffer.from(Buffer.concat(kept)).equals(Buffer.from(expected))).toBe(true);
    kept[0]!.fill(0);
    expect(stored[0]).toBe(0);
    expect(stored[1]).toBe(1);
  });
});

describe("reverseAxes", () => {
  it("reverses any number of axes with elements of any size", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 6 }), fc.integer({ min: 1, max: 40 }), (shape, itemSize) => {
        const total = shape.reduce((a, d) => a * d, 1) * itemSize;
        const src = Uint8Array.from({ length: total }, (_, i) => (i * 29) & 0xff);
        // A C-order array of `shape` is the Fortran storage of the reversed shape.
        const expected = naive(src, [...shape].reverse(), itemSize);
        const result = reverseAxes(new Uint8Array(src), new Uint8Array(total), shape, itemSize);
        expect(Buffer.from(result).equals(Buffer.from(expected))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});
