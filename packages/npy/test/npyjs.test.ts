/**
 * npyjs 1.2.0 as a second reader (dev-only) for the dtypes it supports: little-endian, C-order
 * arrays of bool, ints, floats and complex64. It reads numpy's files as we do, and reads ours.
 */
import { readFileSync } from "node:fs";
import { parse } from "npyjs";
import { describe, expect, it } from "vitest";
import { MemorySink, readTensorBytes } from "@st-convert/core";
import { readNpy, writeNpy } from "@st-convert/npy";
import { fixturePath, toHex } from "@st-convert/testing";

const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, { expect: { tensors?: unknown[] } }>;

/** Fixtures npyjs can read: C order, little-endian (or one byte), a dtype it knows. */
const supported = Object.keys(manifest).filter((name) => /^(dtype_(?!.*_be)|scalar_|empty_(1d|2d)|version_[12]|header_(padlen_64|descr_le_u1))/.test(name));

/** npyjs's view of a file, as bytes: typed arrays as they are, booleans as 0/1 bytes. */
function npyjsBytes(bytes: Uint8Array): { bytes: Uint8Array; shape: number[] } {
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  const array = parse(buffer, { convertFloat16: false });
  const data = array.data as unknown;
  if (Array.isArray(data)) return { bytes: Uint8Array.from(data as boolean[], (b) => (b ? 1 : 0)), shape: array.shape };
  const view = data as ArrayBufferView;
  return { bytes: new Uint8Array(view.buffer, view.byteOffset, view.byteLength), shape: array.shape };
}

describe("npyjs agrees", () => {
  it("the list of files it can read is not empty", () => {
    expect(supported.length).toBeGreaterThan(15);
  });

  it.each(supported)("on numpy's %s", async (name) => {
    const bytes = readFileSync(fixturePath("npy", name));
    const theirs = npyjsBytes(bytes);
    const ours = (await readNpy(bytes)).tensors[0]!;
    expect(ours.shape).toEqual(theirs.shape);
    expect(toHex(await readTensorBytes(ours))).toBe(toHex(theirs.bytes));
  });

  it.each(["fortran_f32_be.npy", "dtype_i64_be.npy", "fortran_c64.npy", "fortran_4d.npy"])("on our C-order little-endian rewrite of %s", async (name) => {
    const source = await readNpy(readFileSync(fixturePath("npy", name)));
    const sink = new MemorySink();
    await writeNpy(source, sink);
    const theirs = npyjsBytes(sink.bytes());
    expect(theirs.shape).toEqual(source.tensors[0]!.shape);
    expect(toHex(theirs.bytes)).toBe(toHex(await readTensorBytes(source.tensors[0]!)));
  });
});
