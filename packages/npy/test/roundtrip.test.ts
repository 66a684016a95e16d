/**
 * safetensors → npz → safetensors is the identity, metadata included, for every safetensors file
 * of the reference whose dtypes numpy can hold (all but F4 and F6), in every writing mode.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MemorySink, readSafetensors, serializeSafetensors } from "@st-convert/core";
import { type NpzWriteOptions, readNpy, readNpz, writeNpy, writeNpz } from "@st-convert/npy";
import { fixturePath, toHex } from "@st-convert/testing";

const manifest = JSON.parse(readFileSync(fixturePath("safetensors", "manifest.json"), "utf8")) as Record<string, { tensors: { dtype: string }[] }>;
const numpyable = Object.entries(manifest)
  .filter(([, e]) => e.tensors.every((t) => t.dtype !== "F4" && !t.dtype.startsWith("F6_")))
  .map(([name]) => name);

const MODES: Record<string, NpzWriteOptions> = { stored: {}, "stored, one pass": { crcPrePass: false }, compressed: { compress: true } };

describe.each(Object.entries(MODES))("safetensors → npz (%s) → safetensors", (_mode, options) => {
  it.each(numpyable)("%s comes back byte for byte", async (name) => {
    const original = readFileSync(fixturePath("safetensors", name));
    const sink = new MemorySink();
    await writeNpz(await readSafetensors(original), sink, options);
    const back = await serializeSafetensors(await readNpz(sink.bytes()));
    expect(toHex(back)).toBe(toHex(original));
  });
});

it("the list covers every dtype but F4 and F6", () => {
  const dtypes = new Set(numpyable.flatMap((n) => manifest[n]!.tensors.map((t) => t.dtype)));
  expect(dtypes.size).toBe(19);
});

describe("safetensors → npy → safetensors", () => {
  const single = numpyable.filter((n) => manifest[n]!.tensors.length === 1);
  it.each(single)("%s comes back byte for byte (void dtypes declared)", async (name) => {
    const original = readFileSync(fixturePath("safetensors", name));
    const file = await readSafetensors(original);
    const sink = new MemorySink();
    await writeNpy(file, sink);
    const t = file.tensors[0]!;
    const back = await readNpy(sink.bytes(), {
      name: t.name,
      dtypes: [
        `V${
          t.byteLength /
          Math.max(
            1,
            t.shape.reduce((a, d) => a * d, 1),
          )
        }=${t.dtype}`,
      ],
    });
    expect(toHex(await serializeSafetensors({ metadata: file.metadata, tensors: back.tensors }))).toBe(toHex(original));
  });
});
