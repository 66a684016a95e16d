import { readFileSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { join } from "node:path";
import { StConvertError, bytesSource, isStConvertError, readSafetensors, readSafetensorsIndex, readTensorBytes } from "@st-convert/core";
import { fixturePath, fuzzReader, safetensorsHostileCases } from "@st-convert/testing";

const seeds = ["mixed.safetensors", "names_order.safetensors", "zero_sized.safetensors", "dtype_f4.safetensors", "metadata_escapes.safetensors"].map((f) =>
  readFileSync(fixturePath("safetensors", f)),
);

async function readAll(bytes: Uint8Array): Promise<void> {
  const file = await readSafetensors(bytes);
  for (const t of file.tensors) await readTensorBytes(t);
}

describe("safetensors reader under fuzzing", () => {
  fuzzReader({
    name: "safetensors",
    seeds: [...seeds, ...safetensorsHostileCases.map(([, bytes]) => bytes).filter((b) => b.byteLength < 4096)],
    read: readAll,
  });

  it("refuses every strict truncation of a valid file (the file must be covered exactly)", async () => {
    for (const file of seeds) {
      for (let length = 0; length < file.byteLength; length++) {
        const outcome = await readAll(file.subarray(0, length)).then(
          () => "ok",
          (error: unknown) => (isStConvertError(error) ? "refused" : String(error)),
        );
        expect(outcome, `length ${length}`).toBe("refused");
      }
    }
  });

  it("has a seed corpus from the reference", () => {
    expect(readdirSync(fixturePath("safetensors")).length).toBeGreaterThan(5);
  });
});

describe("sharded index reader under fuzzing", () => {
  // huggingface_hub's checkpoint: the index is fuzzed, its shards are served from memory.
  const hub = fixturePath("sharded", "hub");
  const shards = new Map(readdirSync(hub).map((name) => [name, new Uint8Array(readFileSync(join(hub, name)))]));
  const openShard = async (name: string) => {
    const bytes = shards.get(name);
    if (bytes === undefined) throw new StConvertError("Io", "cannot open for reading: no such file or directory", { file: name });
    return bytesSource(bytes, name);
  };
  fuzzReader({
    name: "safetensors index",
    seeds: [shards.get("model.safetensors.index.json")!],
    read: async (bytes) => {
      const file = await readSafetensorsIndex(bytes, openShard);
      for (const t of file.tensors) await readTensorBytes(t);
    },
  });
});
