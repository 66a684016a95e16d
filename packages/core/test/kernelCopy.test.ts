import { existsSync, readFileSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { crc32 as zlibCrc32 } from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type ByteSink,
  CRC_RANGE_FROM,
  KERNEL_COPY_FROM,
  KERNEL_COPY_STEP,
  MemorySink,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  bytesSource,
  crc32FileRange,
  isStConvertError,
  pipeTensor,
  tensorFromBytes,
} from "@st-convert/core";
import { type AtomicFileSink, createFileSink, openFileSource } from "@st-convert/core/node";
import { nativeAbsence, nativeIo } from "@st-convert/native";
import { makeTempDir } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const native = nativeIo();
if (native === undefined && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error(`the native module is required here: ${nativeAbsence}`);
const withNative = native === undefined ? describe.skip : describe;

function pattern(length: number, seed = 0): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (i * 131 + seed) % 251);
}

async function fileSink(path: string): Promise<AtomicFileSink> {
  const sink = await createFileSink(path);
  if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
  return sink;
}

withNative("a file sink's kernel copy (copyFrom)", () => {
  it("appends a range of a file in order with the writes around it, buffered or not", async () => {
    const data = pattern(5 * 1024 * 1024 + 17);
    const input = join(dir, "in.bin");
    writeFileSync(input, data);
    const source = await openFileSource(input);
    const sink = await fileSink(join(dir, "out.bin"));
    try {
      await sink.write(Uint8Array.of(1, 2, 3)); // buffered
      await sink.copyFrom(source, 100, 2 * 1024 * 1024);
      await sink.write(Uint8Array.of(4)); // buffered again, after the copy
      const large = pattern(3 * 1024 * 1024, 9);
      await sink.write(large); // written straight
      await sink.copyFrom(source, data.byteLength - 17, 17);
      await sink.patch!(1, Uint8Array.of(0xee)); // a patch in bytes before the copies still lands
      expect(sink.kernelCopied).toBe(2 * 1024 * 1024 + 17);
      await sink.close();
      const out = readFileSync(join(dir, "out.bin"));
      const expected = Buffer.concat([
        Uint8Array.of(1, 0xee, 3),
        data.subarray(100, 100 + 2 * 1024 * 1024),
        Uint8Array.of(4),
        large,
        data.subarray(data.byteLength - 17),
      ]);
      expect(out.equals(expected)).toBe(true);
    } finally {
      await source.close();
    }
  });

  it("declines, having written nothing, a source that is not a local file", async () => {
    const sink = await fileSink(join(dir, "out.bin"));
    expect(sink.copyFrom(bytesSource(pattern(10)), 0, 10)).toBeUndefined();
    await sink.close();
    expect(statSync(join(dir, "out.bin")).size).toBe(0);
  });

  it("refuses a range past the source's end before copying, and a source that shrank while copied", async () => {
    const input = join(dir, "in.bin");
    writeFileSync(input, pattern(2 * 1024 * 1024));
    const source = await openFileSource(input);
    try {
      const sink = await fileSink(join(dir, "out.bin"));
      const past = await sink.copyFrom(source, 1, 2 * 1024 * 1024)!.catch((error: unknown) => error);
      expect(isStConvertError(past) && past.code).toBe("UnexpectedEof");
      await sink.abort();
      truncateSync(input, 1024 * 1024);
      const shrunk = await fileSink(join(dir, "out2.bin"));
      const error = await shrunk.copyFrom(source, 0, 2 * 1024 * 1024)!.catch((e: unknown) => e);
      expect(isStConvertError(error) && error.code).toBe("UnexpectedEof");
      expect(String((error as Error).message)).toMatch(/ended at byte 1048576 while 2097152 were expected/);
      await shrunk.abort();
      expect(readdirSync(dir)).toEqual(["in.bin"]);
    } finally {
      await source.close();
    }
  });

  it("copies through memory, with the same bytes, where the kernel refuses the pair of files (another file system)", async (context) => {
    // /dev/shm is a tmpfs on Linux, the temporary folder usually not: copy_file_range answers EXDEV.
    if (!existsSync("/dev/shm") || statSync("/dev/shm").dev === statSync(dir).dev) {
      context.skip("no second file system to copy from here");
      return;
    }
    const input = join("/dev/shm", `st-convert-kernel-${process.pid}.bin`);
    const data = pattern(3 * 1024 * 1024 + 4096, 3);
    writeFileSync(input, data);
    const source = await openFileSource(input);
    try {
      const sink = await fileSink(join(dir, "out.bin"));
      // Placed alike within a page (4096 → 0): copy_file_range, which refuses the pair.
      await sink.copyFrom(source, 4096, 3 * 1024 * 1024);
      // Refused once: the next copy is declined at once, so its caller pipes the bytes itself, or
      // copies them through memory (copyFromFile).
      expect(sink.copyFrom(source, 0, 5)).toBeUndefined();
      await sink.copyFromFile!(source, 0, 5);
      expect(sink.kernelCopied).toBe(0);
      await sink.close();
      expect(readFileSync(join(dir, "out.bin")).equals(Buffer.concat([data.subarray(4096, 4096 + 3 * 1024 * 1024), data.subarray(0, 5)]))).toBe(true);
    } finally {
      await source.close();
      rmSync(input, { force: true });
    }
  });

  it("copies a range placed otherwise within a page through the native buffer, across file systems too", async (context) => {
    if (!existsSync("/dev/shm") || statSync("/dev/shm").dev === statSync(dir).dev) {
      context.skip("no second file system to copy from here");
      return;
    }
    const input = join("/dev/shm", `st-convert-buffered-${process.pid}.bin`);
    const data = pattern(3 * 1024 * 1024 + 5, 4);
    writeFileSync(input, data);
    const source = await openFileSource(input);
    try {
      const sink = await fileSink(join(dir, "out-buffered.bin"));
      await sink.write(data.subarray(0, 3));
      // Input offset 5, output position 3: a read and a write per buffer, which any pair of files takes.
      await sink.copyFrom(source, 5, 3 * 1024 * 1024);
      expect(sink.kernelCopied).toBe(3 * 1024 * 1024);
      await sink.close();
      const out = readFileSync(join(dir, "out-buffered.bin"));
      expect(out.subarray(0, 3).equals(data.subarray(0, 3))).toBe(true);
      expect(out.subarray(3).equals(data.subarray(5))).toBe(true);
    } finally {
      await source.close();
      rmSync(input, { force: true });
    }
  });
});

withNative("a file sink's copy with the CRC taken as it goes (copyFromCrc32)", () => {
  it("appends the range in order with the writes around it and resolves to its CRC, continued from the previous value", async () => {
    const input = join(dir, "in.bin");
    const data = pattern(6 * 1024 * 1024 + 77, 3);
    writeFileSync(input, data);
    const source = await openFileSource(input);
    const sink = await fileSink(join(dir, "out.bin"));
    try {
      await sink.write(new Uint8Array([1, 2, 3]));
      // Placed alike (offset 3 after 3 bytes) and otherwise, short and past the read-ahead's 4 MiB.
      expect(await sink.copyFromCrc32(source, 3, 1000, 0)).toBe(zlibCrc32(data.subarray(3, 1003)));
      expect(await sink.copyFromCrc32(source, 10, 5 * 1024 * 1024, 0x5eed)).toBe(zlibCrc32(data.subarray(10, 10 + 5 * 1024 * 1024), 0x5eed));
      await sink.write(new Uint8Array([4]));
      await sink.close();
    } finally {
      await source.close();
    }
    const out = new Uint8Array(readFileSync(join(dir, "out.bin")));
    const expected = Buffer.concat([Buffer.from([1, 2, 3]), data.subarray(3, 1003), data.subarray(10, 10 + 5 * 1024 * 1024), Buffer.from([4])]);
    expect(Buffer.from(out).equals(expected)).toBe(true);
    expect(sink.kernelCopied).toBe(1000 + 5 * 1024 * 1024);
  });

  it("declines a source that is not a local file, and names the file where the source ended early", async () => {
    const input = join(dir, "in.bin");
    writeFileSync(input, pattern(3 * 1024 * 1024));
    const source = await openFileSource(input);
    const sink = await fileSink(join(dir, "out.bin"));
    try {
      expect(sink.copyFromCrc32(bytesSource(pattern(10)), 0, 10, 0)).toBeUndefined();
      truncateSync(input, 1024 * 1024 + 10);
      const error = await sink.copyFromCrc32(source, 0, 3 * 1024 * 1024, 0)!.catch((e: unknown) => e);
      expect(isStConvertError(error) && [error.code, error.file]).toEqual(["UnexpectedEof", input]);
    } finally {
      await sink.abort();
      await source.close();
    }
  });
});

withNative("crc32FileRange (the native CRC of a file range)", () => {
  it("is the CRC of the range, continuing from the previous value, for a file source of at least CRC_RANGE_FROM bytes", async () => {
    const input = join(dir, "in.bin");
    const data = pattern(CRC_RANGE_FROM + 4096, 5);
    writeFileSync(input, data);
    const source = await openFileSource(input);
    try {
      const range = data.subarray(7, 7 + CRC_RANGE_FROM);
      expect(await crc32FileRange(source, 7, CRC_RANGE_FROM, 0x1234)).toBe(zlibCrc32(range, 0x1234));
      // Below the threshold, and for a source without a descriptor, the caller reads the bytes itself.
      expect(crc32FileRange(source, 7, CRC_RANGE_FROM - 1, 0)).toBeUndefined();
      expect(crc32FileRange(bytesSource(data), 0, data.byteLength, 0)).toBeUndefined();
    } finally {
      await source.close();
    }
  });

  it("names the file and where it ended when it is shorter than the range (truncated while read)", async () => {
    const input = join(dir, "in.bin");
    writeFileSync(input, pattern(2 * CRC_RANGE_FROM));
    const source = await openFileSource(input);
    try {
      truncateSync(input, CRC_RANGE_FROM + 10);
      const error = await crc32FileRange(source, 0, 2 * CRC_RANGE_FROM, 0)!.catch((e: unknown) => e);
      expect(isStConvertError(error) && [error.code, error.file]).toEqual(["UnexpectedEof", input]);
      expect(String((error as Error).message)).toMatch(`ended at byte ${CRC_RANGE_FROM + 10} while ${2 * CRC_RANGE_FROM} were expected`);
    } finally {
      await source.close();
    }
  });
});

/** A tensor whose bytes lie at offset 3 of a memory source, counting its chunk passes; `extent` shapes its extent. */
function tensorWithExtent(bytes: Uint8Array, extent: (inner: TensorExtent) => TensorExtent): TensorEntry & { passes: number } {
  const base = tensorFromBytes({ name: "w", dtype: "U8", shape: [bytes.byteLength] }, bytes);
  const padded = new Uint8Array(3 + bytes.byteLength).fill(9);
  padded.set(bytes, 3);
  const source = bytesSource(padded);
  const entry = {
    ...base,
    passes: 0,
    chunks(options?: Parameters<TensorEntry["chunks"]>[0]) {
      entry.passes++;
      return base.chunks(options);
    },
    extent: () => extent({ source, offset: 3 }),
  };
  return entry;
}

describe("pipeTensor with an extent", () => {
  /** A sink whose copyFrom records each piece and appends the source's bytes (or declines). */
  class CopyingSink extends MemorySink implements ByteSink {
    readonly pieces: [number, number][] = [];
    constructor(private readonly accept: boolean) {
      super();
    }
    copyFrom(source: { read(o: number, l: number): Promise<Uint8Array> }, offset: number, length: number): Promise<void> | undefined {
      if (!this.accept) return undefined;
      this.pieces.push([offset, length]);
      return source.read(offset, length).then((bytes) => this.write(bytes));
    }
  }

  it("copies a large tensor by its extent, in pieces, telling each, with its check alongside", async () => {
    const bytes = pattern(KERNEL_COPY_FROM + 5);
    let checked = 0;
    const told: number[] = [];
    const tensor = tensorWithExtent(bytes, (inner) => ({ ...inner, check: async () => void checked++, copied: (n) => told.push(n) }));
    const sink = new CopyingSink(true);
    await pipeTensor(tensor, sink);
    expect(sink.pieces).toEqual([[3, KERNEL_COPY_FROM + 5]]);
    expect(told).toEqual([KERNEL_COPY_FROM + 5]);
    expect(checked).toBe(1);
    expect(tensor.passes).toBe(0);
    expect(Buffer.from(sink.bytes()).equals(bytes)).toBe(true);
    expect(KERNEL_COPY_STEP).toBeGreaterThanOrEqual(KERNEL_COPY_FROM);
  });

  it("fails with the check's error, naming the tensor, and stops at a throw from copied()", async () => {
    const bytes = pattern(KERNEL_COPY_FROM);
    const bad = tensorWithExtent(bytes, (inner) => ({ ...inner, check: async () => Promise.reject(new Error("bad CRC")) }));
    const error = await pipeTensor(bad, new CopyingSink(true)).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/bad CRC/);
    const stopped = tensorWithExtent(bytes, (inner) => ({
      ...inner,
      copied: () => {
        throw new Error("aborted");
      },
    }));
    await expect(pipeTensor(stopped, new CopyingSink(true))).rejects.toThrow(/aborted/);
  });

  /** A sink that also takes the CRC as it copies (or declines that, for `copyFrom` and the check instead). */
  class CrcCopyingSink extends CopyingSink {
    readonly crcPieces: [number, number, number][] = [];
    constructor(private readonly fold: boolean) {
      super(true);
    }
    copyFromCrc32(source: { read(o: number, l: number): Promise<Uint8Array> }, offset: number, length: number, previous: number): Promise<number> | undefined {
      if (!this.fold) return undefined;
      this.crcPieces.push([offset, length, previous]);
      return source.read(offset, length).then(async (bytes) => {
        await this.write(bytes);
        return zlibCrc32(bytes, previous);
      });
    }
  }

  it("folds the check into a sink's copy that takes the CRC: from the extent's initial CRC, judged by its finish, with no check pass", async () => {
    const bytes = pattern(KERNEL_COPY_FROM + 9);
    let checked = 0;
    const finished: number[] = [];
    const told: number[] = [];
    const tensor = tensorWithExtent(bytes, (inner) => ({
      ...inner,
      check: async () => void checked++,
      crc32: { initial: async () => 0xabc, finish: async (crc) => void finished.push(crc) },
      copied: (n) => told.push(n),
    }));
    const sink = new CrcCopyingSink(true);
    await pipeTensor(tensor, sink);
    expect(sink.crcPieces).toEqual([[3, KERNEL_COPY_FROM + 9, 0xabc]]);
    expect(sink.pieces).toEqual([]);
    expect(finished).toEqual([zlibCrc32(bytes, 0xabc)]);
    expect(checked).toBe(0);
    expect(told).toEqual([KERNEL_COPY_FROM + 9]);
    expect(Buffer.from(sink.bytes()).equals(bytes)).toBe(true);
    // A finish that refuses the CRC fails the copy, naming the tensor.
    const bad = tensorWithExtent(bytes, (inner) => ({
      ...inner,
      check: async () => {},
      crc32: { initial: async () => 0, finish: async () => Promise.reject(new StConvertError("BadCrc", 'Bad CRC-32 for member "x"')) },
    }));
    const error = await pipeTensor(bad, new CrcCopyingSink(true)).catch((e: unknown) => e);
    expect(isStConvertError(error) && [error.code, error.tensor]).toEqual(["BadCrc", "w"]);
    // A sink that declines the fold copies with the check alongside, as before.
    const declined = tensorWithExtent(bytes, (inner) => ({
      ...inner,
      check: async () => void checked++,
      crc32: { initial: async () => 0, finish: async () => Promise.reject(new Error("not called")) },
    }));
    const plain = new CrcCopyingSink(false);
    await pipeTensor(declined, plain);
    expect([plain.crcPieces, plain.pieces, checked]).toEqual([[], [[3, KERNEL_COPY_FROM + 9]], 1]);
  });

  it("pipes the chunks when the sink declines, and for a tensor below KERNEL_COPY_FROM", async () => {
    const large = tensorWithExtent(pattern(KERNEL_COPY_FROM), (inner) => inner);
    const declining = new CopyingSink(false);
    await pipeTensor(large, declining);
    expect(large.passes).toBe(1);
    expect(Buffer.from(declining.bytes()).equals(pattern(KERNEL_COPY_FROM))).toBe(true);
    const small = tensorWithExtent(pattern(100), (inner) => inner);
    const accepting = new CopyingSink(true);
    await pipeTensor(small, accepting);
    expect(accepting.pieces).toEqual([]);
    expect(small.passes).toBe(1);
  });
});

describe("pipeTensor through a sink's copyFromFile (no kernel copy)", () => {
  /** A sink that takes copies through memory only (copyFromFile), recording each piece. */
  class MemoryCopyingSink extends MemorySink implements ByteSink {
    readonly pieces: [number, number][] = [];
    copyFromFile(source: { read(o: number, l: number): Promise<Uint8Array> }, offset: number, length: number): Promise<void> | undefined {
      this.pieces.push([offset, length]);
      return source.read(offset, length).then((bytes) => this.write(bytes));
    }
  }

  const tensorAt = (bytes: Uint8Array, extra: Partial<TensorExtent> = {}) => tensorWithExtent(bytes, (inner) => ({ ...inner, ...extra }));

  it("copies a large tensor with no check by it, in pieces of KERNEL_COPY_STEP, telling each", async () => {
    const length = KERNEL_COPY_STEP + KERNEL_COPY_FROM;
    const bytes = new Uint8Array(length);
    for (let i = 0; i < length; i++) bytes[i] = (i * 131 + 4) % 251;
    const told: number[] = [];
    const tensor = tensorAt(bytes, { copied: (n) => told.push(n) });
    const sink = new MemoryCopyingSink();
    await pipeTensor(tensor, sink);
    expect(sink.pieces).toEqual([
      [3, KERNEL_COPY_STEP],
      [3 + KERNEL_COPY_STEP, KERNEL_COPY_FROM],
    ]);
    expect(told).toEqual([KERNEL_COPY_STEP, length]);
    expect(tensor.passes).toBe(0);
    expect(Buffer.from(sink.bytes()).equals(bytes)).toBe(true);
  });

  it("pipes the chunks of a tensor whose bytes have a check (it would read them again), and of one below KERNEL_COPY_FROM", async () => {
    for (const extra of [{ check: async () => {} }, { crc32: { initial: async () => 0, finish: async () => {} } }]) {
      const tensor = tensorAt(pattern(KERNEL_COPY_FROM, 1), extra);
      const sink = new MemoryCopyingSink();
      await pipeTensor(tensor, sink);
      expect([sink.pieces, tensor.passes]).toEqual([[], 1]);
      expect(Buffer.from(sink.bytes()).equals(pattern(KERNEL_COPY_FROM, 1))).toBe(true);
    }
    const small = tensorAt(pattern(KERNEL_COPY_FROM - 1));
    const sink = new MemoryCopyingSink();
    await pipeTensor(small, sink);
    expect([sink.pieces, small.passes]).toEqual([[], 1]);
  });
});

describe("a file sink's copy through memory (copyFromFile)", () => {
  it("without the native module: appends ranges of a file in order with the writes around it; declines other sources; names the input that shrank", () => {
    const data = pattern(5 * 1024 * 1024 + 17, 2);
    const input = join(dir, "in.bin");
    const output = join(dir, "out.bin");
    writeFileSync(input, data);
    // A process of its own: this one has loaded the native module, whose sinks copy in the kernel.
    const script = `
      const { bytesSource } = await import(${JSON.stringify(import.meta.resolve("@st-convert/core"))});
      const { createFileSink, openFileSource } = await import(${JSON.stringify(import.meta.resolve("@st-convert/core/node"))});
      const source = await openFileSource(${JSON.stringify(input)});
      const sink = await createFileSink(${JSON.stringify(output)});
      const kernel = sink.copyFrom(source, 0, 10);
      const declined = sink.copyFromFile(bytesSource(new Uint8Array(10)), 0, 10);
      await sink.write(Uint8Array.of(1, 2, 3));
      await sink.copyFromFile(source, 100, 4 * 1024 * 1024 + 1);
      await sink.write(Uint8Array.of(4));
      await sink.copyFromFile(source, ${data.byteLength - 17}, 17);
      await sink.patch(1, Uint8Array.of(0xee));
      let refused;
      await sink.copyFromFile(source, ${data.byteLength - 3}, 4).catch((error) => (refused = error.code));
      await sink.close();
      // The input shrinks under a copy: refused, naming the input, and nothing of the output left
      const { truncateSync } = await import("node:fs");
      const shrunk = await createFileSink(${JSON.stringify(output)} + ".shrunk");
      truncateSync(${JSON.stringify(input)}, 1024 * 1024);
      let ended;
      await shrunk.copyFromFile(source, 0, 4 * 1024 * 1024 + 1).catch((error) => (ended = [error.code, error.file]));
      await shrunk.abort();
      await source.close();
      console.log(JSON.stringify({ kernel: kernel === undefined, declined: declined === undefined, refused, ended, kernelCopied: sink.kernelCopied }));
    `;
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", env: { ...process.env, ST_CONVERT_NATIVE: "0" } });
    expect(run.stderr).toBe("");
    expect(JSON.parse(run.stdout)).toEqual({ kernel: true, declined: true, refused: "UnexpectedEof", ended: ["UnexpectedEof", input], kernelCopied: 0 });
    expect(readdirSync(dir).sort()).toEqual(["in.bin", "out.bin"]);
    const expected = Buffer.concat([
      Uint8Array.of(1, 0xee, 3),
      data.subarray(100, 100 + 4 * 1024 * 1024 + 1),
      Uint8Array.of(4),
      data.subarray(data.byteLength - 17),
    ]);
    expect(readFileSync(output).equals(expected)).toBe(true);
  });

  it.skipIf(native === undefined)("is declined where the kernel copies (copyFrom)", async () => {
    writeFileSync(join(dir, "in.bin"), pattern(10));
    const source = await openFileSource(join(dir, "in.bin"));
    try {
      const sink = await fileSink(join(dir, "out.bin"));
      expect(sink.copyFromFile!(source, 0, 10)).toBeUndefined();
      await sink.close();
    } finally {
      await source.close();
    }
  });
});

withNative("a tensor copied by its runs (TensorEntry.extents)", () => {
  it("copies every run in order, each in the kernel, and refuses runs that do not add up to the tensor", async () => {
    const data = pattern(4 * 1024 * 1024);
    const input = join(dir, "in.bin");
    writeFileSync(input, data);
    const source = await openFileSource(input);
    try {
      const runs = [
        { source, offset: 3 * 1024 * 1024, length: 1024 * 1024 },
        { source, offset: 0, length: 2 * 1024 * 1024 + 5 },
      ];
      const tensor: TensorEntry = {
        ...tensorFromBytes({ name: "t", dtype: "U8", shape: [runs[0]!.length + runs[1]!.length] }, new Uint8Array(runs[0]!.length + runs[1]!.length)),
        extents: () => runs,
      };
      const sink = await fileSink(join(dir, "out.bin"));
      await pipeTensor(tensor, sink);
      expect(sink.kernelCopied).toBe(tensor.byteLength);
      await sink.close();
      // equals(), not toEqual(): the matcher's element-by-element walk of 3 MiB took 10 s.
      expect(readFileSync(join(dir, "out.bin")).equals(Buffer.concat([data.subarray(3 * 1024 * 1024), data.subarray(0, 2 * 1024 * 1024 + 5)]))).toBe(true);
      const short: TensorEntry = { ...tensor, extents: () => [runs[0]!] };
      const again = await fileSink(join(dir, "short.bin"));
      await expect(pipeTensor(short, again)).rejects.toMatchObject({ code: "ByteLengthMismatch" });
      await again.abort();
    } finally {
      await source.close();
    }
  });
});
