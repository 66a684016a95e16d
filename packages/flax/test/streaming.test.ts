/**
 * Constant memory: the reader walks the structure in small windows and never reads array bytes
 * while listing; array bytes are read on demand in bounded chunks. Checked on virtual files of
 * several GiB whose array bytes are never materialized.
 */
import { describe, expect, it } from "vitest";
import type { ByteSource } from "@st-convert/core";
import { readFlax } from "@st-convert/flax";
import { arr, bin, cat, ext, map, str, uint } from "./msgpackBytes.js";

const GiB = 2 ** 30;

/** The header bytes of an ndarray ext whose `n` data bytes follow. */
function arrayHead(n: number): Uint8Array {
  const head = cat(arr(3), arr(1), uint(n), str("uint8"), bin(n));
  return cat(ext(1, head.byteLength + n), head);
}

/**
 * A source made of real bytes and virtual runs of zeros, recording what is read. Structure
 * (`Uint8Array` parts) is served as is; a number part is that many bytes of array data.
 */
function virtualFile(parts: (Uint8Array | number)[]): { source: ByteSource; reads: [number, number][] } {
  const layout: { at: number; part: Uint8Array | number }[] = [];
  let size = 0;
  for (const part of parts) {
    layout.push({ at: size, part });
    size += typeof part === "number" ? part : part.byteLength;
  }
  const reads: [number, number][] = [];
  const source: ByteSource = {
    size,
    name: "virtual.msgpack",
    async read(offset, length) {
      reads.push([offset, length]);
      const out = new Uint8Array(length);
      for (const { at, part } of layout) {
        if (typeof part === "number") continue;
        const from = Math.max(offset, at);
        const to = Math.min(offset + length, at + part.byteLength);
        if (from < to) out.set(part.subarray(from - at, to - at), from - offset);
      }
      return out;
    },
  };
  return { source, reads };
}

describe("constant memory on files of any size", () => {
  it("lists a 3 GiB array and the arrays after it reading only a few windows", async () => {
    const { source, reads } = virtualFile([cat(map(2), str("huge")), arrayHead(3 * GiB), 3 * GiB, cat(str("small"), arrayHead(2)), Uint8Array.of(1, 2)]);
    const file = await readFlax(source);
    expect(file.tensors.map((t) => [t.name, t.dtype, t.shape, t.byteLength])).toEqual([
      ["huge", "U8", [3 * GiB], 3 * GiB],
      ["small", "U8", [2], 2],
    ]);
    const total = reads.reduce((n, [, length]) => n + length, 0);
    expect(total).toBeLessThan(256 * 1024);
  });

  it("reassembles a 5 GiB chunked array (past Node's 4 GiB Buffer limit) as one tensor", async () => {
    const chunks = Array.from({ length: 5 }, (_, i) => [cat(str(String(i))), arrayHead(GiB), GiB] as const).flat();
    const dims = cat(map(1), str("0"), [0xcf, 0, 0, 0, 1, 0x40, 0, 0, 0]);
    const { source, reads } = virtualFile([
      cat(map(1), str("embedding"), map(3), str("__msgpack_chunked_array__"), [0xc3], str("shape"), dims, str("chunks"), map(5)),
      ...chunks,
    ]);
    const file = await readFlax(source);
    const [t] = file.tensors;
    expect([t!.name, t!.shape, t!.byteLength, t!.ranges.length]).toEqual(["embedding", [5 * GiB], 5 * GiB, 5]);
    expect(reads.reduce((n, [, length]) => n + length, 0)).toBeLessThan(512 * 1024);

    // Reading the bytes requests chunkSize at most, in order, from the chunks' ranges.
    reads.length = 0;
    let seen = 0;
    const chunkSize = 64 * 1024 * 1024;
    for await (const chunk of t!.chunks({ chunkSize })) {
      seen += chunk.byteLength;
      if (seen >= GiB + chunkSize) break;
    }
    expect(Math.max(...reads.map(([, length]) => length))).toBe(chunkSize);
    // 16 reads cover chunk "0"; the 17th starts at chunk "1"'s bytes.
    expect(reads[16]![0]).toBe(t!.ranges[1]![0]);
  });
});
