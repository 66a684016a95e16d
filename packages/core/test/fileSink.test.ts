import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, rmdirSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { SINK_BUFFER_SIZE, SYNC_IO_BELOW, createFileSink, createScratchFile, openFileSource, replaceFile } from "@st-convert/core/node";
import { nativeAbsence, nativeIo } from "@st-convert/native";
import { makeTempDir } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

describe("file sink", () => {
  it("writes a large output to a temporary file and links it into place on close", async () => {
    const target = join(dir, "out.bin");
    const sink = await createFileSink(target);
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    const bytes = Uint8Array.from({ length: 3 * SINK_BUFFER_SIZE }, (_, i) => i % 251);
    await sink.write(bytes);
    expect(existsSync(target)).toBe(false);
    expect(existsSync(sink.tempPath)).toBe(true);
    await sink.close();
    expect(Buffer.compare(readFileSync(target), bytes)).toBe(0);
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  it("creates a small new output at its name on close, whole, with no temporary file at any point", async () => {
    const target = join(dir, "out.bin");
    const sink = await createFileSink(target);
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    for (let i = 0; i < 1000; i++) await sink.write(Uint8Array.of(i & 0xff, 1, 2));
    expect(readdirSync(dir)).toEqual([]);
    await sink.close();
    expect(readdirSync(dir)).toEqual(["out.bin"]);
    expect([...readFileSync(target).subarray(0, 6)]).toEqual([0, 1, 2, 1, 1, 2]);
    expect(statSync(target).size).toBe(3000);
    // Created as any new file is: 0666 less the umask.
    const umask = process.umask();
    expect(statSync(target).mode & 0o777).toBe(0o666 & ~umask);
  });

  it("an empty new output is still created", async () => {
    const target = join(dir, "empty.bin");
    const sink = await createFileSink(target);
    await sink.close();
    expect(readdirSync(dir)).toEqual(["empty.bin"]);
    expect(statSync(target).size).toBe(0);
  });

  it("with force, a small output replaces a file that appeared meanwhile, through a rename", async () => {
    const target = join(dir, "out.bin");
    const sink = await createFileSink(target, { force: true });
    await sink.write(Uint8Array.of(7, 8));
    writeFileSync(target, "other");
    await sink.close();
    expect([...readFileSync(target)]).toEqual([7, 8]);
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  it("a small output that cannot be created on close() fails it with the creation's error", async () => {
    const folder = join(dir, "gone");
    mkdirSync(folder);
    const sink = await createFileSink(join(folder, "out.bin"));
    await sink.write(Uint8Array.of(1));
    rmdirSync(folder);
    await expect(sink.close()).rejects.toMatchObject({ code: "Io", rule: expect.stringMatching(/cannot create the output/) });
    expect(readdirSync(dir)).toEqual([]);
  });

  it("leaves nothing behind on abort", async () => {
    const sink = await createFileSink(join(dir, "out.bin"));
    await sink.write(Uint8Array.of(1));
    await sink.abort();
    await sink.abort();
    expect(readdirSync(dir)).toEqual([]);
  });

  it("never replaces an existing file without force", async () => {
    const target = join(dir, "out.bin");
    writeFileSync(target, "keep");
    await expect(createFileSink(target)).rejects.toMatchObject({ code: "OutputExists" });
    expect(readFileSync(target, "utf8")).toBe("keep");
  });

  it("refuses to put the output in place if a file appeared meanwhile", async () => {
    const target = join(dir, "out.bin");
    const sink = await createFileSink(target);
    await sink.write(Uint8Array.of(9));
    writeFileSync(target, "keep");
    await expect(sink.close()).rejects.toMatchObject({ code: "OutputExists" });
    expect(readFileSync(target, "utf8")).toBe("keep");
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  it("replaces an existing file with force", async () => {
    const target = join(dir, "out.bin");
    writeFileSync(target, "old");
    const sink = await createFileSink(target, { force: true });
    await sink.write(new TextEncoder().encode("new"));
    await sink.close();
    expect(readFileSync(target, "utf8")).toBe("new");
  });

  it("reports a missing directory as an Io error", async () => {
    await expect(createFileSink(join(dir, "missing", "out.bin"))).rejects.toMatchObject({ code: "Io" });
  });
});

describe("replacing an existing output (force)", () => {
  const native = nativeIo();
  if (native === undefined && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error(`the native module is required here: ${nativeAbsence}`);
  const withNative = native === undefined ? it.skip : it;
  const big = Uint8Array.from({ length: 3 * SINK_BUFFER_SIZE }, (_, i) => (i * 7) % 253);

  async function writeOver(target: string): Promise<void> {
    const sink = await createFileSink(target, { force: true });
    await sink.write(big);
    await sink.close();
  }

  withNative("swaps the new file in (no rename over the old one), removes the old one and leaves nothing else", async () => {
    const target = join(dir, "out.bin");
    writeFileSync(target, "old bytes");
    const exchange = vi.spyOn(native!, "exchangePaths");
    try {
      await writeOver(target);
      expect(exchange).toHaveBeenCalledTimes(1);
      expect(exchange.mock.calls[0]![1]).toBe(target);
    } finally {
      exchange.mockRestore();
    }
    expect(Buffer.compare(readFileSync(target), big)).toBe(0);
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  withNative("renames where the file system cannot swap (the swap fails), with the same result", async () => {
    const target = join(dir, "out.bin");
    writeFileSync(target, "old bytes");
    const exchange = vi.spyOn(native!, "exchangePaths").mockImplementation(() => {
      throw Object.assign(new Error("Invalid argument"), { errno: 22 });
    });
    try {
      await writeOver(target);
      expect(exchange).toHaveBeenCalledTimes(1);
    } finally {
      exchange.mockRestore();
    }
    expect(Buffer.compare(readFileSync(target), big)).toBe(0);
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  withNative("puts back a folder that took the file's place just before the swap, and says so", async () => {
    const target = join(dir, "out.bin");
    writeFileSync(target, "old bytes");
    const real = native!.exchangePaths;
    const exchange = vi.spyOn(native!, "exchangePaths").mockImplementation((a, b) => {
      // The first call: a folder appears at the target between the check and the swap.
      if (exchange.mock.calls.length === 1) {
        rmSync(target);
        mkdirSync(target);
        writeFileSync(join(target, "inside"), "theirs");
      }
      real(a, b);
    });
    try {
      await expect(writeOver(target)).rejects.toMatchObject({ code: "Io", message: expect.stringContaining("became another kind of file") });
    } finally {
      exchange.mockRestore();
    }
    expect(statSync(target).isDirectory()).toBe(true);
    expect(readFileSync(join(target, "inside"), "utf8")).toBe("theirs");
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  it("replaceFile renames onto a missing target and replaces a regular one", () => {
    const from = join(dir, "new.bin");
    const to = join(dir, "out.bin");
    writeFileSync(from, "first");
    replaceFile(from, to);
    writeFileSync(from, "second");
    replaceFile(from, to);
    expect(readFileSync(to, "utf8")).toBe("second");
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });
});

describe("file sink ordering", () => {
  it("keeps the order of small and large writes issued without waiting, whatever the queue holds", async () => {
    const path = join(dir, "order.bin");
    const sink = await createFileSink(path);
    const pieces: Uint8Array[] = [];
    const writes: Promise<void>[] = [];
    for (let i = 0; i < 40; i++) {
      // Tiny, large (past the gathering size) and middling pieces, each filled with its index.
      const size = i % 3 === 0 ? 3 : i % 3 === 1 ? 200_000 : 40_000;
      const piece = new Uint8Array(size).fill(i);
      pieces.push(piece);
      writes.push(sink.write(piece));
    }
    await Promise.all(writes);
    await sink.close();
    const expected = new Uint8Array(pieces.reduce((n, p) => n + p.byteLength, 0));
    let at = 0;
    for (const p of pieces) {
      expected.set(p, at);
      at += p.byteLength;
    }
    expect(readFileSync(path).equals(expected)).toBe(true);
  });
});

describe("file sink patches", () => {
  it("changes bytes given before: in the buffer, in the file, or across both", async () => {
    const path = join(dir, "patched.bin");
    const sink = await createFileSink(path);
    if (sink.patch === undefined) throw new Error("a file sink patches");
    const expected = new Uint8Array(10 + 200_000 + 30);
    let end = 0;
    const put = async (size: number, value: number) => {
      expected.fill(value, end, end + size);
      end += size;
      await sink.write(new Uint8Array(size).fill(value));
    };
    const patch = async (at: number, bytes: Uint8Array) => {
      expected.set(bytes, at);
      await sink.patch!(at, bytes);
    };
    await put(10, 1);
    await patch(2, Uint8Array.of(9, 9)); // still in the buffer
    await put(200_000, 2); // large: the buffer goes out first
    await patch(5, Uint8Array.of(7, 7, 7)); // in the file
    await put(30, 3);
    await patch(200_005, new Uint8Array(10).fill(8)); // across the file and the buffer
    await sink.close();
    expect(readFileSync(path).equals(expected)).toBe(true);
  });

  it("refuses a patch past the bytes written, and a stream has none", async () => {
    const sink = await createFileSink(join(dir, "short.bin"));
    await sink.write(new Uint8Array(8));
    await expect(sink.patch!(4, new Uint8Array(5))).rejects.toMatchObject({ code: "Io" });
    await sink.abort();
    const stream = await createFileSink("/dev/null");
    expect(stream.kind).toBe("stream");
    expect(stream.patch).toBeUndefined();
    await stream.close();
  });
});

describe("file source", () => {
  it("reads exact ranges and refuses ranges past the end", async () => {
    const path = join(dir, "in.bin");
    writeFileSync(path, Uint8Array.of(0, 1, 2, 3, 4, 5));
    const source = await openFileSource(path);
    try {
      expect(source.size).toBe(6);
      expect([...(await source.read(2, 3))]).toEqual([2, 3, 4]);
      await expect(source.read(4, 3)).rejects.toMatchObject({ code: "UnexpectedEof" });
    } finally {
      await source.close();
    }
  });

  it("refuses a file that shrinks while it is read, in every read path, naming it", async () => {
    const path = join(dir, "shrinking.bin");
    writeFileSync(path, new Uint8Array(100));
    const source = await openFileSource(path);
    try {
      truncateSync(path, 10);
      await expect(source.read(0, 50)).rejects.toMatchObject({ code: "UnexpectedEof", file: path });
      await expect(source.readInto!(0, new Uint8Array(50))).rejects.toMatchObject({ code: "UnexpectedEof", file: path });
      expect(() => source.readIntoSync!(0, new Uint8Array(50))).toThrow(expect.objectContaining({ code: "UnexpectedEof", file: path }));
    } finally {
      await source.close();
    }
  });

  it("reads the same bytes below and above the synchronous-read size, and refuses a shrunk file in both", async () => {
    const path = join(dir, "big.bin");
    const bytes = Uint8Array.from({ length: 3 * SYNC_IO_BELOW }, (_, i) => (i * 7 + (i >> 8)) & 0xff);
    writeFileSync(path, bytes);
    const source = await openFileSource(path);
    try {
      expect(await source.read(5, SYNC_IO_BELOW - 1)).toEqual(bytes.subarray(5, SYNC_IO_BELOW + 4));
      expect(await source.read(3, 2 * SYNC_IO_BELOW)).toEqual(bytes.subarray(3, 3 + 2 * SYNC_IO_BELOW));
      truncateSync(path, SYNC_IO_BELOW);
      await expect(source.read(0, 2 * SYNC_IO_BELOW)).rejects.toMatchObject({ code: "UnexpectedEof", file: path });
    } finally {
      await source.close();
    }
  });

  it.skipIf(process.platform === "win32")("a FIFO without a writer does not stop the process while it is opened", async () => {
    const path = join(dir, "fifo");
    expect(spawnSync("mkfifo", [path]).status).toBe(0);
    const opening = openFileSource(path);
    // The event loop still turns (a synchronous open of a FIFO would block here until a writer came).
    await new Promise((resolve) => setTimeout(resolve, 10));
    const writer = openSync(path, "w");
    try {
      const source = await opening;
      expect(source.size).toBe(0);
      await source.close();
    } finally {
      closeSync(writer);
    }
  });

  it("names a missing file in an Io error", async () => {
    await expect(openFileSource(join(dir, "nope"))).rejects.toMatchObject({ code: "Io", file: join(dir, "nope") });
  });

  it("refuses a directory", async () => {
    await expect(openFileSource(dir)).rejects.toMatchObject({ code: "Io" });
  });
});

describe("readRange", () => {
  it("delivers the same bytes with and without buffer reuse, and reuses a ring of three buffers", async () => {
    const { readRange } = await import("@st-convert/core");
    const path = join(dir, "in.bin");
    const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7) & 0xff);
    writeFileSync(path, bytes);
    const source = await openFileSource(path);
    try {
      const fresh: Uint8Array[] = [];
      for await (const chunk of readRange(source, 3, 990, { chunkSize: 64 })) fresh.push(chunk);
      const copies: number[] = [];
      const buffers: ArrayBufferLike[] = [];
      for await (const chunk of readRange(source, 3, 990, { chunkSize: 64, reuse: true })) {
        copies.push(...chunk); // consumed before the next is asked for, as the contract requires
        buffers.push(chunk.buffer);
      }
      expect(Uint8Array.from(copies)).toEqual(bytes.subarray(3, 993));
      expect(Uint8Array.from(fresh.flatMap((c) => [...c]))).toEqual(bytes.subarray(3, 993));
      expect(new Set(buffers).size).toBe(3);
      expect(buffers[0]).toBe(buffers[3]);
      expect(new Set(fresh.map((c) => c.buffer)).size).toBe(fresh.length);
    } finally {
      await source.close();
    }
  });
});

describe("scratch file", () => {
  it("reads back what was written, at random and synchronously, and leaves no file in its folder", async () => {
    const space = await createScratchFile({ dir });
    try {
      // Unlinked as soon as it is open (POSIX): nothing to clean up, even after a crash.
      expect(readdirSync(dir)).toEqual([]);
      await space.write(Uint8Array.of(0, 1, 2, 3));
      await space.write(Uint8Array.of(4, 5, 6));
      const source = space.source();
      expect(source.size).toBe(7);
      expect([...(await source.read(3, 4))]).toEqual([3, 4, 5, 6]);
      const target = new Uint8Array(3);
      source.readIntoSync!(1, target);
      expect([...target]).toEqual([1, 2, 3]);
      await expect(source.read(5, 3)).rejects.toMatchObject({ code: "UnexpectedEof" });
      // Closing the source leaves the scratch file readable: it belongs to the space.
      await (source as { close?: () => Promise<void> }).close?.();
      expect([...(await space.source().read(0, 2))]).toEqual([0, 1]);
    } finally {
      await space.dispose();
      await space.dispose();
    }
    await expect(space.write(Uint8Array.of(1))).rejects.toMatchObject({ code: "Io" });
    expect(() => space.source()).toThrow(/disposed/);
  });

  it("reports a folder it cannot use as an Io error naming the file", async () => {
    const error = await createScratchFile({ dir: join(dir, "missing") }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "Io" });
    expect(String((error as Error).message)).toMatch(/cannot create a scratch file: no such file or directory/);
    expect((error as { file?: string }).file).toMatch(/missing\/st-convert-scratch-\d+-\w+\.tmp$/);
  });
});
