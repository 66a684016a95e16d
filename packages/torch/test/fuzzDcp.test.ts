/**
 * The distributed checkpoint reader under fuzzing: the `.metadata` pickle of torch's 4-rank folder
 * mutated (its rank files as torch wrote them), and one of its rank files mutated and truncated
 * (the metadata as torch wrote it). Every variant gives tensors or a coded error.
 */
import { readFileSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bytesSource, readTensorBytes } from "@st-convert/core";
import { readDcp } from "@st-convert/torch";
import { fixturePath, fuzzReader } from "@st-convert/testing";

const folder = fixturePath("dcp", "ranks4");
const files = new Map(readdirSync(folder).map((name) => [name, readFileSync(fixturePath("dcp", "ranks4", name))]));

async function readAll(metadata: Uint8Array, replaced: Map<string, Uint8Array> = new Map()): Promise<void> {
  const checkpoint = await readDcp(metadata, async (name) => {
    const bytes = replaced.get(name) ?? files.get(name);
    if (bytes === undefined) throw new Error(`${name} is not in the folder`);
    return bytesSource(bytes, name);
  });
  for (const t of checkpoint.tensors) await readTensorBytes(t);
}

describe("dcp reader under fuzzing", () => {
  it("has seeds torch wrote", () => expect(files.get(".metadata")!.byteLength).toBeGreaterThan(1000));
  fuzzReader({ name: "dcp metadata", seeds: [files.get(".metadata")!], read: (bytes) => readAll(bytes) });
  fuzzReader({
    name: "dcp rank file",
    seeds: [files.get("__2_0.distcp")!],
    read: (bytes) => readAll(files.get(".metadata")!, new Map([["__2_0.distcp", bytes]])),
  });
});
