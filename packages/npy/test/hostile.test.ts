/**
 * Hostile npy and npz files, built byte by byte and named after the attack: each is refused with
 * one StConvertError whose code names the broken rule, quickly, without allocating what the file
 * did not earn.
 */
import { crc32, deflateRawSync } from "node:zlib";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { MemorySink, type TensorSource, bytesSource, isStConvertError, pipeTensor, tensorFromBytes } from "@st-convert/core";
import { openFileSource } from "@st-convert/core/node";
import { readNpy, readNpz, writeNpz } from "@st-convert/npy";
import { npyFile, smallNpy, zipOf } from "./build.js";
import { hostileNpy } from "./hostileNpy.js";
import { makeTempDir, recordHostileCases } from "@st-convert/testing";

/** Reads everything (headers, then every tensor's bytes) and returns the error, if any. */
async function attempt(bytes: Uint8Array, kind: "npy" | "npz", options: Record<string, unknown> = {}): Promise<unknown> {
  try {
    const source = bytesSource(bytes, `hostile.${kind}`);
    const file: TensorSource = kind === "npy" ? await readNpy(source, options) : await readNpz(source, options);
    for (const t of file.tensors) for await (const _ of t.chunks()) void _;
    return undefined;
  } catch (error) {
    return error;
  }
}

async function refused(
  bytes: Uint8Array,
  kind: "npy" | "npz",
  code: string,
  options: Record<string, unknown> = {},
): Promise<Error & { code: string; file?: string; tensor?: string }> {
  const started = performance.now();
  const error = await attempt(bytes, kind, options);
  expect(performance.now() - started, "refused in bounded time").toBeLessThan(2000);
  expect(isStConvertError(error), `expected an StConvertError, got ${String(error)}`).toBe(true);
  const e = error as Error & { code: string; file?: string; tensor?: string };
  expect(e.code, e.message).toBe(code);
  expect(e.file).toBe(`hostile.${kind}`);
  return e;
}

const header = (fields: string) => `{${fields}}`;

describe("hostile npy", () => {
  it.each(hostileNpy)("refuses %s", async (_attack, bytes, code) => {
    await refused(bytes, "npy", code);
  });

  it("never runs the code in a header", async () => {
    await refused(
      npyFile(header("'descr': __import__('os').system('touch /tmp/st-convert-pwned'), 'fortran_order': False, 'shape': (2, 3)"), 24),
      "npy",
      "InvalidHeader",
    );
    expect(existsSync("/tmp/st-convert-pwned")).toBe(false);
  });

  it("refuses a descr numpy itself crashes on ('M8[D/0]', a division by zero in its datetime parser)", async () => {
    await refused(npyFile(header("'descr': 'M8[D/0]', 'fortran_order': False, 'shape': (1,)"), 8), "npy", "UnsupportedDtype");
  });

  it("names the tensor and the rule in one line", async () => {
    const e = await refused(npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (-1,)"), 24), "npy", "InvalidShape");
    expect(e.message).toBe('hostile.npy: tensor "hostile": shape is not valid: negative dimensions are not allowed ((-1,))');
  });
});

const npy = smallNpy();
const member = (over: Partial<Parameters<typeof zipOf>[0][number]> = {}) => ({ name: "a.npy", content: npy, ...over });

const hostileNpz: [string, Uint8Array, string][] = [
  ["a file too short to be a zip", new Uint8Array(10), "BadZipFile"],
  ["random bytes", Uint8Array.from({ length: 5000 }, (_, i) => (i * 7919) % 251), "BadZipFile"],
  ["an archive cut in its central directory", zipOf([member()], { truncateTo: npy.byteLength + 60 }), "BadZipFile"],
  ["an archive cut in the middle of a member", zipOf([member()]).subarray(0, 80), "BadZipFile"],
  ["a central directory entry pointing past the end", zipOf([member({ headerOffset: 1_000_000 })]), "BadZipFile"],
  ["a central directory entry pointing at a zip64 offset of 2^52", zipOf([member({ headerOffset: 2 ** 52 })]), "BadZipFile"],
  ["a central directory entry pointing into the data", zipOf([member({ headerOffset: 40 })]), "BadZipFile"],
  ["names that differ between the directory and the local header", zipOf([member({ localName: "b.npy" })]), "BadZipFile"],
  [
    "container-before-comment: a local header that names another member, beside a malformed st-convert comment (the container is judged first)",
    zipOf([member({ localName: "b.npy" })], { comment: new TextEncoder().encode('{"format":"st-convert.npz","version":2,"metadata":null,"dtypes":{}}') }),
    "BadZipFile",
  ],
  ["a truncated zip64 extra field", zipOf([member({ size: 0xffffffff, extra: Uint8Array.of(1, 0, 4, 0, 0, 0, 0, 0) })]), "BadZipFile"],
  ["an extra field longer than its entry", zipOf([member({ extra: Uint8Array.of(9, 9, 200, 0) })]), "BadZipFile"],
  ["two entries sharing one local header (overlap)", zipOf([member(), member({ name: "b.npy", localName: "b.npy", headerOffset: 0 })]), "BadZipFile"],
  [
    "a member whose data runs into the next (overlap)",
    zipOf([member({ compressedSize: npy.byteLength + 40, size: npy.byteLength + 40 }), member({ name: "b.npy" })]),
    "OverlappingMembers",
  ],
  ["a stored member declaring a terabyte", zipOf([member({ size: 2 ** 40, compressedSize: 2 ** 40 })]), "OverlappingMembers"],
  ["a deflated member declaring a terabyte", zipOf([member({ method: 8, size: 2 ** 40 })]), "BadZipFile"],
  ["a deflated member declaring 64 GiB from 1 MiB (past the 1 TiB limit when allowed)", zipOf([member({ method: 8, size: 2 ** 36 })]), "BadZipFile"],
  ["a stored member whose sizes differ", zipOf([member({ size: npy.byteLength - 4 })]), "MemberSizeMismatch"],
  ["a flipped byte in stored data (bad CRC)", zipOf([member({ crc: crc32(npy) ^ 1 })]), "BadCrc"],
  ["a flipped byte in deflated data's CRC", zipOf([member({ method: 8, crc: crc32(npy) ^ 0x80000000 })]), "BadCrc"],
  [
    "a deflated member that inflates past its declared size",
    zipOf([member({ method: 8, content: Buffer.concat([npy, new Uint8Array(100_000)]), size: npy.byteLength })]),
    "MemberSizeMismatch",
  ],
  [
    "a deflated member shorter than declared",
    zipOf([member({ method: 8, size: npy.byteLength + 10, crc: crc32(Buffer.concat([npy, new Uint8Array(10)])) })]),
    "MemberSizeMismatch",
  ],
  ["an encrypted member", zipOf([member({ flags: 1 })]), "Unsupported"],
  ["a bzip2 member", zipOf([member({ method: 12 })]), "Unsupported"],
  [
    "a member name flagged UTF-8 that is not",
    zipOf([member({ name: "a\xff.npy", flags: 0x800 })]).map((b, i, a) => (i === a.length - 22 - 6 + 1 ? 0xff : b)),
    "BadZipFile",
  ],
  ["two members with the same tensor name", zipOf([member(), member({ name: "a" })]), "DuplicateKey"],
  ["a member whose npy is truncated", zipOf([member({ content: npy.subarray(0, npy.byteLength - 3) })]), "UnexpectedEof"],
  [
    "a member whose npy header calls code",
    zipOf([member({ content: npyFile(header("'descr': eval('1'), 'fortran_order': False, 'shape': ()"), 4) })]),
    "InvalidHeader",
  ],
];

recordHostileCases("npy", ".npy", hostileNpy);
recordHostileCases("npz", ".npz", hostileNpz);

describe("hostile npz", () => {
  it.each(hostileNpz)("refuses %s", async (_attack, bytes, code) => {
    await refused(bytes, "npz", code);
  });

  it("refuses deflate data that is not DEFLATE", async () => {
    const bytes = zipOf([member({ method: 8 })]);
    // Overwrite the compressed data with a reserved block type (BTYPE 11).
    const start = 30 + "a.npy".length;
    bytes.fill(0xff, start, start + 8);
    await refused(bytes, "npz", "BadZipFile");
  });

  it("refuses a zip bomb: 256 MiB of zeros behind a 96-byte declaration, quickly and in bounded memory", async () => {
    const compressed = deflateRawSync(Buffer.concat([npy, new Uint8Array(256 * 1024 * 1024)]));
    // The member holds the bomb's compressed bytes but declares only the small npy's size and CRC.
    const crafted = craftDeflated("a.npy", compressed, npy.byteLength, crc32(npy));
    const before = process.memoryUsage().arrayBuffers;
    await refused(crafted, "npz", "MemberSizeMismatch");
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(64 * 1024 * 1024);
  });

  it(`refuses a member past the size limit before inflating it`, async () => {
    const content = Buffer.concat([npy, new Uint8Array(4096)]);
    await refused(zipOf([member({ method: 8, content })]), "npz", "LimitExceeded", { maxMemberSize: 1024 });
  });

  it("refuses a central directory past the limit", async () => {
    const many = zipOf(Array.from({ length: 200 }, (_, i) => member({ name: `t${i}.npy` })));
    await refused(many, "npz", "LimitExceeded", { maxDirectorySize: 1000 });
  });

  it("zip64-entry-count-ignored: a ZIP64 end record counting 2^53 members is read by its directory, as zipfile reads it", async () => {
    const bytes = zipOf([member()]);
    const eocd = bytes.subarray(bytes.byteLength - 22);
    const e = new DataView(eocd.buffer, eocd.byteOffset);
    const cdSize = e.getUint32(12, true);
    const cdOffset = e.getUint32(16, true);
    const end64 = new Uint8Array(56);
    const v = new DataView(end64.buffer);
    v.setUint32(0, 0x06064b50, true);
    v.setBigUint64(4, 44n, true);
    v.setUint16(12, 45, true);
    v.setUint16(14, 45, true);
    v.setBigUint64(24, 2n ** 53n, true);
    v.setBigUint64(32, 2n ** 53n, true);
    v.setBigUint64(40, BigInt(cdSize), true);
    v.setBigUint64(48, BigInt(cdOffset), true);
    const locator = new Uint8Array(20);
    const l = new DataView(locator.buffer);
    l.setUint32(0, 0x07064b50, true);
    l.setBigUint64(8, BigInt(bytes.byteLength - 22), true);
    l.setUint32(16, 1, true);
    const file = await readNpz(Buffer.concat([bytes.subarray(0, bytes.byteLength - 22), end64, locator, eocd]));
    expect(file.tensors.map((t) => t.name)).toEqual(["a"]);
  });

  it("refuses a multi-disk zip64 locator", async () => {
    const bytes = zipOf([member()]);
    const locator = new Uint8Array(20);
    const v = new DataView(locator.buffer);
    v.setUint32(0, 0x07064b50, true);
    v.setUint32(4, 1, true);
    v.setUint32(16, 2, true);
    const end = bytes.subarray(bytes.byteLength - 22);
    await refused(Buffer.concat([bytes.subarray(0, bytes.byteLength - 22), locator, end]), "npz", "BadZipFile");
  });

  it("refuses st-convert's comment when malformed, and ignores anyone else's", async () => {
    const comment = (text: string) => zipOf([member()], { comment: new TextEncoder().encode(text) });
    await refused(comment('{"format":"st-convert.npz","version":2}'), "npz", "InvalidMetadata");
    await refused(comment('{"format":"st-convert.npz","version":1,"metadata":{"a":1}}'), "npz", "InvalidMetadata");
    await refused(comment('{"format":"st-convert.npz","version":1,"dtypes":{"a":"F128"}}'), "npz", "InvalidMetadata");
    await refused(comment('{"format":"st-convert.npz","version":1,"dtypes":{"a":"BF16"}}'), "npz", "InvalidMetadata");
    for (const text of ["hello", "{not json", '{"format":"other"}', "[1]"]) {
      const file = await readNpz(comment(text));
      expect(file.metadata).toBeNull();
      expect(file.tensors.map((t) => t.name)).toEqual(["a"]);
    }
  });

  it("takes a fake end record at the very end of a comment, as zipfile does (then sees an empty archive)", async () => {
    const fake = new Uint8Array(22);
    new DataView(fake.buffer).setUint32(0, 0x06054b50, true);
    const file = await readNpz(zipOf([member()], { comment: fake }));
    expect(file.tensors).toEqual([]);
  });

  it("an archive written by us with a metadata comment that is too large is refused before writing", async () => {
    const big = "x".repeat(70_000);
    const sink = new MemorySink();
    await expect(
      writeNpz({ metadata: { big }, tensors: [tensorFromBytes({ name: "a", dtype: "U8", shape: [1] }, Uint8Array.of(1))] }, sink),
    ).rejects.toMatchObject({
      code: "LimitExceeded",
    });
    expect(sink.length).toBe(0);
  });
});

/** A one-member archive whose deflated data and declared size and CRC are given separately. */
function craftDeflated(name: string, compressed: Uint8Array, size: number, crc: number): Uint8Array {
  const archive = zipOf([{ name, content: new Uint8Array(0), method: 0 }]);
  // Rebuild around the compressed bytes: local header, data, directory entry, end record.
  const local = archive.subarray(0, 30 + name.length).slice();
  new DataView(local.buffer).setUint16(8, 8, true);
  const entryAt = 30 + name.length;
  const entry = archive.subarray(entryAt, entryAt + 46 + name.length).slice();
  const ev = new DataView(entry.buffer);
  ev.setUint16(10, 8, true);
  ev.setUint32(16, crc, true);
  ev.setUint32(20, compressed.byteLength, true);
  ev.setUint32(24, size, true);
  const end = archive.subarray(archive.byteLength - 22).slice();
  new DataView(end.buffer).setUint32(16, local.byteLength + compressed.byteLength, true);
  return Buffer.concat([local, compressed, entry, end]);
}

it("deflateRawSync from the test matches what the archives hold (builder sanity)", async () => {
  const file = await readNpz(zipOf([member({ method: 8 })]));
  expect(file.tensors[0]!.shape).toEqual([2, 3]);
  expect(deflateRawSync(npy).byteLength).toBeGreaterThan(0);
});

describe("stored member CRC across chunks", () => {
  // 4096 data bytes, copied in 1000-byte chunks: five chunks, the last one short.
  const data = Uint8Array.from({ length: 4096 }, (_, i) => (i * 31 + 7) & 0xff);
  const good = npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1024,), }", data);
  const headerBytes = good.byteLength - data.byteLength;
  const damagedAt = (at: number) => {
    const content = good.slice();
    content[headerBytes + at]! ^= 0x10;
    return zipOf([{ name: "a.npy", content, crc: crc32(good) }]);
  };

  /** Converts every tensor through pipeTensor, from memory or from a file (which reads into a reused ring of buffers). */
  async function convert(archive: Uint8Array, from: "memory" | "file"): Promise<Uint8Array> {
    const { dir, cleanup } = makeTempDir();
    const path = join(dir, "a.npz");
    writeFileSync(path, archive);
    const source = from === "file" ? await openFileSource(path) : bytesSource(archive, path);
    try {
      const file = await readNpz(source);
      const sink = new MemorySink();
      for (const t of file.tensors) await pipeTensor(t, sink, 1000);
      return sink.bytes();
    } finally {
      if (from === "file") await (source as Awaited<ReturnType<typeof openFileSource>>).close();
      cleanup();
    }
  }

  for (const from of ["memory", "file"] as const) {
    it(`copies an intact member exactly (${from})`, async () => {
      expect(Buffer.from(await convert(zipOf([{ name: "a.npy", content: good }]), from)).equals(Buffer.from(data))).toBe(true);
    });

    it.each([0, 1500, 4095])(`refuses a member damaged at data byte %i, after the chunk is handed on (${from})`, async (at) => {
      await expect(convert(damagedAt(at), from)).rejects.toMatchObject({ code: "BadCrc", tensor: "a" });
    });
  }
});
