/**
 * The reference's own files: our reader must see what the reference reader saw (recorded in
 * manifest.json by fixtures/generate.py), and our writer must reproduce each file byte for byte
 * from those tensors.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { createMetadata, readSafetensors, readTensorBytes, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { fixturePath, fromHex, toHex } from "@st-convert/testing";

interface ManifestTensor {
  name: string;
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
  hex: string | null;
}
interface ManifestFile {
  metadata: Record<string, string> | null;
  tensors: ManifestTensor[];
}

const manifest = JSON.parse(readFileSync(fixturePath("safetensors", "manifest.json"), "utf8")) as Record<string, ManifestFile>;
const files = Object.entries(manifest);

describe("reading files written by the reference", () => {
  it("has fixtures", () => expect(files.length).toBeGreaterThan(20));

  it.each(files)("%s", async (name, expected) => {
    const file = await readSafetensors(readFileSync(fixturePath("safetensors", name)));
    expect(file.metadata === null ? null : { ...file.metadata }).toEqual(expected.metadata ?? null);
    const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : 1);
    const ours = await Promise.all(
      file.tensors.map(async (t) => ({
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        data_offsets: t.dataOffsets,
        hex: toHex(await readTensorBytes(t)),
      })),
    );
    expect(ours.sort(byName)).toEqual(
      expected.tensors.map(({ name, dtype, shape, data_offsets, hex }) => ({ name, dtype, shape, data_offsets, hex })).sort(byName),
    );
  });
});

describe("writing the reference's bytes", () => {
  it.each(files)("%s", async (name, expected) => {
    const tensors = expected.tensors.map((t) => tensorFromBytes({ name: t.name, dtype: t.dtype as never, shape: t.shape }, fromHex(t.hex!)));
    // Reverse the input order: the writer must order tensors itself.
    const metadata = expected.metadata === null ? null : createMetadata(Object.entries(expected.metadata));
    const bytes = await serializeSafetensors({ metadata, tensors: tensors.reverse() });
    expect(toHex(bytes)).toBe(toHex(readFileSync(fixturePath("safetensors", name))));
  });
});

describe("golden bytes from the reference test suites", () => {
  const i32zeros = tensorFromBytes({ name: "test", dtype: "I32", shape: [2, 2] }, new Uint8Array(16));

  it("test_serialization: I32 [2,2] zeros", async () => {
    const bytes = await serializeSafetensors({ metadata: null, tensors: [i32zeros] });
    const header = '{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}    ';
    expect(Buffer.from(bytes).toString("latin1")).toBe(`\x40\0\0\0\0\0\0\0${header}${"\0".repeat(16)}`);
  });

  it("test_empty: no tensors, then metadata {framework: pt}", async () => {
    expect(toHex(await serializeSafetensors({ metadata: null, tensors: [] }))).toBe("08000000000000007b7d202020202020");
    const withMetadata = await serializeSafetensors({ metadata: { framework: "pt" }, tensors: [] });
    expect(Buffer.from(withMetadata).toString("latin1")).toBe(`\x28\0\0\0\0\0\0\0{"__metadata__":{"framework":"pt"}}     `);
  });

  it("test_serialization_fp4: F4 [1,2] in one byte, four pad spaces", async () => {
    const bytes = await serializeSafetensors({ metadata: null, tensors: [tensorFromBytes({ name: "attn.0", dtype: "F4", shape: [1, 2] }, new Uint8Array(1))] });
    expect(Buffer.from(bytes).toString("latin1")).toBe(`\x40\0\0\0\0\0\0\0{"attn.0":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}}    \0`);
  });

  it("test_serialization_fp4_misaligned and _invalid", async () => {
    expect(() => tensorFromBytes({ name: "attn.0", dtype: "F4", shape: [1, 3] }, new Uint8Array(2))).toThrow(
      expect.objectContaining({ code: "MisalignedSlice" }),
    );
    expect(() => tensorFromBytes({ name: "attn.0", dtype: "F4", shape: [1, 2] }, new Uint8Array(2))).toThrow(
      expect.objectContaining({ code: "ByteLengthMismatch" }),
    );
  });

  it("test_serialization_forced_alignement: pads with 0-7 spaces so that data starts at a multiple of 8", async () => {
    const pads = new Set<number>();
    for (let length = 1; length <= 16; length++) {
      const tensor = tensorFromBytes({ name: "a".repeat(length), dtype: "F32", shape: [1, 2] }, new Uint8Array(8));
      const bytes = await serializeSafetensors({ metadata: null, tensors: [tensor] });
      const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
      const text = Buffer.from(bytes.subarray(8, 8 + n)).toString("latin1");
      const pad = text.length - text.trimEnd().length;
      expect(n % 8).toBe(0);
      expect(text.trimEnd().endsWith("}")).toBe(true);
      expect(pad).toBeLessThan(8);
      pads.add(pad);
    }
    expect(pads.size).toBe(8);
  });

  it("orders names by code point, not by UTF-16 unit", async () => {
    const names = ["😀", "\uffff", "aa", "a_b", "a9", "a10", "a.b", "a", "Z"];
    const tensors = names.map((name) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, new Uint8Array(1)));
    const file = await readSafetensors(await serializeSafetensors({ metadata: null, tensors }));
    expect(file.tensors.map((t) => t.name)).toEqual(["Z", "a", "a.b", "a10", "a9", "a_b", "aa", "\uffff", "😀"]);
  });
});
