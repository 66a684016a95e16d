/**
 * The block kernels against gguf-py itself on fresh random data (the reference Python with gguf;
 * skipped with a note without one, required by `.ci/run`): every type gguf-py dequantizes, and the
 * eight it quantizes, on finite values (on NaN, gguf-py's quantize and ggml's C differ; we follow ggml).
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describeInterop, Random } from "@st-convert/testing";
import { expect, it } from "vitest";
import { canDequantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } from "../../src/quants/index.js";

const SCRIPT = fileURLToPath(new URL("./fixtures/gguf_py_quants.py", import.meta.url));
const ids = GgmlType as Record<string, number>;

function ggufPy(python: string, args: string[], input: Uint8Array): Uint8Array {
  const run = spawnSync(python, [SCRIPT, ...args], { input, maxBuffer: 256 * 1024 * 1024 });
  if (run.status !== 0) throw new Error(`gguf_py_quants.py ${args.join(" ")} failed (${run.status}):\n${run.stderr}`);
  return new Uint8Array(run.stdout.buffer, run.stdout.byteOffset, run.stdout.byteLength);
}

/** Random blocks whose f16 scales are mostly finite: the first two bytes of a block, or where the type keeps them. */
function randomBlocks(random: Random, name: string, count: number): Uint8Array {
  const info = ggmlTypeInfo(ids[name]!)!;
  const out = random.bytes(count * info.typeSize);
  const at = { Q2_K: 80, Q3_K: 108, Q6_K: 208, TQ1_0: 52, TQ2_0: 64, IQ1_M: -1, MXFP4: -1, NVFP4: -1 }[name] ?? 0;
  for (let b = 0; at >= 0 && b < count; b++) {
    if (random.int(16) === 0) continue; // some keep random bits: NaN, infinite, subnormal scales
    out[b * info.typeSize + at + 1] = (random.int(2) << 7) | (random.range(1, 24) << 2) | random.int(4);
  }
  return out;
}

describeInterop("block types against gguf-py", (python) => {
  const dequantized = Object.keys(GgmlType).filter((name) => canDequantize(ids[name]!) && ggmlTypeInfo(ids[name]!)!.blockSize > 1);
  it.each(dequantized)("%s: 300 random blocks dequantize to gguf-py's bits", (name) => {
    const type = ids[name]!;
    const info = ggmlTypeInfo(type)!;
    const blocks = randomBlocks(new Random(0x9999, type), name, 300);
    const ours = new Float32Array(300 * info.blockSize);
    dequantizeRows(type, blocks, ours);
    const bytes = ggufPy(python, ["dequantize", name], blocks);
    const expected = new Float32Array(bytes.slice().buffer);
    const a = new Uint32Array(ours.buffer);
    const b = new Uint32Array(expected.buffer);
    const wrong: number[] = [];
    for (let i = 0; i < a.length && wrong.length < 5; i++) {
      if (a[i] !== b[i] && !(Number.isNaN(ours[i]) && Number.isNaN(expected[i]))) wrong.push(i);
    }
    expect(wrong).toEqual([]);
  });

  it.each(["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4"])("%s: 128 random rows quantize to gguf-py's bytes", (name) => {
    const type = ids[name]!;
    const info = ggmlTypeInfo(type)!;
    const random = new Random(0x5151, type);
    const rows = new Float32Array(128 * 256);
    for (let r = 0; r < 128; r++) {
      const scale = 10 ** random.range(-8, 6);
      for (let i = 0; i < 256; i++) rows[r * 256 + i] = ((random.uint32() / 2 ** 32) * 2 - 1) * scale * (random.chance(0.02) ? 50 : 1);
    }
    const ours = new Uint8Array((rows.length / info.blockSize) * info.typeSize);
    quantizeRows(type, rows, ours);
    const expected = ggufPy(python, ["quantize", name, "256"], new Uint8Array(rows.buffer));
    expect(Buffer.from(ours).equals(Buffer.from(expected))).toBe(true);
  });
});
