/**
 * ggml's block types: geometry, dequantization to F32 bit for bit as gguf-py's `gguf.quants.dequantize`,
 * and quantization byte for byte as ggml's `ggml_quantize_chunk` without an importance matrix.
 * Plain JavaScript over typed arrays; nothing here allocates per block.
 */
import { GgmlType, type GgmlTypeInfo, canDequantize, ggmlTypeInfo } from "./ggmlTypes.js";
import { dequantizeQ2_K, dequantizeQ3_K, dequantizeQ4_K, dequantizeQ5_K, dequantizeQ6_K } from "./kQuants.js";
import { quantizeQ2_K, quantizeQ3_K, quantizeQ4_K, quantizeQ5_K, quantizeQ6_K } from "./kQuantize.js";
import {
  dequantizeQ4_0,
  dequantizeQ4_1,
  dequantizeQ5_0,
  dequantizeQ5_1,
  dequantizeQ8_0,
  quantizeQ4_0,
  quantizeQ4_1,
  quantizeQ5_0,
  quantizeQ5_1,
  quantizeQ8_0,
} from "./legacy.js";
import {
  dequantizeIQ1_M,
  dequantizeIQ1_S,
  dequantizeIQ2_S,
  dequantizeIQ2_XS,
  dequantizeIQ2_XXS,
  dequantizeIQ3_S,
  dequantizeIQ3_XXS,
  dequantizeIQ4_NL,
  dequantizeIQ4_XS,
} from "./iQuants.js";
import { dequantizeBF16, dequantizeF16, dequantizeF32 } from "./plain.js";
import { dequantizeSimd } from "./simdDequant.js";
import { hasQ8_0Simd, quantizeQ8_0Simd } from "./simdQ8_0.js";
import { dequantizeMXFP4, dequantizeNVFP4, dequantizeTQ1_0, dequantizeTQ2_0, quantizeMXFP4, quantizeTQ1_0, quantizeTQ2_0 } from "./smallFloats.js";

export { GgmlType, type GgmlTypeInfo, canDequantize, ggmlTypeInfo };
export { Q8_0_SLOT_BYTES, giveBackQ8_0Slot, takeQ8_0Slot } from "./simdQ8_0.js";

type Dequantizer = (src: Uint8Array, dst: Float32Array, blocks: number) => void;
type Quantizer = (src: Float32Array, dst: Uint8Array, blocks: number) => void;

/** A type's dequantization by the WebAssembly SIMD kernel where it runs, else by the JavaScript loops (the same bits). */
function fastest(type: number, scalar: Dequantizer): Dequantizer {
  return (src, dst, blocks) => {
    if (!dequantizeSimd(type, src, dst, blocks)) scalar(src, dst, blocks);
  };
}

const DEQUANTIZE = new Map<number, Dequantizer>([
  [GgmlType.F32, dequantizeF32],
  [GgmlType.F16, dequantizeF16],
  [GgmlType.BF16, dequantizeBF16],
  [GgmlType.Q4_0, dequantizeQ4_0],
  [GgmlType.Q4_1, dequantizeQ4_1],
  [GgmlType.Q5_0, dequantizeQ5_0],
  [GgmlType.Q5_1, dequantizeQ5_1],
  [GgmlType.Q8_0, fastest(GgmlType.Q8_0, dequantizeQ8_0)],
  [GgmlType.Q2_K, dequantizeQ2_K],
  [GgmlType.Q3_K, dequantizeQ3_K],
  [GgmlType.Q4_K, fastest(GgmlType.Q4_K, dequantizeQ4_K)],
  [GgmlType.Q5_K, dequantizeQ5_K],
  [GgmlType.Q6_K, fastest(GgmlType.Q6_K, dequantizeQ6_K)],
  [GgmlType.IQ2_XXS, dequantizeIQ2_XXS],
  [GgmlType.IQ2_XS, dequantizeIQ2_XS],
  [GgmlType.IQ2_S, dequantizeIQ2_S],
  [GgmlType.IQ3_XXS, dequantizeIQ3_XXS],
  [GgmlType.IQ3_S, dequantizeIQ3_S],
  [GgmlType.IQ1_S, dequantizeIQ1_S],
  [GgmlType.IQ1_M, dequantizeIQ1_M],
  [GgmlType.IQ4_NL, dequantizeIQ4_NL],
  [GgmlType.IQ4_XS, dequantizeIQ4_XS],
  [GgmlType.TQ1_0, dequantizeTQ1_0],
  [GgmlType.TQ2_0, dequantizeTQ2_0],
  [GgmlType.MXFP4, dequantizeMXFP4],
  [GgmlType.NVFP4, dequantizeNVFP4],
]);

/** Q8_0 by the WebAssembly SIMD kernel where it runs, else by the JavaScript one (the same bytes). */
function quantizeQ8_0Fastest(src: Float32Array, dst: Uint8Array, blocks: number): void {
  if (!quantizeQ8_0Simd(src, dst, blocks, quantizeQ8_0)) quantizeQ8_0(src, dst, blocks);
}

const QUANTIZE = new Map<number, Quantizer>([
  [GgmlType.Q4_0, quantizeQ4_0],
  [GgmlType.Q4_1, quantizeQ4_1],
  [GgmlType.Q5_0, quantizeQ5_0],
  [GgmlType.Q5_1, quantizeQ5_1],
  [GgmlType.Q8_0, quantizeQ8_0Fastest],
  [GgmlType.Q2_K, quantizeQ2_K],
  [GgmlType.Q3_K, quantizeQ3_K],
  [GgmlType.Q4_K, quantizeQ4_K],
  [GgmlType.Q5_K, quantizeQ5_K],
  [GgmlType.Q6_K, quantizeQ6_K],
  [GgmlType.TQ1_0, quantizeTQ1_0],
  [GgmlType.TQ2_0, quantizeTQ2_0],
  [GgmlType.MXFP4, quantizeMXFP4],
]);

function geometry(type: number): GgmlTypeInfo {
  const info = ggmlTypeInfo(type);
  if (info === undefined) throw new RangeError(`unknown ggml type ${type}`);
  return info;
}

/**
 * Dequantizes whole blocks of type `type` to F32: `dst` receives `src.length / typeSize · blockSize`
 * values, the bits gguf-py's `dequantize` gives (NaNs stay NaNs; their payloads are not promised).
 * @throws RangeError for a type it cannot convert, or when `src` is not whole blocks or `dst` is not their size.
 */
export function dequantizeRows(type: number, src: Uint8Array, dst: Float32Array): void {
  const info = geometry(type);
  const kernel = canDequantize(type) ? DEQUANTIZE.get(type) : undefined;
  if (kernel === undefined) throw new RangeError(`cannot dequantize ggml type ${info.name}`);
  const blocks = src.length / info.typeSize;
  if (!Number.isInteger(blocks)) throw new RangeError(`${src.length} bytes are not whole ${info.name} blocks of ${info.typeSize} bytes`);
  if (dst.length !== blocks * info.blockSize) throw new RangeError(`${blocks} ${info.name} blocks make ${blocks * info.blockSize} values, not ${dst.length}`);
  kernel(src, dst, blocks);
}

/**
 * Whether quantizing to `type` here keeps up with reading its values from a file, so that other
 * threads would cost more (their start-up, a message per batch, more buffers) than they save: Q8_0
 * in WebAssembly SIMD, about 0.25 s of CPU per GiB of F32. Measured (1 GiB F32 → Q8_0, 2 cores,
 * 2026-12-06): 0.62 s on the calling thread against 0.88 s with two worker threads.
 */
export function quantizesAtReadSpeed(type: number): boolean {
  return type === GgmlType.Q8_0 && hasQ8_0Simd();
}

/** Whether `quantizeRows` makes type `type`. */
export function canQuantize(type: number): boolean {
  return QUANTIZE.has(type);
}

/**
 * Quantizes F32 values to whole blocks of type `type`, the bytes ggml's `ggml_quantize_chunk` makes
 * without an importance matrix (blocks never span rows, so any number of whole rows works at once).
 * @throws RangeError for a type it cannot make, or when `src` is not whole blocks or `dst` is not their size.
 */
export function quantizeRows(type: number, src: Float32Array, dst: Uint8Array): void {
  const info = geometry(type);
  const kernel = QUANTIZE.get(type);
  if (kernel === undefined) throw new RangeError(`cannot quantize to ggml type ${info.name}`);
  const blocks = src.length / info.blockSize;
  if (!Number.isInteger(blocks)) throw new RangeError(`${src.length} values are not whole ${info.name} blocks of ${info.blockSize}`);
  if (dst.length !== blocks * info.typeSize) throw new RangeError(`${blocks} ${info.name} blocks take ${blocks * info.typeSize} bytes, not ${dst.length}`);
  kernel(src, dst, blocks);
}
