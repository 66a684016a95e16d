#!/usr/bin/env node
// The ggml block-type kernels of @st-convert/gguf against ggml's C on one thread: CPU time to quantize
// and to dequantize the same values, best of a few runs. Small by default (4 MiB of F32); not part of
// `pnpm bench`, which measures whole conversions.
//
//   node bench/gguf-quants.mjs [MiB] [TYPE...]      (after `pnpm build`; ggml's C from ST_CONVERT_GGML_LIB or .ggml-oracle/)
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { canQuantize, dequantizeRows, GgmlType, ggmlTypeInfo, quantizeRows } = await import(join(root, "packages/gguf/dist/quants/index.js"));

const mib = Number(process.argv[2] ?? 4);
const names = process.argv.length > 3 ? process.argv.slice(3) : ["Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q2_K"];
const library = process.env.ST_CONVERT_GGML_LIB || join(root, ".ggml-oracle/build/src/libggml-base.so");
const hasC = existsSync(library);
const REPS = 5;

// Gaussian-like values with varying scales, as weights look
const values = new Float32Array((mib * 1024 * 1024) / 4 - (((mib * 1024 * 1024) / 4) % 256));
let seed = 12345;
for (let i = 0; i < values.length; i++) {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  const u = seed / 2 ** 32;
  values[i] = (u - 0.5) * (1 + ((i >> 8) % 7));
}

function cpuMs(run) {
  run(); // warm-up: the first runs are the JIT's
  run();
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < REPS; r++) {
    const start = process.cpuUsage();
    run();
    const used = process.cpuUsage(start);
    best = Math.min(best, (used.user + used.system) / 1000);
  }
  return best;
}

console.log(
  `${values.length} values (${mib} MiB of F32), best of ${REPS}, CPU ms; ggml's C ${hasC ? `from ${library}` : "not found (run scripts/ggml-oracle.sh)"}`,
);
for (const name of names) {
  const type = GgmlType[name];
  const info = ggmlTypeInfo(type);
  const blocks = new Uint8Array((values.length / info.blockSize) * info.typeSize);
  const out = new Float32Array(values.length);
  const q = canQuantize(type) ? cpuMs(() => quantizeRows(type, values, blocks)) : Number.NaN;
  const d = cpuMs(() => dequantizeRows(type, blocks, out));
  let c = "";
  if (hasC) {
    const run = spawnSync("python3", [join(root, "fixtures/reference_ggml.py"), library, "time", String(type), "256", String(REPS)], {
      input: new Uint8Array(values.buffer),
      maxBuffer: 1 << 20,
    });
    if (run.status === 0) {
      const t = JSON.parse(run.stdout.toString());
      c = `   ggml C: quantize ${(t.quantize * 1000).toFixed(1)}, dequantize ${(t.dequantize * 1000).toFixed(1)}   ratio ${(q / (t.quantize * 1000)).toFixed(2)}x, ${(d / (t.dequantize * 1000)).toFixed(2)}x`;
    }
  }
  console.log(`${name.padEnd(6)} quantize ${q.toFixed(1).padStart(8)}  dequantize ${d.toFixed(1).padStart(6)}${c}`);
}
