/** The document the writer produces, its refusals, and that it streams. */
import { describe, expect, it } from "vitest";
import { type ByteSink, type TensorEntry, createMetadata, readTensorBytes } from "@st-convert/core";
import { readTensorJson, serializeTensorJson, writeTensorJson } from "@st-convert/json";
import { CountingSink, failure, tensor, text, toJson } from "./helpers.js";

const bytesOf = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);

describe("the document", () => {
  it("is the README's form: metadata first, one tensor per line, in the source's order", async () => {
    const { json } = await toJson({
      metadata: createMetadata([["format", "pt"]]),
      tensors: [
        tensor("w", "F32", [2, 2], bytesOf([1.5, -0, NaN, -Infinity])),
        tensor("emb", "BF16", [3], Uint8Array.of(0x80, 0x3f, 0x00, 0xc0, 0x49, 0x40)),
        tensor("step", "I64", [], new Uint8Array(new BigInt64Array([-5n]).buffer)),
        tensor("mask", "BOOL", [2], Uint8Array.of(1, 0)),
        tensor("z", "C64", [1], bytesOf([0.25, -2])),
      ],
    });
    expect(text(json)).toBe(
      [
        "{",
        '  "__metadata__": {"format": "pt"},',
        '  "w": {"dtype": "F32", "shape": [2, 2], "data": [1.5, -0.0, "NaN", "-Infinity"]},',
        '  "emb": {"dtype": "BF16", "shape": [3], "data": [1, -2, 3.14]},',
        '  "step": {"dtype": "I64", "shape": [], "data": [-5]},',
        '  "mask": {"dtype": "BOOL", "shape": [2], "data": [true, false]},',
        '  "z": {"dtype": "C64", "shape": [1], "data": [[0.25, -2]]}',
        "}",
        "",
      ].join("\n"),
    );
  });

  it("writes data_base64 as standard padded base64 of the little-endian bytes", async () => {
    const { json } = await toJson(
      { metadata: null, tensors: [tensor("a", "U8", [4], Uint8Array.of(0, 1, 2, 255)), tensor("b", "U16", [1], Uint8Array.of(1, 0))] },
      { base64: true },
    );
    expect(text(json)).toBe(
      '{\n  "a": {"dtype": "U8", "shape": [4], "data_base64": "AAEC/w=="},\n  "b": {"dtype": "U16", "shape": [1], "data_base64": "AQA="}\n}\n',
    );
  });

  it("escapes names and metadata as JSON.stringify does, non-ASCII as UTF-8", async () => {
    const { json } = await toJson({ metadata: createMetadata([['k"\n', "é\u0001😀"]]), tensors: [tensor('a"b\\c\t', "U8", [], Uint8Array.of(7))] });
    expect(text(json)).toBe('{\n  "__metadata__": {"k\\"\\n": "é\\u0001😀"},\n  "a\\"b\\\\c\\t": {"dtype": "U8", "shape": [], "data": [7]}\n}\n');
  });

  it("writes an empty document, metadata alone, and empty tensors", async () => {
    expect(text((await toJson({ metadata: null, tensors: [] })).json)).toBe("{}\n");
    expect(text((await toJson({ metadata: createMetadata(), tensors: [] })).json)).toBe('{\n  "__metadata__": {}\n}\n');
    const { json } = await toJson(
      { metadata: null, tensors: [tensor("e", "F32", [2, 0], new Uint8Array(0)), tensor("f", "F32", [0], new Uint8Array(0))] },
      { base64: false },
    );
    expect(text(json)).toBe('{\n  "e": {"dtype": "F32", "shape": [2, 0], "data": []},\n  "f": {"dtype": "F32", "shape": [0], "data": []}\n}\n');
    expect(text((await toJson({ metadata: null, tensors: [tensor("e", "U8", [0], new Uint8Array(0))] }, { base64: true })).json)).toContain(
      '"data_base64": ""',
    );
  });
});

describe("refusals", () => {
  const lying = (byteLength: number, delivered: number): TensorEntry => ({
    name: "liar",
    dtype: "U8",
    shape: [byteLength],
    byteLength,
    async *chunks() {
      yield new Uint8Array(delivered);
    },
  });

  it.each([
    ["two tensors with one name", { metadata: null, tensors: [tensor("a", "U8", [1]), tensor("a", "U8", [1])] }, "DuplicateKey"],
    ["a tensor called __metadata__", { metadata: null, tensors: [tensor("__metadata__", "U8", [1])] }, "InvalidName"],
    ["a lone surrogate in a name", { metadata: null, tensors: [tensor("a\ud800", "U8", [1])] }, "InvalidName"],
    ["a lone surrogate in metadata", { metadata: createMetadata([["k", "\udc00"]]), tensors: [] }, "InvalidMetadata"],
    ["metadata that is not strings", { metadata: { k: 3 } as never, tensors: [] }, "InvalidMetadata"],
    ["a shape whose dims overflow u64 before its 0", { metadata: null, tensors: [tensor("e", "U8", [2 ** 32, 2 ** 32, 0])] }, "ValidationOverflow"],
    ["a tensor delivering fewer bytes", { metadata: null, tensors: [lying(4, 3)] }, "ByteLengthMismatch"],
    ["a tensor delivering more bytes", { metadata: null, tensors: [lying(4, 5)] }, "ByteLengthMismatch"],
  ])("%s", async (_case, source, code) => {
    for (const base64 of [false, true]) expect((await failure(toJson(source, { base64 }))).code).toBe(code);
  });

  it("names the tensor whose bytes failed", async () => {
    expect((await failure(toJson({ metadata: null, tensors: [lying(4, 3)] }))).tensor).toBe("liar");
  });

  it("passes on the sink's failure", async () => {
    const sink: ByteSink = {
      write: async () => {
        throw new Error("disk full");
      },
      close: async () => {},
      abort: async () => {},
    };
    await expect(writeTensorJson({ metadata: null, tensors: [tensor("a", "U8", [3])] }, sink)).rejects.toThrow("disk full");
  });
});

describe("streaming", () => {
  it("writes a 2-million-value tensor in pieces of at most 1 MiB, pulling chunks of the size asked", async () => {
    const count = 2_000_000;
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = Math.sin(i) * 1000;
    const bytes = new Uint8Array(values.buffer);
    const pulled: number[] = [];
    const source: TensorEntry = {
      name: "big",
      dtype: "F32",
      shape: [count],
      byteLength: bytes.length,
      async *chunks({ chunkSize = 1 << 22 } = {}) {
        for (let at = 0; at < bytes.length; at += chunkSize) {
          pulled.push(Math.min(chunkSize, bytes.length - at));
          yield bytes.subarray(at, at + chunkSize);
        }
      },
    };
    const sink = new CountingSink();
    await writeTensorJson({ metadata: null, tensors: [source] }, sink, { chunkSize: 1 << 20 });
    expect(sink.sizes.length).toBeGreaterThan(10);
    expect(Math.max(...sink.sizes)).toBeLessThanOrEqual(1 << 20);
    expect(Math.max(...pulled)).toBe(1 << 20);
    const back = await readTensorJson(sink.bytes(), { windowSize: 1 << 16 });
    expect(Buffer.from(await readTensorBytes(back.tensors[0]!)).equals(bytes)).toBe(true);
  });
});

describe("chunks that are Node Buffers at odd offsets", () => {
  it("are copied to aligned memory before typed-array views, not viewed through Buffer#slice", async () => {
    const data = Buffer.alloc(21);
    Buffer.from(new Float32Array([1.5, -2, 3.25, 4, 5]).buffer).copy(data, 1);
    const entry = {
      name: "w",
      dtype: "F32" as const,
      shape: [5],
      byteLength: 20,
      async *chunks() {
        yield data.subarray(1, 4); // three bytes: the element straddles chunks
        yield data.subarray(4, 21); // the rest starts at an odd offset in the buffer
      },
    };
    const json = new TextDecoder().decode(await serializeTensorJson({ metadata: null, tensors: [entry] }));
    expect(JSON.parse(json).w.data).toEqual([1.5, -2, 3.25, 4, 5]);
  });
});

describe("a tensor whose declared byte length disagrees with its dtype and shape", () => {
  it("is refused, not written as values the reader would refuse", async () => {
    // Found in review: F32 [1] declaring 8 bytes was written as "data": [0, 0].
    const liar: TensorEntry = {
      name: "w",
      dtype: "F32",
      shape: [1],
      byteLength: 8,
      chunks: async function* () {
        yield new Uint8Array(8);
      },
    };
    for (const base64 of [false, true]) {
      await expect(serializeTensorJson({ metadata: null, tensors: [liar] }, { base64 })).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "w" });
    }
  });
});
