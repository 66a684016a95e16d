/**
 * The grouped kernels against torch (fixtures/casts): F32 → BF16 in WebAssembly SIMD (eight
 * elements at a time, in blocks) and its integer loop, F32 → F16, BF16 → F32 and F16 → F32 (four
 * elements and 32-bit words at a time on little-endian hosts). Every element lands in every lane
 * of a group (the input started 0 to 4 elements in), groups holding a NaN or an out-of-line value
 * next to ordinary ones, every tail length, sources and targets that start on a 2-byte but not a
 * 4-byte boundary, and nothing written outside the target; the same for the native module's
 * loops where it is built.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type CastKernel, type Dtype, dtypeInfo, kernels } from "@st-convert/core";
import "@st-convert/core/node";
import { fixturePath } from "@st-convert/testing";
// From the source, not the package: the integer loop and the SIMD kernel are not exported by it,
// and castKernel must be the same module's to share the SIMD kernel.
import { castKernel, f32ToBf16, simdF32ToBf16 } from "../src/castKernels.js";

const read = (name: string) => new Uint8Array(readFileSync(fixturePath("casts", name)));
const width = (dtype: Dtype) => dtypeInfo(dtype).bits / 8;

/** Every 16-bit pattern, in order, little-endian. */
const allHalves = () => new Uint8Array(Uint16Array.from({ length: 0x10000 }, (_, i) => i).buffer);

/** `bytes` copied to a fresh buffer at byte offset `at`, with a guard byte pattern around it. */
function placed(bytes: Uint8Array, at: number, guard: number): { buffer: Uint8Array; view: Uint8Array } {
  const buffer = new Uint8Array(bytes.byteLength + at + 8).fill(guard);
  buffer.set(bytes, at);
  return { buffer, view: buffer.subarray(at, at + bytes.byteLength) };
}

const portable = { portable: true };
const nativeLoops = kernels.castFloats !== undefined;
if (!nativeLoops && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error("the native module's cast loops are required here");

const cases: [string, Dtype, Dtype, () => CastKernel, () => Uint8Array, string][] = [
  ["F32 -> BF16 (castKernel: SIMD)", "F32", "BF16", () => castKernel("F32", "BF16", portable), () => read("F32.bin"), "F32-BF16.bin"],
  ["F32 -> BF16 (the integer loop)", "F32", "BF16", () => f32ToBf16, () => read("F32.bin"), "F32-BF16.bin"],
  ["F32 -> F16", "F32", "F16", () => castKernel("F32", "F16", portable), () => read("F32.bin"), "F32-F16.bin"],
  ["BF16 -> F32", "BF16", "F32", () => castKernel("BF16", "F32", portable), allHalves, "BF16-F32.bin"],
  ["F16 -> F32", "F16", "F32", () => castKernel("F16", "F32", portable), allHalves, "F16-F32.bin"],
];
// The native module's loops (SSE2 groups of eight on x86-64, then C), through castKernel as
// conversions use them: groups, tails and byte offsets matter to them as to the JavaScript.
if (nativeLoops) {
  cases.push(
    ["F32 -> BF16 (native)", "F32", "BF16", () => castKernel("F32", "BF16"), () => read("F32.bin"), "F32-BF16.bin"],
    ["F32 -> F16 (native)", "F32", "F16", () => castKernel("F32", "F16"), () => read("F32.bin"), "F32-F16.bin"],
    ["BF16 -> F32 (native)", "BF16", "F32", () => castKernel("BF16", "F32"), allHalves, "BF16-F32.bin"],
    ["F16 -> F32 (native, a pattern table)", "F16", "F32", () => castKernel("F16", "F32"), allHalves, "F16-F32.bin"],
  );
}

describe.each(cases)("%s in groups", (_, from, to, kernel, input, output) => {
  const source = input();
  const expected = read(output);
  const inWidth = width(from);
  const outWidth = width(to);
  const n = source.byteLength / inWidth;

  it("has NaNs in the fixture (the grouped path must hand their groups on)", () => {
    const view = new DataView(source.buffer, source.byteOffset, source.byteLength);
    const nans = Array.from({ length: n }, (_, i) =>
      inWidth === 4 ? Number.isNaN(view.getFloat32(i * 4, true)) : (view.getUint16(i * 2, true) & 0x7fff) > (from === "F16" ? 0x7c00 : 0x7f80),
    ).filter(Boolean).length;
    expect(nans).toBeGreaterThan(4);
  });

  // Offsets of the source and the target in their buffers: 4-byte aligned, or only 2-byte
  // aligned where the element is 2 bytes wide (a 4-byte element is always 4-byte aligned).
  const sourceOffsets = inWidth === 2 ? [0, 2] : [0];
  const targetOffsets = outWidth === 2 ? [0, 2] : [0];
  for (const sourceAt of sourceOffsets) {
    for (const targetAt of targetOffsets) {
      it(`equals torch from every lane, every tail, source at +${sourceAt}, target at +${targetAt}, writing nothing else`, () => {
        // Tails of 0 to 7: every count modulo the SIMD group of eight.
        for (let skip = 0; skip <= 4; skip++) {
          for (let tail = 0; tail <= 3; tail++) {
            const count = n - skip - tail;
            const src = placed(source.subarray(skip * inWidth, (skip + count) * inWidth), sourceAt, 0);
            const dst = placed(new Uint8Array(count * outWidth), targetAt, 0xa5);
            expect(kernel()(src.view, dst.view, count)).toBe(-1);
            const want = expected.subarray(skip * outWidth, (skip + count) * outWidth);
            expect(Buffer.compare(dst.view, want), `skip ${skip}, tail ${tail}`).toBe(0);
            const outside = [...dst.buffer.subarray(0, targetAt), ...dst.buffer.subarray(targetAt + count * outWidth)];
            expect(
              outside.every((b) => b === 0xa5),
              `skip ${skip}, tail ${tail}: bytes outside the target`,
            ).toBe(true);
          }
        }
      });
    }
  }

  it("casts fewer elements than a group (0 to 7) the same way", () => {
    for (let count = 0; count <= 7; count++) {
      for (let start = 0; start < 8; start++) {
        const src = placed(source.subarray(start * inWidth, (start + count) * inWidth), 0, 0);
        const dst = placed(new Uint8Array(count * outWidth), outWidth === 2 ? 2 : 0, 0xa5);
        kernel()(src.view, dst.view, count);
        expect([...dst.view]).toEqual([...expected.subarray(start * outWidth, (start + count) * outWidth)]);
        expect(dst.buffer.at(-1)).toBe(0xa5);
      }
    }
  });
});

describe("F32 -> BF16 in WebAssembly SIMD", () => {
  const source = read("F32.bin");
  const expected = read("F32-BF16.bin");
  const n = source.byteLength / 4;

  it("runs under Node (so the tests above cover it), and castKernel uses it", () => {
    const simd = simdF32ToBf16();
    expect(simd).toBeDefined();
    expect(castKernel("F32", "BF16", portable)).toBe(simd);
  });

  it("spans several blocks of its memory (the fixture holds more than two)", () => expect(n).toBeGreaterThan(2 * 8192));

  it("two kernels sharing the memory, called in turn piece by piece on different inputs, both equal torch", () => {
    // The second input is the first reversed element-wise, so that a block left over from the
    // other kernel's call would show.
    const reversed = new Uint8Array(new Uint32Array(new Uint32Array(source.slice().buffer).reverse()).buffer);
    const reversedExpected = new Uint8Array(new Uint16Array(new Uint16Array(expected.slice().buffer).reverse()).buffer);
    const [a, b] = [castKernel("F32", "BF16", portable), castKernel("F32", "BF16", portable)];
    const outA = new Uint8Array(n * 2);
    const outB = new Uint8Array(n * 2);
    for (let at = 0, k = 0; at < n; k++) {
      const count = Math.min([5000, 8192, 8199, 13][k % 4]!, n - at);
      a(source.subarray(at * 4, (at + count) * 4), outA.subarray(at * 2, (at + count) * 2), count);
      b(reversed.subarray(at * 4, (at + count) * 4), outB.subarray(at * 2, (at + count) * 2), count);
      at += count;
    }
    expect(Buffer.compare(outA, expected)).toBe(0);
    expect(Buffer.compare(outB, reversedExpected)).toBe(0);
  });
});
