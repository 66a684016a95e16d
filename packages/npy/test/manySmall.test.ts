/**
 * Archives of many small members cost few reads and writes, not a few per member: the central
 * directory and the members are read in large blocks, small members are kept from them, and the
 * writer gathers headers, small members and directory entries into large writes. Counted, not
 * timed (no timing assumptions in tests).
 */
import { describe, expect, it } from "vitest";
import { type ByteSink, type ByteSource, MemorySink, bytesSource, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { readNpy, readNpz, writeNpz } from "@st-convert/npy";
import { smallNpy } from "./build.js";

const COUNT = 2000;
const tensors = Array.from({ length: COUNT }, (_, i) =>
  tensorFromBytes({ name: `t${i}`, dtype: "F32", shape: [2] }, new Uint8Array(new Float32Array([i, i + 0.5]).buffer)),
);

/** A sink that counts its writes. */
function countingSink(): ByteSink & { writes: number; bytes(): Uint8Array } {
  const inner = new MemorySink();
  const sink = {
    writes: 0,
    async write(chunk: Uint8Array) {
      sink.writes++;
      await inner.write(chunk);
    },
    close: () => inner.close(),
    abort: () => inner.abort(),
    bytes: () => inner.bytes(),
  };
  return sink;
}

/** A source that counts its reads. */
function countingSource(bytes: Uint8Array): ByteSource & { reads: number } {
  const inner = bytesSource(bytes, "many.npz");
  const source = {
    name: "many.npz",
    size: inner.size,
    reads: 0,
    read(offset: number, length: number) {
      source.reads++;
      return inner.read(offset, length);
    },
  };
  return source;
}

describe(`${COUNT} small tensors`, () => {
  it("are written to an npz in a handful of writes", async () => {
    const sink = countingSink();
    await writeNpz({ metadata: null, tensors }, sink);
    // Headers, members and directory entries gathered into 1 MiB writes: the archive is ~300 KB.
    expect(sink.writes).toBeLessThanOrEqual(2);
  });

  it("are read from an npz in a handful of reads, and their bytes need none of their own", async () => {
    const sink = countingSink();
    await writeNpz({ metadata: null, tensors }, sink);
    const source = countingSource(sink.bytes());
    const file = await readNpz(source);
    expect(file.tensors).toHaveLength(COUNT);
    const opened = source.reads;
    expect(opened).toBeLessThanOrEqual(6);
    for (const [i, t] of file.tensors.entries()) expect([...new Float32Array((await readTensorBytes(t)).buffer)]).toEqual([i, i + 0.5]);
    expect(source.reads).toBe(opened);
  });

  it("are still read right, one read per member, when none may be kept", async () => {
    const sink = countingSink();
    await writeNpz({ metadata: null, tensors: tensors.slice(0, 50) }, sink);
    const source = countingSource(sink.bytes());
    const file = await readNpz(source, { maxKeptBytes: 0 });
    for (const [i, t] of file.tensors.entries()) expect([...new Float32Array((await readTensorBytes(t)).buffer)]).toEqual([i, i + 0.5]);
  });
});

it("a small .npy takes one read, for its header and its data", async () => {
  const bytes = smallNpy();
  let reads = 0;
  const inner = bytesSource(bytes, "a.npy");
  const file = await readNpy({
    name: "a.npy",
    size: inner.size,
    read(offset, length) {
      reads++;
      return inner.read(offset, length);
    },
  });
  expect(file.tensors[0]!.shape).toEqual([2, 3]);
  expect([...new Float32Array((await readTensorBytes(file.tensors[0]!)).slice().buffer)]).toEqual([0, 1, 2, 3, 4, 5]);
  expect(reads).toBe(1);
});
