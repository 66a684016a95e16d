/**
 * The reader under fuzzing (random bytes, mutated gguf-py files, both ways of reading quantized
 * tensors), and the writer's property: whatever the reader accepts, the writer writes back, and
 * reading that gives the same keys and tensors; a file written by gguf-py, and so laid out as the
 * writer lays it out, comes back byte for byte.
 */
import { readFileSync, readdirSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MemorySink, readTensorBytes } from "@st-convert/core";
import { type GgufFile, readGguf, writeGguf } from "@st-convert/gguf";
import { fixturePath, fuzzReader, fuzzRuns, fuzzSeed, fuzzTimeout, toHex } from "@st-convert/testing";
import { hostileCases } from "./hostileCases.js";

const seeds = [
  ...readdirSync(fixturePath("gguf"))
    .filter((f) => f.endsWith(".gguf") && !/-0000[23]-of-/.test(f))
    .map((f) => new Uint8Array(readFileSync(fixturePath("gguf", f)))),
  ...hostileCases.filter(([, , expected]) => expected === "ok").map(([, bytes]) => bytes),
];

async function readAll(bytes: Uint8Array, keepQuantized: boolean): Promise<GgufFile> {
  const file = await readGguf(bytes, { keepQuantized });
  for (const t of file.tensors) await readTensorBytes(t);
  return file;
}

describe("GGUF reader under fuzzing", () => {
  it("has a seed corpus from gguf-py and the hostile cases", () => expect(seeds.length).toBeGreaterThan(15));
  fuzzReader({ name: "gguf (dequantized)", seeds, read: (bytes) => readAll(bytes, false) });
  fuzzReader({ name: "gguf (blocks kept)", seeds, read: (bytes) => readAll(bytes, true) });

  it(
    "whatever the reader accepts, the writer writes back, and reading that gives the same keys and tensors",
    async () => {
      const view = async (file: GgufFile) => ({
        metadata: file.metadata,
        tensors: await Promise.all(file.tensors.map(async (t) => [t.name, t.dtype, t.ggmlType, t.shape, toHex(await readTensorBytes(t))])),
      });
      const edits = fc.array(fc.tuple(fc.nat(), fc.nat({ max: 255 })), { maxLength: 4 });
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: seeds.length - 1 }), edits, async (which, changes) => {
          const bytes = seeds[which]!.slice();
          for (const [at, value] of changes) bytes[at % bytes.byteLength] = value;
          let first: GgufFile;
          try {
            first = await readAll(bytes, true);
          } catch {
            return; // refused: the fuzz targets above check how
          }
          const sink = new MemorySink();
          await writeGguf(first, sink);
          const again = await readAll(sink.bytes(), true);
          expect(await view(again)).toEqual(await view(first));
          const twice = new MemorySink();
          await writeGguf(again, twice);
          expect(toHex(twice.bytes())).toBe(toHex(sink.bytes()));
        }),
        { numRuns: fuzzRuns() * 4, seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );
});
