/**
 * The caller's selection applies before an array is judged (fixtures/wild/unconvertible.msgpack,
 * made by flax's msgpack_serialize in fixtures/gen_wild.py): a complex128 array refuses the file
 * when kept, and is left out unread when the selection drops it.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bytesSource, readTensorBytes } from "@st-convert/core";
import { readFlax } from "@st-convert/flax";
import { errorCode, fixturePath } from "@st-convert/testing";

interface Expected {
  tensors: { name: string; dtype: string; shape: number[]; hex: string }[];
}

const expected = (JSON.parse(readFileSync(fixturePath("wild", "manifest.json"), "utf8")) as Record<string, Expected>)["unconvertible.msgpack"]!;
const open = () => bytesSource(readFileSync(fixturePath("wild", "unconvertible.msgpack")), "unconvertible.msgpack");

describe("an array flax restores but safetensors cannot hold", () => {
  it("kept, it refuses the file by name", async () => {
    expect(expected.tensors.map((t) => [t.name, t.dtype])).toContainEqual(["a", "complex128"]);
    expect(await errorCode(readFlax(open()))).toBe("UnknownDtype");
    await expect(readFlax(open())).rejects.toThrow(/tensor "a": the dtype "complex128" has no safetensors equivalent/);
  });
  it("left out by the selection, it is skipped unread and the rest reads as msgpack_restore gives it", async () => {
    const file = await readFlax(open(), { include: (name) => name !== "a" });
    const kept = expected.tensors.filter((t) => t.name !== "a");
    expect(file.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(kept.map((t) => [t.name, t.dtype, t.shape]));
    for (const [i, t] of file.tensors.entries()) expect(Buffer.from(await readTensorBytes(t)).toString("hex")).toBe(kept[i]!.hex);
  });
});
