/**
 * The block-type kernels against golden files: dequantization against gguf-py's `dequantize` (random
 * blocks with NaN, infinite, subnormal and zero scales, and blocks that run through every IQ grid row),
 * quantization against ggml's `ggml_quantize_chunk` (fixtures/gen_quants.py made both).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { canDequantize, canQuantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } from "../../src/quants/index.js";

const FIXTURES = fileURLToPath(new URL("./fixtures", import.meta.url));

interface Manifest {
  dequantize: Record<string, { blocks: number; ggmlDiffers: number; sweepBlocks?: number; sweepSha256?: string }>;
  quantize: Record<string, { rows: number; perRow: number }>;
}

const manifest = JSON.parse(readFileSync(join(FIXTURES, "manifest.json"), "utf8")) as Manifest;

function bytes(...parts: string[]): Uint8Array {
  const b = readFileSync(join(FIXTURES, ...parts));
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

function typeId(name: string): number {
  const id = (GgmlType as Record<string, number>)[name];
  if (id === undefined) throw new Error(`no ggml type ${name}`);
  return id;
}

/** Indexes where two F32 arrays differ in their bits, NaNs judged as NaNs. */
function bitDifferences(ours: Float32Array, expected: Float32Array): string[] {
  const a = new Uint32Array(ours.buffer, ours.byteOffset, ours.length);
  const b = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  const out: string[] = [];
  for (let i = 0; i < a.length && out.length < 8; i++) {
    if (a[i] === b[i] || (Number.isNaN(ours[i]) && Number.isNaN(expected[i]))) continue;
    out.push(`[${i}] ${ours[i]} (0x${a[i]!.toString(16)}) vs ${expected[i]} (0x${b[i]!.toString(16)})`);
  }
  return out;
}

function dequantize(type: number, blocks: Uint8Array): Float32Array {
  const info = ggmlTypeInfo(type)!;
  const out = new Float32Array((blocks.length / info.typeSize) * info.blockSize);
  dequantizeRows(type, blocks, out);
  return out;
}

describe("dequantization equals gguf-py's bit for bit", () => {
  for (const [name, entry] of Object.entries(manifest.dequantize)) {
    it.skipIf(!canDequantize(typeId(name)))(`${name}: ${entry.blocks} blocks with special and random scales`, () => {
      // the fixture is only a reference if ggml's C agreed with gguf-py on it when it was made
      expect(entry.ggmlDiffers).toBe(0);
      const blocks = bytes("dequantize", `${name}.blocks`);
      const f32 = bytes("dequantize", `${name}.f32`);
      const expected = new Float32Array(f32.buffer.slice(f32.byteOffset, f32.byteOffset + f32.byteLength));
      expect(bitDifferences(dequantize(typeId(name), blocks), expected)).toEqual([]);
    });
    if (entry.sweepSha256 !== undefined) {
      it.skipIf(!canDequantize(typeId(name)))(`${name}: every grid row (${entry.sweepBlocks} blocks)`, () => {
        const out = dequantize(typeId(name), bytes("dequantize", `${name}.sweep`));
        expect(createHash("sha256").update(new Uint8Array(out.buffer)).digest("hex")).toBe(entry.sweepSha256);
      });
    }
  }
});

describe("quantization equals ggml's ggml_quantize_chunk byte for byte", () => {
  const rows = bytes("quantize", "rows.f32");
  const values = new Float32Array(rows.buffer.slice(rows.byteOffset, rows.byteOffset + rows.byteLength));
  for (const [name, entry] of Object.entries(manifest.quantize)) {
    const type = typeId(name);
    it.skipIf(!canQuantize(type))(`${name}: ${entry.rows} rows (zeros, outliers, subnormals, ties, huge and tiny values)`, () => {
      const expected = bytes("quantize", `${name}.blocks`);
      const ours = new Uint8Array(expected.length);
      quantizeRows(type, values, ours);
      const rowBytes = expected.length / entry.rows;
      const differing: number[] = [];
      for (let r = 0; r < entry.rows; r++) {
        const a = ours.subarray(r * rowBytes, (r + 1) * rowBytes);
        const b = expected.subarray(r * rowBytes, (r + 1) * rowBytes);
        if (!a.every((v, i) => v === b[i])) differing.push(r);
      }
      expect(differing).toEqual([]);
    });
  }
});
