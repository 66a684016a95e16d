/**
 * For any bytes, the readers return tensors or throw StConvertError: never another exception,
 * never a hang. Inputs are valid files with random bytes overwritten, inserted or cut, and every
 * truncation of a small archive.
 */
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type TensorSource, bytesSource } from "@st-convert/core";
import { readNpy, readNpz } from "@st-convert/npy";
import { errorCode, fixturePath, fuzzReader, fuzzRuns, fuzzSeed, fuzzTimeout } from "@st-convert/testing";

/** Reads a file completely: the header, then every tensor's bytes in small chunks. */
async function readAll(bytes: Uint8Array, kind: "npy" | "npz", codec?: "fflate"): Promise<void> {
  const source = bytesSource(bytes, `fuzz.${kind}`);
  const file: TensorSource =
    kind === "npy" ? await readNpy(source, { dtypes: ["V2=BF16"] }) : await readNpz(source, { dtypes: ["V2=BF16"], codec, fortranSlabSize: 64 });
  for (const t of file.tensors) for await (const _ of t.chunks({ chunkSize: 64 })) void _;
}

/** "ok", or the code of the StConvertError the reader refuses the bytes with (any other error propagates). */
const outcome = (bytes: Uint8Array, kind: "npy" | "npz", codec?: "fflate") => errorCode(readAll(bytes, kind, codec));

const seeds: [string, "npy" | "npz"][] = [
  ["fortran_i64_be.npy", "npy"],
  ["header_comments.npy", "npy"],
  ["npz_stored.npz", "npz"],
  ["npz_compressed.npz", "npz"],
  ["npz_stored_stream.npz", "npz"],
  ["npz_compressed_fortran.npz", "npz"],
];

const mutation = (length: number) =>
  fc.array(
    fc.oneof(
      fc.record({ kind: fc.constant("set" as const), at: fc.integer({ min: 0, max: length - 1 }), value: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ kind: fc.constant("cut" as const), at: fc.integer({ min: 0, max: length }) }),
      fc.record({ kind: fc.constant("insert" as const), at: fc.integer({ min: 0, max: length }), bytes: fc.uint8Array({ maxLength: 8 }) }),
    ),
    { minLength: 1, maxLength: 4 },
  );

function apply(bytes: Uint8Array, edits: { kind: "set" | "cut" | "insert"; at: number; value?: number; bytes?: Uint8Array }[]): Uint8Array {
  let out = new Uint8Array(bytes);
  for (const e of edits) {
    const at = Math.min(e.at, out.byteLength);
    if (e.kind === "set" && at < out.byteLength) out[at] = e.value!;
    if (e.kind === "cut") out = out.slice(0, at);
    if (e.kind === "insert") out = Uint8Array.from([...out.subarray(0, at), ...e.bytes!, ...out.subarray(at)]);
  }
  return out;
}

describe("the shared harness", () => {
  const files = (kind: "npy" | "npz") => seeds.filter(([, k]) => k === kind).map(([name]) => readFileSync(fixturePath("npy", name)));
  fuzzReader({ name: "npy", seeds: files("npy"), read: (bytes) => readAll(bytes, "npy") });
  fuzzReader({ name: "npz", seeds: files("npz"), read: (bytes) => readAll(bytes, "npz") });
});

describe("fuzz", () => {
  it.each(seeds)(
    "mutations of %s give tensors or an StConvertError",
    async (name, kind) => {
      const bytes = readFileSync(fixturePath("npy", name));
      await fc.assert(
        fc.asyncProperty(mutation(bytes.byteLength), fc.boolean(), async (edits, fflate) => {
          const result = await outcome(apply(bytes, edits), kind, fflate ? "fflate" : undefined);
          expect(typeof result).toBe("string");
        }),
        // Scales with FUZZ_RUNS (150 in CI: 250 runs per seed file), seeded so that a failure reproduces.
        { numRuns: Math.ceil((fuzzRuns() * 5) / 3), seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );

  it("every truncation of a small archive is refused cleanly", async () => {
    const bytes = readFileSync(fixturePath("npy", "npz_compressed.npz"));
    const codes = new Set<string>();
    for (let n = 0; n < bytes.byteLength; n++) codes.add(await outcome(bytes.subarray(0, n), "npz"));
    expect(codes.has("ok")).toBe(false);
    expect([...codes].every((c) => typeof c === "string")).toBe(true);
  });

  it(
    "random bytes, with and without the magic strings, give an StConvertError",
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.uint8Array({ maxLength: 400 }), fc.constantFrom("", "\x93NUMPY\x01\x00", "PK\x03\x04", "PK\x05\x06"), async (tail, prefix) => {
          const bytes = Uint8Array.from([...Buffer.from(prefix, "latin1"), ...tail]);
          expect(typeof (await outcome(bytes, "npy"))).toBe("string");
          expect(typeof (await outcome(bytes, "npz"))).toBe("string");
        }),
        { numRuns: Math.ceil((fuzzRuns() * 10) / 3), seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );
});
