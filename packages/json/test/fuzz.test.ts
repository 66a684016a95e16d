/**
 * The JSON reader under fuzzing: the shared harness (random bytes, mutated seeds, every
 * truncation) over documents we write and one written by hand, plus mutations read through
 * windows of every small size (the tokenizer's hardest case: tokens cut at window edges).
 */
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, it } from "vitest";
import { isStConvertError, readSafetensors } from "@st-convert/core";
import { serializeTensorJson } from "@st-convert/json";
import { fixturePath, fuzzReader, fuzzRuns, fuzzSeed, fuzzTimeout } from "@st-convert/testing";
import { readAll, utf8 } from "./helpers.js";

const mixed = await readSafetensors(readFileSync(fixturePath("safetensors", "mixed.safetensors")));
const seeds = [await serializeTensorJson(mixed), await serializeTensorJson(mixed, { base64: true }), readFileSync(fixturePath("json", "handwritten.json"))];

describe("JSON reader under fuzzing", () => {
  fuzzReader({ name: "json", seeds, read: (bytes) => readAll(bytes) });
});

describe("fuzz", () => {
  const valid = [
    '{"__metadata__": {"a": "b"}, "w": {"dtype": "F32", "shape": [2, 2], "data": [[1.5, -0.0], ["NaN", 3e-5]]}, "b": {"dtype": "BF16", "shape": [1], "data_base64": "gD8="}}',
    '{"i": {"shape": [3], "data": [1, -2, 9223372036854775807], "dtype": "I64"}, "c": {"dtype": "C64", "shape": [], "data": [1, 2]}, "t": {"dtype": "BOOL", "shape": [2], "data": [true, false]}}',
  ];
  it(
    "any mutation of a valid document is read or refused with an StConvertError",
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...valid),
          fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom("replace", "insert", "delete")), { minLength: 1, maxLength: 4 }),
          fc.integer({ min: 1, max: 16 }),
          async (base, edits, windowSize) => {
            const bytes = [...utf8.encode(base)];
            for (const [at, byte, op] of edits) {
              const i = at % (bytes.length + 1);
              if (op === "replace" && i < bytes.length) bytes[i] = byte;
              else if (op === "insert") bytes.splice(i, 0, byte);
              else bytes.splice(i, 1);
            }
            try {
              await readAll(Uint8Array.from(bytes), { windowSize });
            } catch (error) {
              if (!isStConvertError(error)) throw error;
            }
          },
        ),
        { numRuns: fuzzRuns() * 20, seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );
});
