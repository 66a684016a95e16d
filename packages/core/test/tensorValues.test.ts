/**
 * Reading values in blocks: a reader's chunks cut anywhere (elements split across chunks, chunks
 * at odd offsets) give the same blocks, statistics, histograms and comparisons as one whole chunk.
 */
import { describe, expect, it } from "vitest";
import { type TensorEntry, BlockReader, diffTensors, tensorFromBytes, tensorHistogram, tensorStats } from "@st-convert/core";

/** `bytes` as a tensor whose reader hands them out in chunks of 1, 2, …, 7 bytes, each at an odd offset of its own buffer. */
function ragged(name: string, dtype: TensorEntry["dtype"], shape: number[], bytes: Uint8Array): TensorEntry {
  const whole = tensorFromBytes({ name, dtype, shape }, bytes);
  return {
    ...whole,
    async *chunks() {
      let at = 0;
      for (let size = 1; at < bytes.byteLength; size = (size % 7) + 1) {
        const piece = bytes.subarray(at, Math.min(at + size, bytes.byteLength));
        const odd = new Uint8Array(piece.byteLength + 1);
        odd.set(piece, 1);
        yield odd.subarray(1);
        at += piece.byteLength;
      }
    },
  };
}

const count = 100_003;
const values = Float32Array.from({ length: count }, (_, i) => (i % 1000 === 0 ? Number.NaN : Math.sin(i) * 1000 + 5));
const bytes = new Uint8Array(values.buffer);

describe("BlockReader", () => {
  it("gives fixed-size blocks of the tensor's bytes, in order, whatever the reader's chunks", async () => {
    const reader = new BlockReader(ragged("x", "F32", [count], bytes), 4096);
    const seen: number[] = [];
    let at = 0;
    for (let block = await reader.next(); block !== undefined; block = await reader.next()) {
      expect(block.byteOffset % 8).toBe(0);
      expect(Buffer.from(block).equals(Buffer.from(bytes.subarray(at, at + block.byteLength)))).toBe(true);
      seen.push(block.byteLength);
      at += block.byteLength;
    }
    expect(at).toBe(bytes.byteLength);
    expect(new Set(seen.slice(0, -1))).toEqual(new Set([4096]));
  });

  it("refuses a reader that delivers fewer bytes than it declares, naming the tensor", async () => {
    const short: TensorEntry = {
      ...tensorFromBytes({ name: "x", dtype: "F32", shape: [4] }, new Uint8Array(16)),
      chunks: async function* () {
        yield new Uint8Array(8);
      },
    };
    const reader = new BlockReader(short, 4096);
    await expect(reader.next()).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "x" });
  });
});

describe("values from ragged chunks", () => {
  it("give the statistics and histogram of the whole tensor", async () => {
    const whole = tensorFromBytes({ name: "x", dtype: "F32", shape: [count] }, bytes);
    const stats = await tensorStats(ragged("x", "F32", [count], bytes));
    expect(stats).toEqual(await tensorStats(whole));
    expect(stats.nan).toBe(101);
    const histogram = await tensorHistogram(ragged("x", "F32", [count], bytes), { bins: 10 });
    expect(histogram?.counts.reduce((a, b) => a + b, 0)).toBe(count - 101);
    expect(histogram).toEqual(await tensorHistogram(whole, { bins: 10 }));
  });

  it("compare equal to the whole tensor, exactly and with tolerances", async () => {
    const left = { metadata: null, tensors: [ragged("x", "F32", [count], bytes)] };
    const right = { metadata: null, tensors: [tensorFromBytes({ name: "x", dtype: "F32", shape: [count] }, bytes)] };
    expect((await diffTensors(left, right)).same).toBe(true);
    expect((await diffTensors({ metadata: null, tensors: [ragged("x", "F32", [count], bytes)] }, right, { atol: 0 })).same).toBe(true);
    const changed = Float32Array.from(values);
    changed[77_777] = 1e6;
    const other = { metadata: null, tensors: [tensorFromBytes({ name: "x", dtype: "F32", shape: [count] }, new Uint8Array(changed.buffer))] };
    const found = await diffTensors({ metadata: null, tensors: [ragged("x", "F32", [count], bytes)] }, other);
    expect(found.tensors[0]).toMatchObject({ status: "values", differing: 1, firstIndex: [77_777] });
  });
});
