/**
 * The format object the CLI registers: recognition by content, options, and open/write through
 * the `TensorFormat` interface.
 */
import { readFileSync, readdirSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MemorySink, bytesSource, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { flaxFormat, readFlax, sniffFlax } from "@st-convert/flax";
import { fixturePath, fuzzSeed } from "@st-convert/testing";
import { cat, map, str } from "./msgpackBytes.js";

const head = (bytes: Uint8Array) => bytes.subarray(0, 64);
const files = (folder: string) =>
  readdirSync(fixturePath(folder))
    .filter((f) => !f.endsWith(".json"))
    .map((f) => [f, readFileSync(fixturePath(folder, f))] as const);

describe("sniffFlax", () => {
  it("recognises every flax file whose top level is a dict", () => {
    for (const [name, bytes] of files("flax")) expect(sniffFlax(head(bytes)), name).toBe(name !== "array_top.msgpack");
  });

  it("claims no safetensors file, and no npy, npz or JSON start", () => {
    for (const [name, bytes] of files("safetensors")) expect(sniffFlax(head(bytes)), name).toBe(false);
    for (const text of ["\x93NUMPY\x01\x00v\x00{'descr': '<f4'", "PK\x03\x04\x14\x00\x00\x00", '{"__metadata__":{}}', "  [1, 2]"]) {
      expect(sniffFlax(Uint8Array.from(Buffer.from(text, "latin1")))).toBe(false);
    }
  });

  it("decodes each whole key on its own: a key ending inside a character is not completed by the next key", () => {
    // Found in review: keys "a\xc3" and "\xa9b" decoded as one stream read as the valid "aéb".
    expect(sniffFlax(cat(map(2), [0xa2, 0x61, 0xc3], [0xc0], [0xa2, 0xa9, 0x62], [0xc0]))).toBe(false);
    expect(sniffFlax(cat(map(2), [0xa2, 0x61, 0x62], [0xc0], [0xa2, 0xc3, 0xa9], [0xc0]))).toBe(true);
  });

  it("refuses maps with non-string or control-character keys, and bytes after the map", () => {
    expect(sniffFlax(cat(map(1), [0x01], [0x02]))).toBe(false);
    expect(sniffFlax(cat(map(1), str("a\u0000"), [0x02]))).toBe(false);
    expect(sniffFlax(cat(map(1), str("a"), [0x02], [0x00]))).toBe(false);
    expect(sniffFlax(cat(map(1), str("a"), [0x02]))).toBe(true);
    expect(sniffFlax(cat(map(0)))).toBe(false);
  });

  it("a safetensors length prefix that starts like a fixmap is still refused", () => {
    // Header length 0xb088: bytes 88 b0 00 00 00 00 00 00, then the JSON header.
    const bytes = cat([0x88, 0xb0, 0, 0, 0, 0, 0, 0], Buffer.from('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'));
    expect(sniffFlax(head(bytes))).toBe(false);
  });

  it("never throws on any bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        expect(typeof sniffFlax(bytes)).toBe("boolean");
      }),
      { numRuns: 2000, seed: fuzzSeed() },
    );
  });
});

describe("flaxFormat", () => {
  it("declares its name, extension and options", () => {
    expect(flaxFormat.name).toBe("flax");
    expect(flaxFormat.extensions).toEqual([".msgpack"]);
    expect(flaxFormat.options?.map((o) => [o.name, o.type, o.multiple])).toEqual([
      ["sep", "string", false],
      ["keep-scalars", "boolean", false],
    ]);
  });

  it("opens with the sep and keep-scalars options, naming a top-level array after the file", async () => {
    const bytes = readFileSync(fixturePath("flax", "scalars_and_leaves.msgpack"));
    const warnings: string[] = [];
    const file = await flaxFormat.open(bytesSource(bytes), { options: { "keep-scalars": true, sep: "/" }, onWarning: (m) => warnings.push(m) });
    expect(file.tensors.map((t) => t.name)).toContain("py_int");
    expect(warnings.every((w) => !w.includes("py_int"))).toBe(true);
    const top = await flaxFormat.open(bytesSource(readFileSync(fixturePath("flax", "array_top.msgpack"))), {
      options: {},
      fileName: "/some/dir/weights.msgpack",
    });
    expect(top.tensors.map((t) => t.name)).toEqual(["weights"]);
  });

  it("writes with the separator it is given, and reads the result back", async () => {
    const sink = new MemorySink();
    await flaxFormat.write({ metadata: null, tensors: [tensorFromBytes({ name: "a/b.c", dtype: "I8", shape: [1] }, Uint8Array.of(5))] }, sink, {
      options: { sep: "/" },
    });
    const file = await readFlax(sink.bytes(), { sep: "/" });
    expect(file.tensors.map((t) => t.name)).toEqual(["a/b.c"]);
    expect([...(await readTensorBytes(file.tensors[0]!))]).toEqual([5]);
  });

  it("refuses a sep given more than once", async () => {
    await expect(flaxFormat.open(bytesSource(cat(map(0))), { options: { sep: ["/", "."] } })).rejects.toMatchObject({ code: "InvalidOption" });
  });
});
