/**
 * The pieces under the block kernels, against torch's own conversions (fixtures/casts), and the entry
 * points' contracts: which types they take, and whole blocks only.
 */
import { fixturePath, Random } from "@st-convert/testing";
import { readFileSync } from "node:fs";
import { describe, expect, it, vi } from "vitest";
import { floatToHalf, halfToFloatTable } from "../../src/quants/floatBits.js";
import { canDequantize, canQuantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } from "../../src/quants/index.js";
import { dequantizeQ4_K, dequantizeQ6_K } from "../../src/quants/kQuants.js";
import { dequantizeQ8_0, quantizeQ8_0 } from "../../src/quants/legacy.js";
import { dequantizeSimd } from "../../src/quants/simdDequant.js";
import { quantizeQ8_0Simd } from "../../src/quants/simdQ8_0.js";
import { q8EdgeBlocks } from "./q8EdgeBlocks.js";

function casts(name: string): Buffer {
  return readFileSync(fixturePath("casts", name));
}

describe("F16 scales", () => {
  it("widening every F16 bit pattern gives torch's F32 (NaNs stay NaNs)", () => {
    const expected = casts("F16-F32.bin");
    const ours = halfToFloatTable();
    const bits = new Uint32Array(ours.buffer);
    const wrong: string[] = [];
    for (let h = 0; h < 65536; h++) {
      const want = expected.readUInt32LE(4 * h);
      const ok = Number.isNaN(ours[h]) ? (want & 0x7fffffff) > 0x7f800000 : bits[h] === want;
      if (!ok) wrong.push(`0x${h.toString(16)}: 0x${bits[h]!.toString(16)} vs 0x${want.toString(16)}`);
    }
    expect(wrong).toEqual([]);
  });

  it("narrowing F32 rounds as torch does (to nearest, ties to even, subnormals, overflow); every NaN becomes ggml's 0x7E00", () => {
    const input = casts("F32.bin");
    const expected = casts("F32-F16.bin");
    const values = new Float32Array(input.buffer.slice(input.byteOffset, input.byteOffset + input.byteLength));
    let nans = 0;
    const wrong: string[] = [];
    for (let i = 0; i < values.length; i++) {
      const ours = floatToHalf(values[i]!);
      const want = Number.isNaN(values[i]) ? 0x7e00 : expected.readUInt16LE(2 * i);
      if (Number.isNaN(values[i])) nans++;
      if ((Number.isNaN(values[i]) ? ours & 0x7fff : ours) !== want) wrong.push(`value ${i} (${values[i]}): 0x${ours.toString(16)} vs 0x${want.toString(16)}`);
    }
    expect(wrong).toEqual([]);
    expect(nans).toBeGreaterThan(0);
  });
});

describe("dequantization in WebAssembly SIMD", () => {
  // Random bytes: every scale bit pattern (NaN, infinite, subnormal f16s) and every quant; the fixtures
  // (gguf-py's bits) and, with ggml's C, the interop tests check both kernels against the references.
  it.each([
    ["Q8_0", dequantizeQ8_0],
    ["Q4_K", dequantizeQ4_K],
    ["Q6_K", dequantizeQ6_K],
  ] as const)("%s gives the JavaScript loops' bits on 4,100 blocks of random bytes", (name, scalar) => {
    const type = GgmlType[name];
    const info = ggmlTypeInfo(type)!;
    const blocks = new Random(0x51d, type).bytes(4100 * info.typeSize);
    const simd = new Float32Array(4100 * info.blockSize);
    const loops = new Float32Array(4100 * info.blockSize);
    expect(dequantizeSimd(type, blocks, simd, 4100)).toBe(true);
    scalar(blocks, loops, 4100);
    const a = new Uint32Array(simd.buffer);
    const b = new Uint32Array(loops.buffer);
    const differing: number[] = [];
    for (let i = 0; i < a.length && differing.length < 8; i++) if (a[i] !== b[i] && !(Number.isNaN(simd[i]) && Number.isNaN(loops[i]))) differing.push(i);
    expect(differing).toEqual([]);
  });
});

describe("the entry points", () => {
  const QUANTIZED = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];
  const DEQUANTIZED = [
    ...["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"],
    ...["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4"],
  ];
  const ids = GgmlType as Record<string, number>;

  it("quantize exactly the thirteen types ggml makes without an importance matrix that the issue asks for", () => {
    const all = Object.keys(GgmlType).filter((name) => canQuantize(ids[name]!));
    expect(all.sort()).toEqual([...QUANTIZED].sort());
  });

  it("dequantize every type gguf-py dequantizes", () => {
    const all = Object.keys(GgmlType).filter((name) => canDequantize(ids[name]!));
    expect(all.sort()).toEqual([...DEQUANTIZED].sort());
  });

  it("have a kernel for every type canDequantize names (a list of its own, which a read loads no kernel to ask), and none other", () => {
    const converting = Object.keys(GgmlType).filter((name) => {
      const info = ggmlTypeInfo(ids[name]!)!;
      try {
        dequantizeRows(ids[name]!, new Uint8Array(info.typeSize), new Float32Array(info.blockSize));
        return true;
      } catch (error) {
        if (!String(error).includes("cannot dequantize")) throw error;
        return false;
      }
    });
    expect(converting.sort()).toEqual([...DEQUANTIZED].sort());
  });

  it("give ggml's block geometry for every type ggml knows (its table, recorded by fixtures/gen_quants.py), gguf-py's names", () => {
    const manifest = JSON.parse(readFileSync(new URL("./fixtures/manifest.json", import.meta.url), "utf8")) as {
      ggmlTypeTraits: Record<string, [string, number, number]>;
      ggufPyQuantSizes: Record<string, [number, number]>;
    };
    for (let id = 0; id < 43; id++) {
      const ggml = manifest.ggmlTypeTraits[String(id)];
      const ours = ggmlTypeInfo(id);
      expect(ours && [ours.name.toLowerCase(), ours.blockSize, ours.typeSize], `type ${id}`).toEqual(ggml && [ggml[0].toLowerCase(), ggml[1], ggml[2]]);
      // gguf-py names every type ggml has but Q2_0, and differs only on Q8_1's size (an older layout)
      if (ours !== undefined && ours.name !== "Q2_0" && ours.name !== "Q8_1")
        expect(manifest.ggufPyQuantSizes[ours.name]).toEqual([ours.blockSize, ours.typeSize]);
    }
  });

  it("know no removed or future type id", () => {
    for (const id of [4, 5, 31, 32, 33, 36, 37, 38, 43, 255, -1]) expect(ggmlTypeInfo(id), `type ${id}`).toBeUndefined();
  });

  it("refuse partial blocks, a wrong output size and types they cannot convert", () => {
    expect(() => dequantizeRows(GgmlType.Q4_K, new Uint8Array(143), new Float32Array(256))).toThrow(RangeError);
    expect(() => dequantizeRows(GgmlType.Q4_K, new Uint8Array(144), new Float32Array(255))).toThrow(RangeError);
    expect(() => dequantizeRows(GgmlType.Q8_K, new Uint8Array(292), new Float32Array(256))).toThrow(/cannot dequantize ggml type Q8_K/);
    expect(() => dequantizeRows(4, new Uint8Array(18), new Float32Array(32))).toThrow(/unknown ggml type 4/);
    expect(() => quantizeRows(GgmlType.Q8_0, new Float32Array(33), new Uint8Array(34))).toThrow(RangeError);
    expect(() => quantizeRows(GgmlType.Q8_0, new Float32Array(32), new Uint8Array(35))).toThrow(RangeError);
    expect(() => quantizeRows(GgmlType.IQ2_XXS, new Float32Array(256), new Uint8Array(66))).toThrow(/cannot quantize to ggml type IQ2_XXS/);
  });

  it("treat rows independently: many rows at once give the bytes of one row at a time", () => {
    const values = new Float32Array(4 * 256).map((_, i) => Math.sin(i * 0.37) * (1 + (i >> 8)));
    for (const name of QUANTIZED) {
      const info = ggmlTypeInfo(ids[name]!)!;
      const rowBytes = (256 / info.blockSize) * info.typeSize;
      const all = new Uint8Array(4 * rowBytes);
      quantizeRows(ids[name]!, values, all);
      for (let r = 0; r < 4; r++) {
        const one = new Uint8Array(rowBytes);
        quantizeRows(ids[name]!, values.subarray(r * 256, (r + 1) * 256), one);
        expect(Buffer.from(one).equals(Buffer.from(all.subarray(r * rowBytes, (r + 1) * rowBytes))), `${name} row ${r}`).toBe(true);
      }
    }
  });
});

describe("start-up", () => {
  it("builds no WebAssembly module to load the kernels or widen F16; the first Q4_K dequantization builds its kernel, the first K-quant quantization the loops", async () => {
    type Api = { Module: new (bytes: Uint8Array) => object; Memory: unknown; Instance: unknown; CompileError: unknown };
    const wasm = (globalThis as unknown as { WebAssembly: Api }).WebAssembly;
    let built = 0;
    const Module = new Proxy(wasm.Module, {
      construct(target, [bytes]: [Uint8Array]) {
        built++;
        return new target(bytes);
      },
    });
    vi.stubGlobal("WebAssembly", { Module, Memory: wasm.Memory, Instance: wasm.Instance, CompileError: wasm.CompileError });
    vi.resetModules();
    try {
      const fresh = await import("../../src/quants/index.js");
      const blocks = new Uint8Array(2 * 144);
      fresh.dequantizeRows(GgmlType.F16, new Uint8Array(8), new Float32Array(4));
      fresh.dequantizeRows(GgmlType.Q4_0, new Uint8Array(18), new Float32Array(32));
      expect(built).toBe(0);
      fresh.dequantizeRows(GgmlType.Q4_K, blocks, new Float32Array(512));
      fresh.dequantizeRows(GgmlType.Q6_K, new Uint8Array(210), new Float32Array(256));
      expect(built).toBe(1);
      const values = new Float32Array(256).map((_, i) => Math.cos(i));
      fresh.quantizeRows(GgmlType.Q4_K, values, blocks.subarray(0, 144));
      expect(built).toBeGreaterThan(1);
    } finally {
      vi.unstubAllGlobals();
      vi.resetModules();
    }
  });
});

describe("Q8_0 quantization in WebAssembly SIMD", () => {
  // Four blocks at a time, one at a time where a group holds a NaN or an infinity or where fewer than
  // four are left; the interop tests check both kernels against ggml's C.
  it.each([4099, 4100, 8195])("gives the JavaScript kernel's bytes on %i edge blocks", (count) => {
    const values = q8EdgeBlocks(new Random(0x9a8, count), count);
    const simd = new Uint8Array(count * 34);
    const loops = new Uint8Array(count * 34);
    expect(quantizeQ8_0Simd(values, simd, count, quantizeQ8_0)).toBe(true);
    quantizeQ8_0(values, loops, count);
    const differing: number[] = [];
    for (let b = 0; b < count && differing.length < 8; b++) {
      if (!Buffer.from(simd.subarray(b * 34, b * 34 + 34)).equals(Buffer.from(loops.subarray(b * 34, b * 34 + 34)))) differing.push(b);
    }
    expect(differing).toEqual([]);
  });
});
