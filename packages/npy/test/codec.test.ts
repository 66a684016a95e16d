/**
 * The codec adapter: node:zlib and fflate agree with each other and with zlib's CRC-32, refuse
 * broken streams with StConvertError, and stop (without hanging) when the consumer stops.
 */
import { crc32, deflateRawSync } from "node:zlib";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isStConvertError, swapBytesInPlace, swapBytesPortable } from "@st-convert/core";
import { loadCodec } from "@st-convert/npy";
import { tableCrc32 } from "../src/Codec.js";

async function* pieces(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.byteLength; at += size) yield bytes.subarray(at, at + size);
}

async function all(chunks: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const c of chunks) parts.push(new Uint8Array(c));
  return Buffer.concat(parts);
}

const sample = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i % 97 < 40 ? 0 : (i * 2654435761) >>> 24));

describe("codec", () => {
  it("both codecs continue a CRC through an empty chunk", async () => {
    for (const codec of [await loadCodec(), await loadCodec("fflate")]) {
      expect(codec.crc32(Uint8Array.from([]), 0xdeadbeef)).toBe(0xdeadbeef);
      expect(codec.crc32(new Uint8Array(new ArrayBuffer(0)), 7)).toBe(7);
    }
  });

  it("node:zlib under Node, fflate on request", async () => {
    expect((await loadCodec()).name).toBe("node:zlib");
    expect((await loadCodec("fflate")).name).toBe("fflate");
  });

  it("the table CRC-32 equals zlib's, at any length and alignment", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 300 }),
        fc.integer({ min: 0, max: 7 }),
        fc.integer({ min: 0, max: 0xffffffff }),
        (data, skip, seed) => {
          const view = data.subarray(Math.min(skip, data.byteLength - 1));
          expect(tableCrc32(view, seed)).toBe(crc32(view, seed));
        },
      ),
    );
    const big = sample(1 << 20);
    // An empty chunk continues the CRC (zlib itself returns 0 for an empty buffer with no backing store).
    expect(tableCrc32(new Uint8Array(new ArrayBuffer(0)), 0x1234)).toBe(0x1234);
    expect(tableCrc32(big.subarray(0, 500_000), tableCrc32(big.subarray(500_000)))).not.toBe(crc32(big));
    expect(tableCrc32(big.subarray(500_000), tableCrc32(big.subarray(0, 500_000)))).toBe(crc32(big));
  });

  it.each(["node:zlib", "fflate"] as const)("%s deflates what both inflate back, in any piece size", async (name) => {
    const codec = await loadCodec(name === "fflate" ? "fflate" : undefined);
    const other = await loadCodec(name === "fflate" ? undefined : "fflate");
    const data = sample(3_000_000);
    for (const piece of [1 << 20, 4093]) {
      const compressed = await all(codec.deflateRaw(pieces(data, piece), 6));
      expect(compressed.byteLength).toBeLessThan(data.byteLength);
      expect(Buffer.from(await all(codec.inflateRaw(pieces(compressed, piece)))).equals(data)).toBe(true);
      expect(Buffer.from(await all(other.inflateRaw(pieces(compressed, 777)))).equals(data)).toBe(true);
    }
  });

  it.each(["node:zlib", "fflate"] as const)("%s refuses truncated and invalid streams with BadZipFile", async (name) => {
    const codec = await loadCodec(name === "fflate" ? "fflate" : undefined);
    const compressed = deflateRawSync(sample(100_000));
    for (const broken of [compressed.subarray(0, compressed.byteLength >> 1), Uint8Array.of(0xff, 0xff, 0xff, 0xff), new Uint8Array(0)]) {
      const error = await all(codec.inflateRaw(pieces(broken, 1000))).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isStConvertError(error), String(error)).toBe(true);
      expect((error as { code: string }).code).toBe("BadZipFile");
    }
  });

  it.each(["node:zlib", "fflate"] as const)("%s stops when the consumer stops, without inflating the rest", async (name) => {
    const codec = await loadCodec(name === "fflate" ? "fflate" : undefined);
    const bomb = deflateRawSync(new Uint8Array(512 * 1024 * 1024));
    let pulled = 0;
    const input = (async function* () {
      for await (const p of pieces(bomb, 1024)) {
        pulled += p.byteLength;
        yield p;
      }
    })();
    const started = performance.now();
    let seen = 0;
    for await (const chunk of codec.inflateRaw(input)) {
      seen += chunk.byteLength;
      if (seen > 4 * 1024 * 1024) break;
    }
    expect(performance.now() - started).toBeLessThan(1500);
    expect(pulled).toBeLessThan(bomb.byteLength / 4);
  });

  it("passes an input error through as it is", async () => {
    const codec = await loadCodec();
    const failing = (async function* () {
      yield deflateRawSync(sample(10)).subarray(0, 3);
      throw new Error("disk on fire");
    })();
    await expect(all(codec.inflateRaw(failing))).rejects.toThrow("disk on fire");
  });
});

describe("byte swapping", () => {
  it("the portable loops (browsers) equal Node's Buffer.swap16/32/64, aligned or not", () => {
    for (const unit of [2, 4, 8]) {
      for (const offset of [0, 1, 2, 4]) {
        const data = Uint8Array.from({ length: 8 * 37 + offset }, (_, i) => (i * 67) & 0xff);
        const view = data.subarray(offset, offset + unit * 37);
        const portable = new Uint8Array(view);
        swapBytesPortable(portable, unit);
        const node = Buffer.from(view);
        if (unit === 2) node.swap16();
        else if (unit === 4) node.swap32();
        else node.swap64();
        expect(Buffer.from(portable).equals(node)).toBe(true);
        const inPlace = new Uint8Array(view);
        swapBytesInPlace(inPlace, unit);
        expect(Buffer.from(inPlace).equals(node)).toBe(true);
      }
    }
  });
});
