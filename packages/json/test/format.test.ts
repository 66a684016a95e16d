/** The format object the CLI registers, and the JSON Schema shipped with the package. */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { DTYPES, MemorySink, bytesSource, createMetadata, readSafetensors } from "@st-convert/core";
import { jsonFormat } from "@st-convert/json";
import { fixturePath } from "@st-convert/testing";
import { text, toJson, utf8 } from "./helpers.js";
import { validate } from "./validateSchema.js";

const schema = JSON.parse(readFileSync(createRequire(import.meta.url).resolve("@st-convert/json/schema.json"), "utf8"));

describe("jsonFormat", () => {
  it("is called json, takes .json (an ambiguous extension) and declares --base64 for writing", () => {
    expect(jsonFormat.ambiguousExtension).toBe(true);
    expect(jsonFormat.name).toBe("json");
    expect(jsonFormat.extensions).toEqual([".json"]);
    expect(jsonFormat.options).toEqual([expect.objectContaining({ name: "base64", type: "boolean", multiple: false, appliesTo: "write" })]);
  });

  it.each([
    ['{"w": {"dtype": "F32", "shape": [], "data": 1}}', true],
    ['{"w": {"data_base64": "", "dtype": "U8", "shape": [0]}}', true],
    ['  \n{\n  "__metadata__": {}}', true],
    ['\ufeff{ "a.b\\"c": { "shape"', true],
    ['{"a": {', true], // cut by the head's end after the value opens: may be a tensor
    ['{"w": {}}', false],
    ["{}", false],
    ['{"architectures": ["LlamaForCausalLM"], "hidden_size": 8}', false],
    ['{"version": "1.0", "model": {"type": "BPE"}}', false],
    ['{"all.safetensors": {"metadata": null}}', false],
    ["[1, 2]", false],
    ["{1: 2}", false],
    ["\u0008\u0000\u0000\u0000\u0000\u0000\u0000\u0000{}", false],
  ])("sniffs %j as %s", (head, expected) => {
    expect(jsonFormat.sniff!(utf8.encode(head))).toBe(expected);
  });

  it("writes with the base64 option and reads through open()", async () => {
    const file = await readSafetensors(readFileSync(fixturePath("safetensors", "mixed.safetensors")));
    const sink = new MemorySink();
    await jsonFormat.write(file, sink, { options: { base64: true } });
    expect(text(sink.bytes())).not.toContain('"data": [');
    const back = await jsonFormat.open(bytesSource(sink.bytes()), { options: {} });
    expect(back.tensors.map((t) => t.name)).toEqual(file.tensors.map((t) => t.name));
  });
});

describe("schema.json", () => {
  it("names the 22 dtypes of the core table", () => {
    expect(schema.$defs.dtype.enum).toEqual(DTYPES.map((d) => d.code));
  });

  it("accepts what the writer writes (values and base64) and the hand-written example", async () => {
    const file = await readSafetensors(readFileSync(fixturePath("safetensors", "all_dtypes.safetensors")));
    const withMetadata = { metadata: createMetadata([["format", "pt"]]), tensors: file.tensors };
    for (const base64 of [false, true]) expect(validate(schema, JSON.parse(text((await toJson(withMetadata, { base64 })).json)))).toBe(true);
    expect(validate(schema, JSON.parse(readFileSync(fixturePath("json", "handwritten.json"), "utf8")))).toBe(true);
  });

  it.each([
    ["an unknown field", { w: { dtype: "U8", shape: [1], data: [1], extra: 1 } }],
    ["no dtype", { w: { shape: [1], data: [1] } }],
    ["both forms", { w: { dtype: "U8", shape: [1], data: [1], data_base64: "AQ==" } }],
    ["neither form", { w: { dtype: "U8", shape: [1] } }],
    ["an unknown dtype", { w: { dtype: "F128", shape: [1], data: [1] } }],
    ["a negative dimension", { w: { dtype: "U8", shape: [-1], data: [] } }],
    ["metadata that is not strings", { __metadata__: { a: 1 } }],
    ["a boolean in F32 data", { w: { dtype: "F32", shape: [1], data: [true] } }],
    ["a fraction in I32 data", { w: { dtype: "I32", shape: [1], data: [1.5] } }],
    ["a string other than the three", { w: { dtype: "F32", shape: [1], data: ["nan"] } }],
    ["a number in BOOL data", { w: { dtype: "BOOL", shape: [1], data: [1] } }],
    ["a C64 triple", { w: { dtype: "C64", shape: [1], data: [[1, 2, 3]] } }],
    ["F4 as values", { w: { dtype: "F4", shape: [2], data: [0, 1] } }],
    ["unpadded base64", { w: { dtype: "U8", shape: [1], data_base64: "AQ" } }],
    ["URL-safe base64", { w: { dtype: "U8", shape: [3], data_base64: "AQ_D" } }],
  ])("refuses %s", (_case, doc) => {
    expect(validate(schema, doc)).toBe(false);
  });
});
