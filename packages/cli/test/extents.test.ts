// Every reader's extents (TensorEntry.extent: where a tensor's bytes lie as they are, for a
// kernel copy) over the golden fixtures, which the reference tools wrote: the bytes at an extent
// are exactly the bytes chunks() delivers, its check passes, and tensors whose bytes must be
// transformed (swapped, gathered, repacked, inflated) have none.
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type ByteSource, type TensorSource, readTensorBytes } from "@st-convert/core";
import { readNpz } from "@st-convert/npy";
import { createScratchFile, openFileSource } from "@st-convert/core/node";
import { fixturePath } from "@st-convert/testing";
import { detectInputFormat } from "../src/index.js";

interface Found {
  file: string;
  tensor: string;
  hasExtent: boolean;
}

/** Opens each fixture its format reads (refused ones are skipped), and checks every extent against chunks(). */
async function extentsOf(
  folder: string,
  pick: (name: string) => boolean,
  open?: (file: ByteSource, name: string) => Promise<TensorSource> | undefined,
): Promise<Found[]> {
  const found: Found[] = [];
  for (const name of readdirSync(fixturePath(folder)).filter(pick).sort()) {
    const path = join(fixturePath(folder), name);
    const file = await openFileSource(path);
    try {
      let source: TensorSource;
      try {
        const own = open?.(file, name);
        const format = own === undefined ? await detectInputFormat(file) : undefined;
        source =
          own !== undefined
            ? await own
            : await format!.open(file, {
                options: {},
                scratch: () => createScratchFile(),
                openSibling: (sibling) => openFileSource(join(fixturePath(folder), sibling)),
              });
      } catch {
        continue; // a fixture the reference refuses: its refusal is tested elsewhere
      }
      for (const tensor of source.tensors) {
        const extent = tensor.extent?.();
        found.push({ file: name, tensor: tensor.name, hasExtent: extent !== undefined });
        if (extent === undefined) continue;
        const expected = await readTensorBytes(tensor);
        const atExtent = await extent.source.read(extent.offset, tensor.byteLength);
        expect(Buffer.from(atExtent).equals(expected), `${name}: ${tensor.name}`).toBe(true);
        await extent.check?.();
      }
    } finally {
      await file.close();
    }
  }
  return found;
}

const has = (found: Found[], file: string, tensor?: string) => found.filter((f) => f.file === file && (tensor === undefined || f.tensor === tensor));
const allWith = (entries: Found[]) => entries.length > 0 && entries.every((f) => f.hasExtent);
const noneWith = (entries: Found[]) => entries.length > 0 && entries.every((f) => !f.hasExtent);

describe("extents of the golden fixtures", () => {
  it("safetensors: every tensor, its bytes as chunks() gives them", async () => {
    const found = await extentsOf("safetensors", (n) => n.endsWith(".safetensors"));
    expect(found.length).toBeGreaterThan(20);
    expect(found.filter((f) => !f.hasExtent)).toEqual([]);
  });

  it("npy and npz: C-order little-endian arrays and stored members, not byte-swapped, Fortran-order or deflated ones", async () => {
    // maxKeptBytes 0: no member is kept in memory from the blocks read to locate them (which small
    // ones are, and served from there); a .npy of 4 KiB or less is read whole, so only larger ones count.
    const found = await extentsOf(
      "npy",
      (n) => n.endsWith(".npy") || n.endsWith(".npz"),
      (file, name) => (name.endsWith(".npz") ? readNpz(file, { maxKeptBytes: 0 }) : undefined),
    );
    expect(allWith(has(found, "header_10000_chars.npy"))).toBe(true);
    expect(noneWith(has(found, "fortran_large.npy"))).toBe(true);
    expect(allWith(has(found, "npz_stored.npz", "w"))).toBe(true);
    expect(allWith(has(found, "npz_stored.npz", "mask"))).toBe(true);
    expect(noneWith(has(found, "npz_stored.npz", "big_endian"))).toBe(true);
    expect(noneWith(has(found, "npz_compressed.npz"))).toBe(true);
  });

  it("flax msgpack: arrays stored in one piece, not chunked ones", async () => {
    const found = await extentsOf("flax", (n) => n.endsWith(".msgpack"));
    expect(found.some((f) => f.hasExtent)).toBe(true);
    expect(has(found, "chunked.msgpack").some((f) => !f.hasExtent)).toBe(true);
  });

  it("torch: contiguous views of stored and legacy storages, not transposed, big-endian or deflated ones", async () => {
    const found = await extentsOf("torch", (n) => n.endsWith(".pt") || n.endsWith(".bin"));
    expect(has(found, "legacy.pt").some((f) => f.hasExtent)).toBe(true);
    expect(has(found, "dtypes.pt").some((f) => f.hasExtent)).toBe(true);
    // Byte-swapped, but for its one-byte tensor.
    expect(noneWith(has(found, "big_endian.pt").filter((f) => f.tensor !== "u8"))).toBe(true);
    expect(allWith(has(found, "big_endian.pt", "u8"))).toBe(true);
    expect(noneWith(has(found, "rezipped_deflated.pt"))).toBe(true);
    const views = has(found, "views.pt");
    expect(views.some((f) => f.hasExtent) && views.some((f) => !f.hasExtent)).toBe(true);
  });
});
