/**
 * Every golden file numpy wrote (fixtures/npy): we deliver the C-order little-endian bytes numpy
 * computes, or refuse with the recorded code; through every path (node:zlib and fflate, one
 * chunk or many, one Fortran slab or many, memory and file sources).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type ByteSource, type TensorSource, bytesSource, isStConvertError, readTensorBytes } from "@st-convert/core";
import { createScratchFile, openFileSource } from "@st-convert/core/node";
import { type NpzFile, readNpy, readNpz } from "@st-convert/npy";
import { fixturePath, toHex } from "@st-convert/testing";

interface ExpectedTensor {
  name: string;
  dtype: string;
  shape: number[];
  hex: string | null;
  sha256: string;
}

interface Entry {
  numpy: { ok: boolean; error?: string; dtype?: string; shape?: number[]; files?: string[] };
  expect: { metadata?: null; tensors?: ExpectedTensor[]; skipped?: string[]; error?: string; tensor?: string };
  dtypes?: string[];
}

const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, Entry>;
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

interface Variant {
  codec?: "fflate";
  chunkSize?: number;
  fortranSlabSize?: number;
  file?: boolean;
  /** Temporary files as scratch space (a deflated Fortran member past one slab is spilled to one). */
  scratch?: boolean;
  /** No member kept in memory when the archive is opened: every one is read from the source, as large ones are. */
  unkept?: boolean;
}

const VARIANTS: Record<string, Variant> = {
  default: {},
  "fflate, 7-byte chunks, 64-byte Fortran slabs": { codec: "fflate", chunkSize: 7, fortranSlabSize: 64 },
  "file source, 1000-byte chunks, 8-byte slabs": { file: true, chunkSize: 1000, fortranSlabSize: 8 },
  "file source, scratch files, 333-byte chunks, 64-byte slabs": { file: true, scratch: true, chunkSize: 333, fortranSlabSize: 64 },
  "file source, no member kept, fflate, 64-byte slabs": { file: true, unkept: true, codec: "fflate", fortranSlabSize: 64 },
};

/** The fixture as a source: a file (to be closed) or bytes in memory. */
async function sourceOf(name: string, variant: Variant): Promise<ByteSource & { close?: () => Promise<void> }> {
  const path = fixturePath("npy", name);
  return variant.file === true ? await openFileSource(path) : bytesSource(readFileSync(path), name);
}

/** Reads the fixture from `source`; the caller closes the source whatever happens. */
function read(name: string, source: ByteSource, variant: Variant, dtypes: string[] = [], warnings: string[] = []): Promise<TensorSource> {
  const options = {
    dtypes,
    fortranSlabSize: variant.fortranSlabSize,
    codec: variant.codec,
    scratch: variant.scratch === true ? () => createScratchFile() : undefined,
    maxKeptBytes: variant.unkept === true ? 0 : undefined,
    onWarning: (m: string) => warnings.push(m),
  };
  return name.endsWith(".npz") ? readNpz(source, options) : readNpy(source, options);
}

/** Opens and reads the fixture, hands the result to `use`, and closes the source on every path. */
async function withFixture<T>(
  name: string,
  variant: Variant,
  use: (file: TensorSource) => Promise<T>,
  dtypes: string[] = [],
  warnings: string[] = [],
): Promise<T> {
  const source = await sourceOf(name, variant);
  try {
    return await use(await read(name, source, variant, dtypes, warnings));
  } finally {
    await source.close?.();
  }
}

async function bytesOf(source: TensorSource, chunkSize: number | undefined): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for (const tensor of source.tensors) {
    const parts: Uint8Array[] = [];
    for await (const chunk of tensor.chunks({ chunkSize })) {
      if (chunkSize !== undefined) expect(chunk.byteLength).toBeLessThanOrEqual(chunkSize);
      parts.push(chunk.slice());
    }
    out.push(Buffer.concat(parts));
  }
  return out;
}

const accepted = Object.entries(manifest).filter(([, e]) => e.expect.tensors !== undefined);
const refused = Object.entries(manifest).filter(([, e]) => e.expect.error !== undefined);

describe.each(Object.entries(VARIANTS))("golden files, %s", (_label, variant) => {
  it.each(accepted)("%s: numpy's bytes, dtype and shape", async (name, entry) => {
    await withFixture(
      name,
      variant,
      async (file) => {
        const expected = entry.expect.tensors!;
        expect(file.metadata).toBeNull();
        expect(file.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(expected.map((t) => [t.name, t.dtype, t.shape]));
        const bytes = await bytesOf(file, variant.chunkSize);
        bytes.forEach((b, i) => {
          expect(b.byteLength).toBe(file.tensors[i]!.byteLength);
          if (expected[i]!.hex !== null) expect(toHex(b)).toBe(expected[i]!.hex);
          expect(sha256(b)).toBe(expected[i]!.sha256);
        });
        if (entry.expect.skipped !== undefined) expect((file as NpzFile).skipped).toEqual(entry.expect.skipped);
      },
      entry.dtypes,
    );
  });

  it.each(refused)("%s: refused with the recorded code", async (name, entry) => {
    let error: unknown;
    try {
      // The source is closed whether the header or the data is refused.
      await withFixture(name, variant, (file) => bytesOf(file, variant.chunkSize), entry.dtypes);
    } catch (e) {
      error = e;
    }
    expect(isStConvertError(error), String(error)).toBe(true);
    const e = error as { code: string; file?: string; tensor?: string; message: string };
    expect(e.code, e.message).toBe(entry.expect.error);
    expect(e.file).toContain(name);
    if (entry.expect.tensor !== undefined) expect(e.tensor).toBe(entry.expect.tensor);
  });
});

describe("what numpy accepts, we accept", () => {
  it("every file np.load reads is read, except arrays with no safetensors equivalent and undeclared voids", () => {
    const theyReadWeRefuse = Object.entries(manifest)
      .filter(([, e]) => e.numpy.ok && e.expect.error !== undefined)
      .map(([name, e]) => [name, e.expect.error]);
    for (const [, code] of theyReadWeRefuse) expect(["UnsupportedDtype", "UndeclaredVoidDtype"]).toContain(code);
    const theyRefuseWeRead = Object.entries(manifest)
      .filter(([, e]) => !e.numpy.ok && e.expect.tensors !== undefined)
      .map(([name]) => name);
    // ml_dtypes writes float8_e5m2 as '<f1', which np.load cannot read; the file does say what it holds.
    expect(theyRefuseWeRead).toEqual(["ml_f8_e5m2.npy"]);
  });

  it("a header needing Python 2 clean-up and trailing bytes are read with a warning", async () => {
    for (const [name, pattern] of [
      ["header_python2_long.npy", /Python 2/],
      ["trailing_bytes.npy", /8 bytes after the array data are ignored/],
      ["npz_extra_members.npz", /"readme\.txt" is not an npy array/],
    ] as const) {
      const warnings: string[] = [];
      await withFixture(name, {}, async () => {}, [], warnings);
      expect(warnings.join("\n")).toMatch(pattern);
    }
  });

  it("a declaration for one tensor does not apply to another", async () => {
    await expect(withFixture("npz_bf16_declared.npz", {}, async () => {}, ["other:V2=BF16"])).rejects.toMatchObject({
      code: "UndeclaredVoidDtype",
      tensor: "bf",
    });
    const tensors = await withFixture("npz_bf16_declared.npz", {}, async (file) => file.tensors, ["V2=BF16"]);
    expect(tensors.find((t) => t.name === "bf")).toMatchObject({ dtype: "BF16", shape: [2, 2] });
  });

  it("a declaration of another size does not apply", async () => {
    await expect(withFixture("ml_bf16.npy", {}, async () => {}, ["V1=F8_E4M3"])).rejects.toMatchObject({ code: "UndeclaredVoidDtype" });
    const tensors = await withFixture("ml_bf16.npy", {}, async (file) => file.tensors, ["V2=F16"]);
    expect(tensors[0]!.dtype).toBe("F16");
  });
});

it("readTensorBytes sees the same bytes as chunks()", async () => {
  const bytes = await withFixture("fortran_large.npy", { file: true }, (file) => readTensorBytes(file.tensors[0]!));
  expect(sha256(bytes)).toBe(manifest["fortran_large.npy"]!.expect.tensors![0]!.sha256);
});
