/**
 * The npy and npz writers: numpy's bytes reproduced, round trips lossless (metadata and void
 * dtypes through the archive comment), refusals before anything is written, and ZIP64 archives
 * built from a fake multi-GiB tensor (nothing that large ever exists in memory or on disk).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  type ByteSink,
  type ByteSource,
  type Dtype,
  MemorySink,
  type TensorEntry,
  type TensorSource,
  bytesSource,
  readTensorBytes,
  tensorFromBytes,
} from "@st-convert/core";
import { type NpzWriteOptions, readNpy, readNpz, writeNpy, writeNpz } from "@st-convert/npy";
import { createFileSink } from "@st-convert/core/node";
import { fixturePath, makeTempDir, toHex } from "@st-convert/testing";

const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, { dtypes?: string[] }>;
const fixture = (name: string) => readFileSync(fixturePath("npy", name));

async function write(writer: (s: TensorSource, sink: ByteSink) => Promise<void>, source: TensorSource): Promise<Uint8Array> {
  const sink = new MemorySink();
  await writer(source, sink);
  return sink.bytes();
}

async function sameTensors(a: TensorSource, b: TensorSource): Promise<void> {
  expect(b.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(a.tensors.map((t) => [t.name, t.dtype, t.shape]));
  for (let i = 0; i < a.tensors.length; i++) expect(toHex(await readTensorBytes(b.tensors[i]!))).toBe(toHex(await readTensorBytes(a.tensors[i]!)));
}

describe("writeNpy", () => {
  // Files np.save wrote from C-order little-endian arrays (ml_dtypes included; float8_e5m2 is
  // written '<V1', not numpy's unloadable '<f1').
  const identical = Object.keys(manifest).filter((f) =>
    /^(dtype_(?!.*_be)|ml_(?!.*(_be|_fortran|e5m2))|scalar_|empty_(1d|2d)|header_padlen_64|version_1)/.test(f),
  );

  it.each(identical)("writes %s back byte for byte", async (name) => {
    const file = await readNpy(fixture(name), { dtypes: manifest[name]!.dtypes });
    expect(toHex(await write(writeNpy, file))).toBe(toHex(fixture(name)));
  });

  it("writes what np.save writes for the C-order little-endian copy of a Fortran, big-endian array", async () => {
    const fortran = await readNpy(fixture("fortran_f32_be.npy"));
    const ours = await write(writeNpy, fortran);
    const back = await readNpy(ours);
    expect(back.header).toEqual({ descr: "<f4", fortranOrder: false, shape: [5n, 3n] });
    await sameTensors(fortran, back);
  });

  it("refuses other than one tensor, with a hint to write .npz", async () => {
    const t = (name: string) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, Uint8Array.of(1));
    const sink = new MemorySink("out.npy");
    await expect(writeNpy({ metadata: null, tensors: [t("a"), t("b")] }, sink)).rejects.toMatchObject({
      code: "Unsupported",
      message: expect.stringMatching(/out\.npy: .*2 tensors; write a \.npz/),
    });
    await expect(writeNpy({ metadata: null, tensors: [] }, sink)).rejects.toMatchObject({ code: "Unsupported" });
    expect(sink.length).toBe(0);
  });

  it("refuses F4 and F6, which numpy has no type for", async () => {
    for (const dtype of ["F4", "F6_E2M3", "F6_E3M2"] as Dtype[]) {
      const tensor = tensorFromBytes({ name: "packed", dtype, shape: [4] }, new Uint8Array(dtype === "F4" ? 2 : 3));
      await expect(write(writeNpy, { metadata: null, tensors: [tensor] })).rejects.toMatchObject({ code: "UnsupportedDtype", tensor: "packed" });
    }
  });

  it("warns that metadata is dropped and that BF16 becomes raw void", async () => {
    const warnings: string[] = [];
    const tensor = tensorFromBytes({ name: "emb", dtype: "BF16", shape: [2] }, Uint8Array.of(0, 0x3f, 0, 0x40));
    const bytes = await write((s, sink) => writeNpy(s, sink, { onWarning: (m) => warnings.push(m) }), { metadata: { format: "pt" }, tensors: [tensor] });
    expect(warnings.join("\n")).toMatch(/metadata dropped/);
    expect(warnings.join("\n")).toMatch(/BF16 is written as numpy raw void '<V2'.*--dtype V2=BF16/);
    const back = await readNpy(bytes, { name: "emb", dtypes: ["V2=BF16"] });
    await sameTensors({ metadata: null, tensors: [tensor] }, back);
  });

  it("refuses a tensor that delivers fewer bytes than it declares", async () => {
    const liar: TensorEntry = {
      name: "liar",
      dtype: "F32",
      shape: [4],
      byteLength: 16,
      async *chunks() {
        yield new Uint8Array(8);
      },
    };
    await expect(write(writeNpy, { metadata: null, tensors: [liar] })).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "liar" });
  });
});

describe("writeNpz", () => {
  const MODES: Record<string, NpzWriteOptions> = {
    "one pass, data descriptors": { crcPrePass: false },
    "CRC pre-pass (default)": {},
    compressed: { compress: true },
    "compressed with fflate": { compress: true, codec: "fflate" },
    "7-byte chunks": { chunkSize: 7 },
  };

  it("writes np.savez's archive byte for byte: to a file by default, to a pipe with crcPrePass: false", async () => {
    const source = await readNpz(fixture("npz_c_order.npz"));
    expect(toHex(await write(writeNpz, source))).toBe(toHex(fixture("npz_c_order.npz")));
    expect(toHex(await write((s, sink) => writeNpz(s, sink, { crcPrePass: false }), source))).toBe(toHex(fixture("npz_c_order_stream.npz")));
    expect(toHex(await write(writeNpz, { metadata: null, tensors: [] }))).toBe(toHex(fixture("npz_empty.npz")));
  });

  it.each(Object.entries(MODES))("round-trips every layout of npz_stored.npz (%s)", async (_mode, options) => {
    const source = await readNpz(fixture("npz_stored.npz"));
    const back = await readNpz(await write((s, sink) => writeNpz(s, sink, options), source), { codec: options.codec });
    await sameTensors(source, back);
    expect(back.metadata).toBeNull();
    expect(back.comment).toBeNull();
  });

  it("keeps metadata and void dtypes in the archive comment, so no declaration is needed to read them back", async () => {
    const bf16 = tensorFromBytes({ name: "emb", dtype: "BF16", shape: [2] }, Uint8Array.of(0, 0x3f, 0, 0x40));
    const fp8: TensorEntry[] = (["F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"] as Dtype[]).map((dtype, i) =>
      tensorFromBytes({ name: `fp8/${dtype}`, dtype, shape: [3] }, Uint8Array.of(i, 0x7f, 0x80)),
    );
    const metadata = { format: "pt", "z\u2028": '😀\n"quoted"', "": "" };
    for (const options of Object.values(MODES)) {
      const bytes = await write((s, sink) => writeNpz(s, sink, options), { metadata, tensors: [bf16, ...fp8] });
      const back = await readNpz(bytes);
      expect({ ...back.metadata }).toEqual(metadata);
      await sameTensors({ metadata, tensors: [bf16, ...fp8] }, back);
      const comment = JSON.parse(new TextDecoder().decode(archiveComment(bytes)));
      expect(comment).toEqual({
        format: "st-convert.npz",
        version: 1,
        metadata: { "": "", format: "pt", "z\u2028": '😀\n"quoted"' },
        dtypes: { emb: "BF16", ...Object.fromEntries(fp8.map((t) => [t.name, t.dtype])) },
      });
    }
  });

  it("records empty metadata ({}) apart from none (null)", async () => {
    const t = tensorFromBytes({ name: "a", dtype: "U8", shape: [1] }, Uint8Array.of(1));
    expect((await readNpz(await write(writeNpz, { metadata: {}, tensors: [t] }))).metadata).toEqual({});
    expect((await readNpz(await write(writeNpz, { metadata: null, tensors: [t] }))).metadata).toBeNull();
  });

  it("names members as numpy does: name + .npy, always; UTF-8 names flagged", async () => {
    const names = ["a", "a/b", "c.npy", "é", "😀", ""];
    const tensors = names.map((name) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, Uint8Array.of(1)));
    const bytes = await write(writeNpz, { metadata: null, tensors });
    const text = Buffer.from(bytes).toString("latin1");
    for (const member of ["a.npy", "a/b.npy", "c.npy.npy"]) expect(text).toContain(member);
    expect((await readNpz(bytes)).tensors.map((t) => t.name)).toEqual(names);
  });

  it("refuses before writing anything: duplicates, F4/F6, names UTF-8 cannot hold", async () => {
    const u8 = (name: string) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, Uint8Array.of(1));
    const cases: [TensorEntry[], string, string][] = [
      [[u8("a"), u8("a")], "DuplicateKey", "a"],
      [[u8("ok"), tensorFromBytes({ name: "f4", dtype: "F4", shape: [2] }, Uint8Array.of(0x21))], "UnsupportedDtype", "f4"],
      [[u8("lone\ud800")], "InvalidName", "lone\ud800"],
    ];
    for (const [tensors, code, tensor] of cases) {
      const sink = new MemorySink();
      await expect(writeNpz({ metadata: null, tensors }, sink)).rejects.toMatchObject({ code, tensor });
      expect(sink.length).toBe(0);
    }
  });

  it("refuses a tensor (past 1 MiB, read twice) whose bytes change between the CRC pass and the copy", async () => {
    let pass = 0;
    const size = 2 * 1024 * 1024;
    const fickle: TensorEntry = {
      name: "fickle",
      dtype: "U8",
      shape: [size],
      byteLength: size,
      async *chunks() {
        const bytes = new Uint8Array(size);
        bytes[0] = pass++;
        yield bytes;
      },
    };
    await expect(write((s, sink) => writeNpz(s, sink, { crcPrePass: true }), { metadata: null, tensors: [fickle] })).rejects.toMatchObject({
      code: "ByteLengthMismatch",
      tensor: "fickle",
    });
    expect(pass).toBe(2);
  });

  it("into a sink that can patch (a file), reads a large tensor once and writes the same bytes as the pre-pass", async () => {
    const size = 3 * 1024 * 1024 + 5;
    let reads = 0;
    const counted = (name: string): TensorEntry => ({
      name,
      dtype: "U8",
      shape: [size],
      byteLength: size,
      async *chunks() {
        reads++;
        for (let at = 0; at < size; at += 1 << 20) yield Uint8Array.from({ length: Math.min(1 << 20, size - at) }, (_, i) => (at + i) * 7);
      },
    });
    const source = { metadata: null, tensors: [counted("a"), tensorFromBytes({ name: "s", dtype: "U8", shape: [2] }, Uint8Array.of(1, 2)), counted("b")] };
    const prePass = await write(writeNpz, source);
    expect(reads).toBe(4);
    reads = 0;
    const { dir, cleanup } = makeTempDir();
    try {
      const path = join(dir, "one-pass.npz");
      const sink = await createFileSink(path);
      await writeNpz(source, sink);
      await sink.close();
      expect(reads).toBe(2);
      expect(toHex(readFileSync(path))).toBe(toHex(prePass));
    } finally {
      cleanup();
    }
  });

  it("reads a small tensor once, for both its CRC and its copy, to the same bytes", async () => {
    let reads = 0;
    const once: TensorEntry = {
      name: "once",
      dtype: "U8",
      shape: [4],
      byteLength: 4,
      async *chunks() {
        reads++;
        yield Uint8Array.of(9, 1, 2, 3);
      },
    };
    const bytes = await write((s, sink) => writeNpz(s, sink, { crcPrePass: true }), { metadata: null, tensors: [once] });
    expect(reads).toBe(1);
    const back = await readNpz(bytes);
    expect([...(await readTensorBytes(back.tensors[0]!))]).toEqual([9, 1, 2, 3]);
  });

  it("writes ZIP64 end records past 65,535 members", async () => {
    const tensors = Array.from({ length: 65_537 }, (_, i) => tensorFromBytes({ name: String(i), dtype: "U8", shape: [] }, Uint8Array.of(i & 0xff)));
    const bytes = await write(writeNpz, { metadata: null, tensors });
    const v = new DataView(bytes.buffer, bytes.byteOffset);
    const end = bytes.byteLength - 22;
    expect(v.getUint16(end + 10, true)).toBe(0xffff);
    expect(v.getUint32(end - 20, true)).toBe(0x07064b50);
    expect(Number(v.getBigUint64(end - 20 - 56 + 32, true))).toBe(65_537);
    const back = await readNpz(bytes);
    expect(back.tensors).toHaveLength(65_537);
    expect(toHex(await readTensorBytes(back.tensors[65_536]!))).toBe("00");
  }, 60_000);
});

/** The archive comment: what follows the last end-of-central-directory record. */
function archiveComment(bytes: Uint8Array): Uint8Array {
  for (let i = bytes.byteLength - 22; i >= 0; i--) {
    if (bytes[i] === 0x50 && bytes[i + 1] === 0x4b && bytes[i + 2] === 5 && bytes[i + 3] === 6) {
      const length = new DataView(bytes.buffer, bytes.byteOffset).getUint16(i + 20, true);
      return bytes.subarray(i + 22, i + 22 + length);
    }
  }
  throw new Error("no end record");
}

describe("ZIP64 from a fake 4.5 GiB tensor", () => {
  const GIB = 1024 ** 3;
  const zero = new Uint8Array(4 * 1024 * 1024);

  /** A U8 tensor of `size` zero bytes that exists only as one reused 4 MiB buffer. */
  const huge = (name: string, size: number): TensorEntry => ({
    name,
    dtype: "U8",
    shape: [size],
    byteLength: size,
    async *chunks() {
      for (let at = 0; at < size; at += zero.byteLength) yield at + zero.byteLength <= size ? zero : zero.subarray(0, size - at);
    },
  });

  /** A sink that keeps only what is not the shared zero buffer, with its offset. */
  class SparseSink implements ByteSink {
    readonly segments: { at: number; bytes: Uint8Array }[] = [];
    size = 0;
    async write(chunk: Uint8Array): Promise<void> {
      if (chunk.buffer !== zero.buffer) this.segments.push({ at: this.size, bytes: chunk.slice() });
      this.size += chunk.byteLength;
    }
    async close(): Promise<void> {}
    async abort(): Promise<void> {}
    /** The archive as a source: recorded bytes where written, zeros elsewhere. */
    source(): ByteSource {
      const segments = this.segments;
      return {
        size: this.size,
        name: "sparse.npz",
        async read(offset, length) {
          const out = new Uint8Array(length);
          for (const s of segments) {
            const from = Math.max(offset, s.at);
            const to = Math.min(offset + length, s.at + s.bytes.byteLength);
            if (from < to) out.set(s.bytes.subarray(from - s.at, to - s.at), from - offset);
          }
          return out;
        },
      };
    }
  }

  it("puts sizes and offsets past 4 GiB in ZIP64 fields that our reader (and zipfile, see the interop test) reads back", async () => {
    const size = 4.5 * GIB;
    const sink = new SparseSink();
    const small = tensorFromBytes({ name: "after", dtype: "U8", shape: [3] }, Uint8Array.of(7, 8, 9));
    await writeNpz({ metadata: { note: "zip64" }, tensors: [huge("big", size), small] }, sink);
    const archive = sink.source();
    const file = await readNpz(archive);
    expect(file.tensors.map((t) => [t.name, t.shape, t.byteLength])).toEqual([
      ["big", [size], size],
      ["after", [3], 3],
    ]);
    expect({ ...file.metadata }).toEqual({ note: "zip64" });
    expect([...(await readTensorBytes(file.tensors[1]!))]).toEqual([7, 8, 9]);
    // The central directory entry of "after": sizes 32-bit, offset 0xFFFFFFFF with the real one in a ZIP64 field.
    const tail = await archive.read(archive.size - 400, 400);
    const text = Buffer.from(tail).toString("latin1");
    const entry = text.lastIndexOf("PK\x01\x02");
    const v = new DataView(tail.buffer, tail.byteOffset);
    expect(v.getUint32(entry + 42, true)).toBe(0xffffffff);
    expect(Number(v.getBigUint64(entry + 46 + "after.npy".length + 4, true))).toBeGreaterThan(size);
    expect(text).toContain("PK\x06\x06");
    expect(text).toContain("PK\x06\x07");
  }, 60_000);

  it("streams the big member's bytes back with its CRC verified", async () => {
    const size = 4.5 * GIB;
    const sink = new SparseSink();
    await writeNpz({ metadata: null, tensors: [huge("big", size)] }, sink);
    const file = await readNpz(sink.source());
    let total = 0;
    for await (const chunk of file.tensors[0]!.chunks()) total += chunk.byteLength;
    expect(total).toBe(size);
  }, 60_000);
});

it("bytesSource round trip of an npz written in 1-byte chunks", async () => {
  const source = await readNpz(fixture("npz_c_order.npz"));
  const bytes = await write((s, sink) => writeNpz(s, sink, { chunkSize: 1, crcPrePass: true }), source);
  expect(toHex(bytes)).toBe(toHex(fixture("npz_c_order.npz")));
  await sameTensors(source, await readNpz(bytesSource(bytes)));
});
