#!/usr/bin/env node
// The ggml block-type kernels of @st-convert/gguf against ggml's C on one thread: CPU time to quantize
// and to dequantize the same values, and whether the bytes are the same. Run alone it prints the best
// of a few runs (4 MiB of F32 by default); `pnpm bench` (bench/run.mjs) runs `compareKernels` for its
// "block-type kernels against ggml's C" rows (medians, 16 MiB).
//
//   node bench/gguf-quants.mjs [MiB] [TYPE...]      (after `pnpm build`; ggml's C from ST_CONVERT_GGML_LIB or .ggml-oracle/)
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { canQuantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } = await import(join(root, "packages/gguf/dist/quants/index.js"));

/** ggml's libggml-base (scripts/ggml-oracle.sh builds it), driven through fixtures/reference_ggml.py. */
export const ggmlLibrary = process.env.ST_CONVERT_GGML_LIB || join(root, ".ggml-oracle/build/src/libggml-base.so");
const driver = join(root, "fixtures/reference_ggml.py");
/** Values per row given to ggml_quantize_chunk (one K-quant block). */
const ROW = 256;

/** Whether ggml's C library is there. */
export const hasGgml = () => existsSync(ggmlLibrary);

/** ggml's version and commit as the library reports them ("0.21.0 f8c7454"), or undefined. */
export function ggmlVersion() {
  const run = spawnSync("python3", [driver, ggmlLibrary, "version"], { encoding: "utf8" });
  return run.status === 0 ? run.stdout.trim() : undefined;
}

/** `mib` MiB of F32 values, whole rows of 256: uniform around 0, the scale 1 to 7 in turn from one 256 values to the next. */
export function testValues(mib) {
  const count = (mib * 1024 * 1024) / 4;
  const values = new Float32Array(count - (count % ROW));
  let seed = 12345;
  for (let i = 0; i < values.length; i++) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    const u = seed / 2 ** 32;
    values[i] = (u - 0.5) * (1 + ((i >> 8) % 7));
  }
  return values;
}

/** CPU ms (user + system) of one run of `run`. */
function cpuMs(run) {
  const start = process.cpuUsage();
  run();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

/** Runs fixtures/reference_ggml.py `command` on `input`; its stdout, or an Error. */
function ggml(args, input) {
  const run = spawnSync("python3", [driver, ggmlLibrary, ...args], { input, maxBuffer: 1 << 30 });
  if (run.status !== 0) throw new Error(`reference_ggml.py ${args.join(" ")} failed (${run.status}): ${run.stderr.toString().trim()}`);
  return run.stdout;
}

const sameBytes = (a, b) => Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;

/**
 * Type `name`'s kernels, ours (on this thread) and ggml's C (`ggml_quantize_chunk` without an
 * importance matrix, and the type's `to_float`, in a python3 process, one thread), on `values`:
 * CPU ms of each of `reps` runs, and whether ggml's blocks are ours byte for byte (`sameBlocks`) and
 * ours dequantize ggml's blocks to ggml's F32 bit for bit (`sameValues`). Without ggml's library,
 * only our times. Quantization is timed only where `canQuantize`.
 */
export function compareKernels(name, values, reps) {
  const type = GgmlType[name];
  if (type === undefined) throw new Error(`no ggml type ${name}`);
  const info = ggmlTypeInfo(type);
  const blocks = new Uint8Array((values.length / info.blockSize) * info.typeSize);
  const out = new Float32Array(values.length);
  const result = { name, values: values.length, reps };
  const quantize = canQuantize(type) ? () => quantizeRows(type, values, blocks) : undefined;
  const dequantize = () => dequantizeRows(type, blocks, out);
  // Two untimed runs each first: the JIT's.
  for (let r = 0; r < 2; r++) {
    quantize?.();
    dequantize();
  }
  result.ours = { quantize: quantize && [], dequantize: [] };
  const input = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const withC = hasGgml();
  if (withC) result.ggml = { quantize: [], dequantize: [] };
  // Interleaved, one run of each side at a time, so that the machine's drift (this one's speed
  // moves by a fifth within minutes) falls on both alike; ggml's run in a process of its own, its
  // CPU time taken inside it, after an untimed first run.
  if (withC) ggml(["time", String(type), String(ROW), "1"], input);
  for (let r = 0; r < reps; r++) {
    if (quantize) result.ours.quantize.push(cpuMs(quantize));
    // A dequantization takes a few ms: timed right after an untimed one, as ggml's runs right
    // after its quantization, not on a processor just woken from waiting for ggml's process.
    dequantize();
    result.ours.dequantize.push(cpuMs(dequantize));
    if (!withC) continue;
    const t = JSON.parse(ggml(["time", String(type), String(ROW), "1"], input).toString());
    result.ggml.quantize.push(t.quantizeRuns[0] * 1000);
    result.ggml.dequantize.push(t.dequantizeRuns[0] * 1000);
  }
  if (!withC) return result;
  const theirs = new Uint8Array(ggml(["quantize", String(type), String(ROW)], input));
  if (canQuantize(type)) result.sameBlocks = sameBytes(blocks, theirs);
  // Both dequantize ggml's blocks.
  dequantizeRows(type, theirs, out);
  result.sameValues = sameBytes(out, new Uint8Array(ggml(["dequantize", String(type)], theirs)));
  return result;
}

// Run alone: the best of a few runs of each type.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const mib = Number(process.argv[2] ?? 4);
  const names = process.argv.length > 3 ? process.argv.slice(3) : ["Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q2_K"];
  const REPS = 5;
  const values = testValues(mib);
  const best = (xs) => Math.min(...xs);
  console.log(
    `${values.length} values (${mib} MiB of F32), best of ${REPS}, CPU ms; ggml's C ${hasGgml() ? `from ${ggmlLibrary}` : "not found (run scripts/ggml-oracle.sh)"}`,
  );
  for (const name of names) {
    const r = compareKernels(name, values, REPS);
    const q = r.ours.quantize ? best(r.ours.quantize) : Number.NaN;
    const d = best(r.ours.dequantize);
    let c = "";
    if (r.ggml) {
      const [cq, cd] = [best(r.ggml.quantize), best(r.ggml.dequantize)];
      c = `   ggml C: quantize ${cq.toFixed(1)}, dequantize ${cd.toFixed(1)}   ratio ${(q / cq).toFixed(2)}x, ${(d / cd).toFixed(2)}x   same bytes: blocks ${r.sameBlocks ?? "n/a"}, F32 ${r.sameValues}`;
    }
    console.log(`${name.padEnd(6)} quantize ${q.toFixed(1).padStart(8)}  dequantize ${d.toFixed(1).padStart(6)}${c}`);
  }
}
