import { closeSync, fstatSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { constants } from "node:os";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 as zlibCrc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
// The built module: the loader finds fastio.node beside itself, in dist/.
import { pseudoRandomBytes } from "@st-convert/testing";
import { type CopyRangeError, nativeAbsence, nativeIo } from "../dist/index.js";

const native = nativeIo();
// .ci/run builds the module and requires these tests; elsewhere (no compiler) they are skipped with the reason.
if (native === undefined && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error(`the native module is required here: ${nativeAbsence}`);
if (native === undefined) console.log(`native tests skipped: ${nativeAbsence}`);
const maybe = native === undefined ? describe.skip : describe;

maybe("crc32", () => {
  const data = pseudoRandomBytes(1, 3 * 1024 * 1024 + 77);
  it("equals zlib's for every length up to 300 bytes at every alignment, from any previous value", () => {
    for (let offset = 0; offset < 16; offset++) {
      for (let length = 0; length <= 300; length++) {
        const part = data.subarray(offset, offset + length);
        expect(native!.crc32(part, 0)).toBe(zlibCrc32(part, 0));
        expect(native!.crc32(part, 0xdeadbeef)).toBe(zlibCrc32(part, 0xdeadbeef));
      }
    }
  });
  it("equals zlib's on long and odd-sized inputs, and continues across pieces", () => {
    for (const length of [1024, 65_536 + 13, 1024 * 1024 - 1, data.byteLength]) {
      const part = data.subarray(0, length);
      expect(native!.crc32(part)).toBe(zlibCrc32(part));
      const cut = Math.floor(length / 3) + 5;
      expect(native!.crc32(part.subarray(cut), native!.crc32(part.subarray(0, cut)))).toBe(zlibCrc32(part));
    }
  });
  it("is the check value of the CRC-32/ISO-HDLC catalogue entry", () => {
    expect(native!.crc32(new TextEncoder().encode("123456789"))).toBe(0xcbf43926);
  });
  it("folds with PCLMULQDQ where /proc/cpuinfo lists it", () => {
    const flags = readFileSync("/proc/cpuinfo", "utf8");
    expect(native!.crc32Folds).toBe(process.arch === "x64" && /\bpclmulqdq\b/.test(flags));
  });
  it("gives zlib's CRC with every fold this CPU has (table, 128, 256 and 512-bit registers), each from the widest the CPU offers down", async () => {
    const { spawnSync } = await import("node:child_process");
    const flags = readFileSync("/proc/cpuinfo", "utf8");
    const has = (flag: string) => new RegExp(`\\b${flag}\\b`).test(flags);
    const widest = !native!.crc32Folds ? 0 : has("vpclmulqdq") && has("avx2") ? (has("avx512f") && has("avx512vl") ? 3 : 2) : 1;
    expect(native!.crc32Fold).toBe(widest);
    // Every length to 700 at 65 alignments (each fold's loop, its reduction and the 16-byte and
    // byte tails), then long pieces, each from a previous CRC, against zlib's in the same process.
    const script = `
      const { crc32 } = require("node:zlib");
      const io = require(${JSON.stringify(new URL("../dist/index.js", import.meta.url).pathname)}).nativeIo();
      const data = new Uint8Array(4 << 20);
      for (let i = 0, x = 7; i < data.length; i++) data[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
      let cases = 0, wrong = 0;
      for (let offset = 0; offset <= 64; offset++)
        for (let length = 0; length <= 700; length++, cases++) {
          const part = data.subarray(offset, offset + length);
          if (io.crc32(part, 0x12345678 + length) !== crc32(part, 0x12345678 + length)) wrong++;
        }
      for (const length of [1 << 20, (1 << 20) + 255, (4 << 20) - 3]) {
        cases++;
        if (io.crc32(data.subarray(3, 3 + length), 9) !== crc32(data.subarray(3, 3 + length), 9)) wrong++;
      }
      console.log(JSON.stringify({ fold: io.crc32Fold, cases, wrong }));`;
    for (let fold = 0; fold <= widest; fold++) {
      const run = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", env: { ...process.env, ST_CONVERT_CRC_FOLD: String(fold) } });
      expect(run.status, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout)).toEqual({ fold, cases: 65 * 701 + 3, wrong: 0 });
    }
  }, 60_000);
  it("refuses what is not a Uint8Array", () => {
    expect(() => native!.crc32(new Uint16Array(4) as unknown as Uint8Array)).toThrow(TypeError);
    expect(() => native!.crc32("text" as unknown as Uint8Array)).toThrow(TypeError);
  });
});

maybe("copyRange", () => {
  const dir = mkdtempSync(join(tmpdir(), "st-native-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const data = pseudoRandomBytes(7, 5 * 1024 * 1024 + 3);
  const input = join(dir, "in");
  writeFileSync(input, data);

  function readAll(path: string): Uint8Array {
    return new Uint8Array(readFileSync(path));
  }
  let shared: number | undefined;
  const inFd = (): number => (shared ??= openSync(input, "r"));
  afterAll(() => {
    if (shared !== undefined) closeSync(shared);
  });

  it("copies a range to an offset, and at the file position, which it advances", async () => {
    const inFd = openSync(input, "r");
    const outPath = join(dir, "out");
    const outFd = openSync(outPath, "w");
    try {
      writeSync(outFd, new Uint8Array([1, 2, 3]));
      expect(await native!.copyRange(inFd, 1000, outFd, -1, 3 * 1024 * 1024)).toBe(3 * 1024 * 1024);
      writeSync(outFd, new Uint8Array([9]));
      expect(await native!.copyRange(inFd, 17, outFd, 10, 5)).toBe(5);
      expect(fstatSync(outFd).size).toBe(3 + 3 * 1024 * 1024 + 1);
    } finally {
      closeSync(inFd);
      closeSync(outFd);
    }
    const out = readAll(outPath);
    expect(out.subarray(0, 3)).toEqual(new Uint8Array([1, 2, 3]));
    expect(out.subarray(10, 15)).toEqual(data.subarray(17, 22));
    // Buffer.equals: vitest's deep equality takes seconds over megabytes.
    expect(Buffer.from(out.subarray(15, 3 + 3 * 1024 * 1024)).equals(data.subarray(1000 + 12, 1000 + 3 * 1024 * 1024))).toBe(true);
    expect(out[3 + 3 * 1024 * 1024]).toBe(9);
  });

  it("stops at the end of the input and says how much it copied", async () => {
    const inFd = openSync(input, "r");
    const outFd = openSync(join(dir, "short"), "w");
    try {
      expect(await native!.copyRange(inFd, data.byteLength - 10, outFd, 0, 100)).toBe(10);
      const back = new Uint8Array(10);
      const readFd = openSync(join(dir, "short"), "r");
      readSync(readFd, back, 0, 10, 0);
      closeSync(readFd);
      expect(back).toEqual(data.subarray(data.byteLength - 10));
    } finally {
      closeSync(inFd);
      closeSync(outFd);
    }
  });

  it("rejects with the system's error number: a descriptor that is not open, an output opened read-only", async () => {
    const inFd = openSync(input, "r");
    try {
      const notOpen = (await native!.copyRange(inFd, 0, 1_000_000, 0, 10).catch((error: unknown) => error)) as CopyRangeError;
      expect(notOpen.errno).toBe(constants.errno.EBADF);
      expect(notOpen.copied).toBe(0);
      const readOnly = (await native!.copyRange(inFd, 0, inFd, 0, 10).catch((error: unknown) => error)) as CopyRangeError;
      expect([constants.errno.EBADF, constants.errno.EINVAL]).toContain(readOnly.errno);
    } finally {
      closeSync(inFd);
    }
  });

  // Offsets that differ within a page, on ranges of 1 MiB or more, go through the thread's buffers
  // (512 KiB; the first write reaches the output's next page): the same bytes as the kernel's copy.
  // Ranges of 4 MiB or more are read ahead on a thread of their own, into a ring of four buffers.
  it("copies through its buffer where the offsets differ within a page: every byte, at an offset and at the file position", async () => {
    const MiB = 1024 * 1024;
    const cases: [inOffset: number, outOffset: number, length: number][] = [
      [1000, 7, 2 * MiB + 4097], // several buffers and a remainder
      [3, 4095, MiB], // the first piece one byte long
      [128, 4096 + 80, 4 * MiB + 1],
      [4096 * 3 + 1, 0, MiB + 12345], // the output on a page already: no short first piece
    ];
    for (const [inOffset, outOffset, length] of cases) {
      for (const positioned of [false, true]) {
        const outPath = join(dir, `buffered-${inOffset}-${outOffset}-${positioned}`);
        const outFd = openSync(outPath, "w");
        try {
          if (positioned) writeSync(outFd, new Uint8Array(outOffset).fill(0xee));
          expect(await native!.copyRange(inFd(), inOffset, outFd, positioned ? -1 : outOffset, length)).toBe(length);
          if (positioned) writeSync(outFd, new Uint8Array([0x5a])); // after the copied bytes: the position advanced
        } finally {
          closeSync(outFd);
        }
        const out = readAll(outPath);
        expect(out.byteLength).toBe(outOffset + length + (positioned ? 1 : 0));
        expect(Buffer.from(out.subarray(outOffset, outOffset + length)).equals(data.subarray(inOffset, inOffset + length))).toBe(true);
        if (positioned) expect(out[outOffset + length]).toBe(0x5a);
      }
    }
  });

  it("through its buffer too, stops at the end of the input and rejects with the system's error number and the bytes copied", async () => {
    const outFd = openSync(join(dir, "buffered-short"), "w");
    const from = inFd();
    try {
      const start = data.byteLength - 1024 * 1024 - 5;
      expect(await native!.copyRange(from, start, outFd, 1, 2 * 1024 * 1024)).toBe(1024 * 1024 + 5);
      const writeOnly = openSync(join(dir, "buffered-short"), "r+");
      const unreadable = openSync(join(dir, "buffered-wo"), "w");
      try {
        const badRead = (await native!.copyRange(unreadable, 5, writeOnly, 0, 2 * 1024 * 1024).catch((error: unknown) => error)) as CopyRangeError;
        expect(badRead.errno).toBe(constants.errno.EBADF);
        expect(badRead.copied).toBe(0);
        const readOnly = openSync(join(dir, "buffered-short"), "r");
        try {
          const badWrite = (await native!.copyRange(from, 5, readOnly, 0, 2 * 1024 * 1024).catch((error: unknown) => error)) as CopyRangeError;
          expect(badWrite.errno).toBe(constants.errno.EBADF);
          expect(badWrite.copied).toBe(0);
        } finally {
          closeSync(readOnly);
        }
      } finally {
        closeSync(writeOnly);
        closeSync(unreadable);
      }
    } finally {
      closeSync(outFd);
    }
  });

  it("reading ahead (4 MiB or more): every byte through the ring, the input's end, a failed read or write stops both threads", async () => {
    const MiB = 1024 * 1024;
    // Ten buffers and a remainder through a ring of four: each slot filled and emptied thrice.
    for (const positioned of [false, true]) {
      const outPath = join(dir, `ahead-${positioned}`);
      const outFd = openSync(outPath, "w");
      const length = data.byteLength - 1000;
      try {
        if (positioned) writeSync(outFd, new Uint8Array(7).fill(0xee));
        expect(await native!.copyRange(inFd(), 1000, outFd, positioned ? -1 : 7, length)).toBe(length);
      } finally {
        closeSync(outFd);
      }
      const out = readAll(outPath);
      expect(out.byteLength).toBe(7 + length);
      expect(Buffer.from(out.subarray(7)).equals(data.subarray(1000))).toBe(true);
    }
    // The input ends 4.5 MiB into an 8 MiB range: what there was, and no more.
    const shortPath = join(dir, "ahead-short");
    const outFd = openSync(shortPath, "w");
    try {
      const start = data.byteLength - 4.5 * MiB;
      expect(await native!.copyRange(inFd(), start, outFd, 1, 8 * MiB)).toBe(4.5 * MiB);
    } finally {
      closeSync(outFd);
    }
    const short = readAll(shortPath);
    expect(Buffer.from(short.subarray(1)).equals(data.subarray(data.byteLength - 4.5 * MiB))).toBe(true);
    // A read that fails (a write-only input) and a write that fails (a read-only output): the
    // system's error number, nothing copied, and the promise settles (the reader is stopped).
    const unreadable = openSync(join(dir, "ahead-wo"), "w");
    const writable = openSync(shortPath, "r+");
    const readOnly = openSync(shortPath, "r");
    try {
      const badRead = (await native!.copyRange(unreadable, 5, writable, 1, 8 * MiB).catch((error: unknown) => error)) as CopyRangeError;
      expect(badRead.errno).toBe(constants.errno.EBADF);
      expect(badRead.copied).toBe(0);
      const badWrite = (await native!.copyRange(inFd(), 5, readOnly, 0, 4 * MiB + 5).catch((error: unknown) => error)) as CopyRangeError;
      expect(badWrite.errno).toBe(constants.errno.EBADF);
      expect(badWrite.copied).toBe(0);
    } finally {
      closeSync(unreadable);
      closeSync(writable);
      closeSync(readOnly);
    }
    expect(Buffer.from(readAll(shortPath).subarray(1)).equals(data.subarray(data.byteLength - 4.5 * MiB))).toBe(true);
  });

  it("copyRangeCrc32: the same bytes as copyRange and zlib's CRC-32 of them, wherever the offsets lie; the input's end and failures as crc32Range's", async () => {
    const MiB = 1024 * 1024;
    const cases: [inOffset: number, outOffset: number, length: number][] = [
      [4096, 0, 100], // placed alike, short: still through the buffers, for the CRC
      [1000, 7, MiB + 3], // one thread, several buffers
      [9, 9 + 4096, 4 * MiB + 5], // placed alike, read ahead
      [128, 4096 + 80, data.byteLength - 128], // read ahead, to the input's end
      [0, 0, 0],
    ];
    for (const [inOffset, outOffset, length] of cases) {
      for (const positioned of [false, true]) {
        const outPath = join(dir, `crc-${inOffset}-${outOffset}-${positioned}`);
        const outFd = openSync(outPath, "w");
        try {
          if (positioned) writeSync(outFd, new Uint8Array(outOffset).fill(0xee));
          const crc = await native!.copyRangeCrc32(inFd(), inOffset, outFd, positioned ? -1 : outOffset, length, 0x1234);
          expect(crc).toBe(zlibCrc32(data.subarray(inOffset, inOffset + length), 0x1234));
        } finally {
          closeSync(outFd);
        }
        const out = readAll(outPath);
        expect(out.byteLength).toBe(length === 0 ? (positioned ? outOffset : 0) : outOffset + length);
        expect(Buffer.from(out.subarray(outOffset)).equals(data.subarray(inOffset, inOffset + length))).toBe(true);
      }
    }
    // A CRC of fewer bytes than asked for checks nothing: the input's end rejects, errno 0.
    for (const length of [2 * MiB, 8 * MiB]) {
      const outFd = openSync(join(dir, "crc-short"), "w");
      try {
        const start = data.byteLength - MiB - 5;
        const ended = (await native!.copyRangeCrc32(inFd(), start, outFd, 1, length, 0).catch((error: unknown) => error)) as CopyRangeError;
        expect([ended.errno, ended.copied]).toEqual([0, MiB + 5]);
      } finally {
        closeSync(outFd);
      }
    }
    const unreadable = openSync(join(dir, "crc-wo"), "w");
    const writable = openSync(join(dir, "crc-w"), "w");
    const readOnly = openSync(input, "r");
    try {
      for (const length of [2 * MiB, 8 * MiB]) {
        const badRead = (await native!.copyRangeCrc32(unreadable, 5, writable, 0, length, 0).catch((error: unknown) => error)) as CopyRangeError;
        expect([badRead.errno, badRead.copied]).toEqual([constants.errno.EBADF, 0]);
        const badWrite = (await native!
          .copyRangeCrc32(inFd(), 5, readOnly, 0, Math.min(length, data.byteLength - 5), 0)
          .catch((error: unknown) => error)) as CopyRangeError;
        expect([badWrite.errno, badWrite.copied]).toEqual([constants.errno.EBADF, 0]);
      }
    } finally {
      closeSync(unreadable);
      closeSync(writable);
      closeSync(readOnly);
    }
    expect(readAll(join(dir, "crc-w")).byteLength).toBe(0);
    expect(() => native!.copyRangeCrc32(inFd(), 0, 1, 0, 1, 2 ** 32)).toThrow(TypeError);
    expect(() => native!.copyRangeCrc32(inFd(), 0, 1, 0, 1, -1)).toThrow(TypeError);
  });

  it("refuses arguments that are not whole numbers in range", () => {
    expect(() => native!.copyRange(0, -1, 1, 0, 1)).toThrow(TypeError);
    expect(() => native!.copyRange(0, 0, 1, -2, 1)).toThrow(TypeError);
    expect(() => native!.copyRange(0, 0.5, 1, 0, 1)).toThrow(TypeError);
    expect(() => native!.copyRange(0, 0, 1, 0, 2 ** 53)).toThrow(TypeError);
    expect(() => (native!.copyRange as (...args: unknown[]) => unknown)(0, 0, 1)).toThrow(TypeError);
  });
});

maybe("crc32Range", () => {
  const dir = mkdtempSync(join(tmpdir(), "st-native-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // Longer than the 256 KiB read, and not a multiple of it.
  const data = pseudoRandomBytes(11, 3 * 256 * 1024 + 1001);
  const input = join(dir, "in");
  writeFileSync(input, data);

  it("is zlib's CRC-32 of the range, continuing from the previous value, for ranges shorter and longer than its read", async () => {
    const fd = openSync(input, "r");
    try {
      for (const [offset, length] of [
        [0, data.byteLength],
        [5, 1],
        [12_345, 256 * 1024],
        [777, 2 * 256 * 1024 + 3],
        [data.byteLength, 0],
      ] as const) {
        const part = data.subarray(offset, offset + length);
        expect(await native!.crc32Range(fd, offset, length, 0)).toBe(zlibCrc32(part, 0));
        expect(await native!.crc32Range(fd, offset, length, 0xdeadbeef)).toBe(zlibCrc32(part, 0xdeadbeef));
      }
    } finally {
      closeSync(fd);
    }
  });

  it("rejects with errno 0 and the bytes read when the file ends early, with the system's number otherwise", async () => {
    const fd = openSync(input, "r");
    try {
      const short = (await native!.crc32Range(fd, data.byteLength - 100, 1000, 0).catch((error: unknown) => error)) as CopyRangeError;
      expect([short.errno, short.copied]).toEqual([0, 100]);
      const notOpen = (await native!.crc32Range(1_000_000, 0, 10, 0).catch((error: unknown) => error)) as CopyRangeError;
      expect([notOpen.errno, notOpen.copied]).toEqual([constants.errno.EBADF, 0]);
    } finally {
      closeSync(fd);
    }
  });

  it("refuses arguments that are not whole numbers in range", () => {
    expect(() => native!.crc32Range(0, -1, 1, 0)).toThrow(TypeError);
    expect(() => native!.crc32Range(0, 0, 1, 2 ** 32)).toThrow(TypeError);
    expect(() => native!.crc32Range(0, 0, 0.5, 0)).toThrow(TypeError);
    expect(() => (native!.crc32Range as (...args: unknown[]) => unknown)(0, 0, 1)).toThrow(TypeError);
  });
});

maybe("exchangePaths", () => {
  const dir = mkdtempSync(join(tmpdir(), "st-native-exchange-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("swaps what two names hold, and swaps back", () => {
    const a = join(dir, "a");
    const b = join(dir, "b");
    writeFileSync(a, "first");
    writeFileSync(b, "second");
    native!.exchangePaths(a, b);
    expect([readFileSync(a, "utf8"), readFileSync(b, "utf8")]).toEqual(["second", "first"]);
    native!.exchangePaths(a, b);
    expect([readFileSync(a, "utf8"), readFileSync(b, "utf8")]).toEqual(["first", "second"]);
  });

  it("throws the system's error number when a name is missing, and a TypeError for a path it cannot pass", () => {
    writeFileSync(join(dir, "here"), "x");
    expect(() => native!.exchangePaths(join(dir, "here"), join(dir, "missing"))).toThrow(expect.objectContaining({ errno: constants.errno.ENOENT }));
    expect(readFileSync(join(dir, "here"), "utf8")).toBe("x");
    expect(() => native!.exchangePaths(join(dir, "here"), "")).toThrow(TypeError);
    expect(() => native!.exchangePaths(`${join(dir, "here")}\0/etc/passwd`, join(dir, "here"))).toThrow(TypeError);
    expect(() => native!.exchangePaths(join(dir, "here"), "x".repeat(5000))).toThrow(TypeError);
    expect(() => (native!.exchangePaths as (...args: unknown[]) => unknown)(join(dir, "here"))).toThrow(TypeError);
  });
});

maybe("castFloats", () => {
  const src = new Uint8Array(64);
  const dst = new Uint8Array(64);

  it("casts what it is given and nothing past `count`", () => {
    // 1.0f, then 2.0f: BF16 0x3F80 and 0x4000; the third element is left alone.
    new DataView(src.buffer).setFloat32(0, 1, true);
    new DataView(src.buffer).setFloat32(4, 2, true);
    dst.fill(0xa5);
    native!.castFloats(0, src, dst, 2);
    expect([...dst.subarray(0, 6)]).toEqual([0x80, 0x3f, 0x00, 0x40, 0xa5, 0xa5]);
  });

  it("refuses a count past either array's end, an unknown op, a missing or misshapen table", () => {
    expect(() => native!.castFloats(0, src, dst, 17)).toThrow(/past the end/);
    expect(() => native!.castFloats(3, src, dst, 9)).toThrow(/past the end/);
    expect(() => native!.castFloats(8, src, dst, 1)).toThrow(/unknown op/);
    expect(() => native!.castFloats(-1, src, dst, 1)).toThrow(/unknown op/);
    expect(() => native!.castFloats(5, src, dst, 1)).toThrow(/needs a table/);
    expect(() => native!.castFloats(5, src, dst, 1, new Uint8Array(100))).toThrow(/0x20000/);
    expect(() => native!.castFloats(7, src, dst, 1, new Uint8Array(3 * 0x10000))).toThrow(/1, 2, 4 or 8 bytes/);
    expect(() => native!.castFloats(0, new Uint16Array(8) as unknown as Uint8Array, dst, 1)).toThrow(TypeError);
    expect(() => native!.castFloats(0, src, dst, 0.5)).toThrow(TypeError);
  });

  it("reads each pattern's entry from a table of 1, 2, 4 or 8 bytes", () => {
    for (const entry of [1, 2, 4, 8]) {
      const table = Uint8Array.from({ length: 256 * entry }, (_, i) => (i * 7 + 3) & 0xff);
      const patterns = Uint8Array.from([0, 255, 17, 128]);
      const out = new Uint8Array(4 * entry);
      native!.castFloats(6, patterns, out, 4, table);
      const want = [...patterns].flatMap((p) => [...table.subarray(p * entry, (p + 1) * entry)]);
      expect([...out], `entries of ${entry}`).toEqual(want);
    }
  });
});

describe("nativeIo", () => {
  it("is undefined, with the reason, when ST_CONVERT_NATIVE=0", async () => {
    const { spawnSync } = await import("node:child_process");
    const script = `import("${new URL("../dist/index.js", import.meta.url).href}").then((m) => console.log(JSON.stringify([m.nativeIo() === undefined, m.nativeAbsence])))`;
    const run = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", env: { ...process.env, ST_CONVERT_NATIVE: "0" } });
    expect(JSON.parse(run.stdout)).toEqual([true, "turned off by ST_CONVERT_NATIVE=0"]);
  });
});
