/** The reader under fuzzing: random bytes, mutated torch files (zip and legacy), every truncation. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { readTensorBytes } from "@st-convert/core";
import { readTorch } from "@st-convert/torch";
import { fixturePath, fuzzReader } from "@st-convert/testing";

const seeds = ["views.pt", "views_p4.pt", "legacy.pt", "shapes.pt", "crc0.pt", "big_endian.pt", "rezipped_deflated.pt", "nested.pt"].map((f) =>
  readFileSync(fixturePath("torch", f)),
);

async function readAll(bytes: Uint8Array): Promise<void> {
  const file = await readTorch(bytes);
  for (const t of file.tensors) await readTensorBytes(t);
}

describe("torch reader under fuzzing", () => {
  it("has seeds torch wrote", () => expect(seeds.every((s) => s.byteLength < 4096)).toBe(true));
  fuzzReader({ name: "torch", seeds, read: readAll });
});
