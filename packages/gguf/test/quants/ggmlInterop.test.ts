/**
 * The block-type kernels against ggml's C on fresh random data (skipped with a note without the
 * library; `.ci/run` requires it): dequantization of random blocks of every type (3,000 each of Q4_K
 * and Q8_0), and quantization of random rows of every type we make; Q8_0's two kernels (WebAssembly
 * SIMD and JavaScript) on blocks made to meet every edge of roundf and of the f16 scale.
 */
import { describeGgml, Random } from "@st-convert/testing";
import { expect, it, vi } from "vitest";
import { canDequantize, canQuantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } from "../../src/quants/index.js";
import { dequantizeQ4_K, dequantizeQ6_K } from "../../src/quants/kQuants.js";
import { dequantizeQ8_0, quantizeQ8_0 } from "../../src/quants/legacy.js";
import { dequantizeSimd, hasDequantSimd } from "../../src/quants/simdDequant.js";
import { hasQ8_0Simd, quantizeQ8_0Simd } from "../../src/quants/simdQ8_0.js";
import { q8EdgeBlocks } from "./q8EdgeBlocks.js";

/** Byte offsets of each type's f16 scales, given finite random values so most blocks are ordinary numbers. */
const F16_SCALES: Record<string, number[]> = {
  Q4_0: [0],
  Q4_1: [0, 2],
  Q5_0: [0],
  Q5_1: [0, 2],
  Q8_0: [0],
  Q2_K: [80, 82],
  Q3_K: [108],
  Q4_K: [0, 2],
  Q5_K: [0, 2],
  Q6_K: [208],
  IQ2_XXS: [0],
  IQ2_XS: [0],
  IQ2_S: [0],
  IQ3_XXS: [0],
  IQ3_S: [0],
  IQ1_S: [0],
  IQ4_NL: [0],
  IQ4_XS: [0],
  TQ1_0: [52],
  TQ2_0: [64],
};

function randomBlocks(random: Random, name: string, count: number): Uint8Array {
  const info = ggmlTypeInfo((GgmlType as Record<string, number>)[name]!)!;
  const out = random.bytes(count * info.typeSize);
  for (let b = 0; b < count; b++) {
    // one block in 16 keeps its random scale bits: NaN, infinite and subnormal scales included
    if (random.int(16) === 0) continue;
    for (const at of F16_SCALES[name] ?? []) {
      const h = (random.int(2) << 15) | (random.range(1, 24) << 10) | random.int(1024);
      out[b * info.typeSize + at] = h & 0xff;
      out[b * info.typeSize + at + 1] = h >> 8;
    }
  }
  return out;
}

function normal(random: Random): number {
  const u = (random.uint32() + 1) / 2 ** 32;
  const v = random.uint32() / 2 ** 32;
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

/** Rows of 256 values: Gaussian at random scales, groups of 16 scaled apart, outliers, zeros, ties on eighths. */
function randomRows(random: Random, rows: number): Float32Array {
  const out = new Float32Array(rows * 256);
  for (let r = 0; r < rows; r++) {
    const scale = 10 ** random.range(-6, 4);
    const kind = random.int(5);
    for (let g = 0; g < 16; g++) {
      const groupScale = kind === 1 ? scale * (0.05 + 2 * (random.uint32() / 2 ** 32)) : scale;
      for (let i = 0; i < 16; i++) {
        let v = normal(random) * groupScale;
        if (kind === 2 && random.chance(0.02)) v *= 100;
        if (kind === 3 && random.chance(0.5)) v = 0;
        if (kind === 4) v = Math.round(v * 8) / 8;
        out[r * 256 + g * 16 + i] = v;
      }
    }
  }
  return out;
}

function bitDifferences(ours: Float32Array, expected: Float32Array): string[] {
  const a = new Uint32Array(ours.buffer, ours.byteOffset, ours.length);
  const b = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  const out: string[] = [];
  for (let i = 0; i < a.length && out.length < 8; i++) {
    if (a[i] === b[i] || (Number.isNaN(ours[i]) && Number.isNaN(expected[i]))) continue;
    out.push(`[${i}] ${ours[i]} vs ${expected[i]}`);
  }
  return out;
}

const DEQUANTIZED = Object.keys(GgmlType).filter((name) => {
  const info = ggmlTypeInfo((GgmlType as Record<string, number>)[name]!)!;
  return info.blockSize > 1 && canDequantize((GgmlType as Record<string, number>)[name]!);
});

describeGgml("block types against ggml's C", (oracle) => {
  it("ggmlTypeInfo has ggml's block geometry for every type id ggml knows", () => {
    const traits = oracle.traits();
    for (const [id, t] of Object.entries(traits)) {
      const ours = ggmlTypeInfo(Number(id));
      expect(ours && { name: ours.name.toLowerCase(), blockSize: ours.blockSize, typeSize: ours.typeSize }, `type ${id}`).toEqual({
        name: t.name.toLowerCase(),
        blockSize: t.blockSize,
        typeSize: t.typeSize,
      });
    }
    for (let id = 0; id < 64; id++) expect(ggmlTypeInfo(id) === undefined, `type ${id}`).toBe(traits[id] === undefined);
  });

  for (const name of DEQUANTIZED) {
    const count = name === "Q4_K" || name === "Q8_0" ? 3000 : 200;
    it(`dequantizes ${count} random ${name} blocks to ggml's bits`, () => {
      const type = (GgmlType as Record<string, number>)[name]!;
      const info = ggmlTypeInfo(type)!;
      const blocks = randomBlocks(new Random(0x6767, type), name, count);
      const ours = new Float32Array(count * info.blockSize);
      dequantizeRows(type, blocks, ours);
      expect(bitDifferences(ours, oracle.dequantize(type, blocks))).toEqual([]);
    });
  }

  /** Rows no model should hold but a file can: infinities, NaN (the quiet default one), all-NaN, ±FLT_MAX, all-subnormal, one huge outlier. */
  function hostileRows(): Float32Array {
    const rows = new Float32Array(256 * 8);
    for (let i = 0; i < rows.length; i++) rows[i] = Math.sin(i * 0.7) * 3;
    rows[5] = Number.POSITIVE_INFINITY;
    rows[256 + 77] = Number.NEGATIVE_INFINITY;
    rows[512 + 9] = Number.NaN;
    rows.fill(Number.NaN, 768, 1024);
    rows[1024 + 3] = 3.4028234663852886e38;
    rows[1024 + 200] = -3.4028234663852886e38;
    for (let i = 1280; i < 1536; i++) rows[i] = i % 3 === 0 ? 1e-45 : -(i % 7) * 1e-45;
    rows[1536 + 100] = 1e30;
    rows.fill(0, 1792, 2048);
    rows[1792 + 255] = -1e-38;
    return rows;
  }

  for (const name of Object.keys(GgmlType)) {
    const type = (GgmlType as Record<string, number>)[name]!;
    if (!canQuantize(type)) continue;
    it(`quantizes rows with infinities, NaN, FLT_MAX and subnormals to ${name} as ggml_quantize_chunk does`, () => {
      const info = ggmlTypeInfo(type)!;
      const rows = hostileRows();
      const ours = new Uint8Array((rows.length / info.blockSize) * info.typeSize);
      quantizeRows(type, rows, ours);
      const expected = oracle.quantize(type, rows, 256);
      const rowBytes = expected.length / 8;
      const differing: number[] = [];
      for (let r = 0; r < 8; r++) {
        if (!Buffer.from(ours.subarray(r * rowBytes, (r + 1) * rowBytes)).equals(Buffer.from(expected.subarray(r * rowBytes, (r + 1) * rowBytes))))
          differing.push(r);
      }
      expect(differing).toEqual([]);
    });
    it(`quantizes 256 random rows to ${name} as ggml_quantize_chunk does`, () => {
      const info = ggmlTypeInfo(type)!;
      const rows = randomRows(new Random(0x7171, type), 256);
      const ours = new Uint8Array((rows.length / info.blockSize) * info.typeSize);
      quantizeRows(type, rows, ours);
      const expected = oracle.quantize(type, rows, 256);
      const rowBytes = expected.length / 256;
      const differing: number[] = [];
      for (let r = 0; r < 256; r++) {
        for (let i = r * rowBytes; i < (r + 1) * rowBytes; i++) {
          if (ours[i] !== expected[i]) {
            differing.push(r);
            break;
          }
        }
      }
      expect(differing).toEqual([]);
    });
  }
});

describeGgml("Q8_0's WebAssembly SIMD and JavaScript kernels against ggml's C", (oracle) => {
  it("runs the SIMD kernel on this Node", () => {
    expect(hasQ8_0Simd()).toBe(true);
  });
  it("both give ggml_quantize_chunk's bytes on 20,003 edge blocks (three calls into the module, the last one partial and not a whole number of groups of four)", () => {
    const values = q8EdgeBlocks(new Random(0x5180), 20003);
    const expected = oracle.quantize(GgmlType.Q8_0, values, 32);
    const simd = new Uint8Array(expected.length);
    const scalar = new Uint8Array(expected.length);
    expect(quantizeQ8_0Simd(values, simd, 20003, quantizeQ8_0)).toBe(true);
    quantizeQ8_0(values, scalar, 20003);
    const differing = (ours: Uint8Array) => {
      const blocks: number[] = [];
      for (let b = 0; b < 20003 && blocks.length < 8; b++) {
        if (!Buffer.from(ours.subarray(b * 34, b * 34 + 34)).equals(Buffer.from(expected.subarray(b * 34, b * 34 + 34)))) blocks.push(b);
      }
      return blocks;
    };
    expect(differing(simd)).toEqual([]);
    expect(differing(scalar)).toEqual([]);
  });
});

describeGgml("Q8_0, Q4_K and Q6_K dequantization: the WebAssembly SIMD and JavaScript kernels against ggml's C", (oracle) => {
  const SCALAR = { Q8_0: dequantizeQ8_0, Q4_K: dequantizeQ4_K, Q6_K: dequantizeQ6_K };
  it("runs the SIMD kernel on this Node", () => {
    for (const name of Object.keys(SCALAR)) expect(hasDequantSimd((GgmlType as Record<string, number>)[name]!), name).toBe(true);
  });
  // 5,000 blocks: more than one call into the module (2,048 blocks), the last one partial
  it.each(Object.keys(SCALAR))("%s: both give ggml's bits on 5,000 random blocks (NaN, infinite and subnormal scales among them)", (name) => {
    const type = (GgmlType as Record<string, number>)[name]!;
    const info = ggmlTypeInfo(type)!;
    const blocks = randomBlocks(new Random(0x5d51, type), name, 5000);
    const expected = oracle.dequantize(type, blocks);
    const simd = new Float32Array(5000 * info.blockSize);
    const scalar = new Float32Array(5000 * info.blockSize);
    expect(dequantizeSimd(type, blocks, simd, 5000)).toBe(true);
    SCALAR[name as keyof typeof SCALAR](blocks, scalar, 5000);
    expect(bitDifferences(simd, expected)).toEqual([]);
    expect(bitDifferences(scalar, expected)).toEqual([]);
  });
  it("without WebAssembly (a page whose CSP refuses it), dequantizeRows gives the same bits by the JavaScript loops", async () => {
    vi.stubGlobal("WebAssembly", undefined);
    vi.resetModules();
    try {
      const plain = await import("../../src/quants/index.js");
      const simd = await import("../../src/quants/simdDequant.js");
      for (const name of Object.keys(SCALAR)) {
        const type = (GgmlType as Record<string, number>)[name]!;
        const blocks = randomBlocks(new Random(0x6a74, type), name, 300);
        const ours = new Float32Array(300 * ggmlTypeInfo(type)!.blockSize);
        plain.dequantizeRows(type, blocks, ours);
        expect(bitDifferences(ours, oracle.dequantize(type, blocks)), name).toEqual([]);
        expect(simd.hasDequantSimd(type), name).toBe(false);
      }
    } finally {
      vi.unstubAllGlobals();
      vi.resetModules();
    }
  });
});

describeGgml("the K-quants' WebAssembly loops, and every kernel without WebAssembly, against ggml's C", (oracle) => {
  const differingRows = (ours: Uint8Array, expected: Uint8Array, rows: number) => {
    const rowBytes = expected.length / rows;
    const differing: number[] = [];
    for (let r = 0; r < rows && differing.length < 8; r++) {
      if (!Buffer.from(ours.subarray(r * rowBytes, (r + 1) * rowBytes)).equals(Buffer.from(expected.subarray(r * rowBytes, (r + 1) * rowBytes))))
        differing.push(r);
    }
    return differing;
  };
  /** Which of `count` random rows (seeded by `seed`) `quantize` makes into other bytes than ggml's C, as `name`. */
  const rowsOff = (quantize: typeof quantizeRows, name: string, seed: number, count: number): number[] => {
    const type = (GgmlType as Record<string, number>)[name]!;
    const info = ggmlTypeInfo(type)!;
    const rows = randomRows(new Random(seed, type), count);
    const ours = new Uint8Array((rows.length / info.blockSize) * info.typeSize);
    quantize(type, rows, ours);
    return differingRows(ours, oracle.quantize(type, rows, 256), count);
  };
  it.each(["Q4_K", "Q5_K"])("%s: 2,048 random rows (make_qkx2's sums, errors and levels in WebAssembly)", (name) => {
    expect(rowsOff(quantizeRows, name, 0x4b51, 2048)).toEqual([]);
  });
  it("with WebAssembly but without its SIMD, the scalar module and the JavaScript loops give the same bytes", async () => {
    // An engine without SIMD refuses a module that uses it. The stand-in compiles only the scalar
    // module (the one exporting "sums"), and refuses the SIMD ones (Q8_0's, and the loops' "due").
    type Api = { Module: new (bytes: Uint8Array) => object; Memory: unknown; Instance: unknown; CompileError: new (message: string) => Error };
    const wasm = (globalThis as unknown as { WebAssembly: Api }).WebAssembly;
    const scalarOnly = Buffer.from("sums");
    // a constructor, as the real one (an arrow function cannot be called with `new`)
    const Module = new Proxy(wasm.Module, {
      construct(target, [bytes]: [Uint8Array]) {
        if (!Buffer.from(bytes).includes(scalarOnly)) throw new wasm.CompileError("SIMD is not supported here");
        return new target(bytes);
      },
    });
    // (the namespace's members are not enumerable: named one by one)
    vi.stubGlobal("WebAssembly", { Module, Memory: wasm.Memory, Instance: wasm.Instance, CompileError: wasm.CompileError });
    vi.resetModules();
    try {
      const { qkx2Loops } = await import("../../src/quants/qkx2Loops.js");
      const loops = qkx2Loops();
      expect([loops.sums !== undefined, loops.due !== undefined, loops.relevel !== undefined]).toEqual([true, false, false]);
      const scalar = await import("../../src/quants/index.js");
      for (const name of ["Q8_0", "Q4_K", "Q5_K"]) expect(rowsOff(scalar.quantizeRows, name, 0x5c41, 256), name).toEqual([]);
    } finally {
      vi.unstubAllGlobals();
      vi.resetModules();
    }
  });
  it("without WebAssembly (a page whose CSP refuses it), the JavaScript loops give the same bytes", async () => {
    vi.stubGlobal("WebAssembly", undefined);
    vi.resetModules();
    try {
      const plain = await import("../../src/quants/index.js");
      for (const name of ["Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]) expect(rowsOff(plain.quantizeRows, name, 0x6a73, 128), name).toEqual([]);
      const { hasQ8_0Simd: hasSimd } = await import("../../src/quants/simdQ8_0.js");
      expect(hasSimd()).toBe(false);
    } finally {
      vi.unstubAllGlobals();
      vi.resetModules();
    }
  });
});
