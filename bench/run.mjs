// `pnpm bench`: times st-convert's conversion paths against `cp` of the same file and against the
// Python reference pipeline, in the same run, interleaved, and writes docs/benchmarks.md.
//
// The options: USAGE below (`pnpm bench --help` prints it); what each does:
//
// `--big-only` runs only the big-input section (`--big SIZE`), for the rows `--only` picks.
// Figures are kept in bench/results.json, row by row: a run replaces the rows it measured and
// the page is rendered from all of them, so `--only` refreshes part of the page.
//
// `--only TEXT` runs the rows whose names contain TEXT (several: `--only "PyTorch|cast"`).
// `--only many` runs only the many-small-tensors section (50,000 and 500,000 F32[2] tensors, or
// the counts `--many` gives, in every format, each direction and `info`; the npy-folder rows,
// one file per tensor, at the counts `--many-folders` gives, by default the same).
// `--many-rows TEXT` runs only the rows of that section whose names contain TEXT (`info json`).
// `--only kernels` runs only the block-type kernels against ggml's C (bench/gguf-quants.mjs), one row
// per type, named "block-type kernels against ggml's C: Q4_K"; skipped without ggml's library.
//
// Inputs are made by the reference tools (bench/reference.py) in bench-out/ (gitignored) and
// removed at the end. Each contestant runs once untimed before the timed, interleaved runs.
// Figures are medians; peak RSS comes from /usr/bin/time. The page cache is warm (inputs were
// just written); `sync` runs before every timed run, and nothing is fsynced inside one, for every
// contestant alike. Before every run in the fresh state the bench writes and deletes a scratch file
// (`prime`), so that every contestant writes into memory the VM's host backs; `--no-prime` leaves that out.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { nativeAbsence, nativeIo } from "../packages/native/dist/index.js";
import { measure as measureCommand } from "../scripts/measure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const USAGE = `usage: pnpm bench [--size 1GiB] [--runs 5] [--only SUBSTRING] [--big 8GiB] [--many 50000,500000]
                  [--many-folders N,…] [--many-rows SUBSTRING] [--big-only] [--state fresh,aged] [--no-prime]
                  [--out docs/benchmarks.md] [--results bench/results.json] [--dir bench-out]
(what each option does: the comment at the top of bench/run.mjs)`;
const { values } = parseBenchArgs({
  options: {
    size: { type: "string", default: "1GiB" },
    runs: { type: "string", default: "5" },
    only: { type: "string" },
    big: { type: "string" },
    out: { type: "string", default: "docs/benchmarks.md" },
    results: { type: "string", default: "bench/results.json" },
    state: { type: "string", default: "fresh,aged" },
    dir: { type: "string", default: "bench-out" },
    many: { type: "string", default: "50000,500000" },
    "many-folders": { type: "string" },
    "many-rows": { type: "string" },
    "big-only": { type: "boolean", default: false },
    "no-prime": { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

/** `parseArgs`, with a usage error (exit 2, one line and the usage) instead of a stack trace. */
function parseBenchArgs(config) {
  try {
    return parseArgs(config);
  } catch (error) {
    console.error(`bench: ${error.message}\n${USAGE}`);
    process.exit(2);
  }
}

const size = parseSize(values.size);
/** Whether the CLI runs with the native module here (it loads the same build). */
const native = nativeIo();
const runs = Number(values.runs);
const work = resolve(root, values.dir);
const cli = join(root, "packages", "cli", "dist", "st-convert.cjs");
const python = process.env.ST_CONVERT_REF_PYTHON ?? (existsSync(join(root, ".venv-ref/bin/python")) ? join(root, ".venv-ref/bin/python") : undefined);
const resultsFile = resolve(root, values.results);
/**
 * Every contestant runs without `NODE_EXTRA_CA_CERTS`, as on a user's machine: this project's
 * machines set it, and every Node process then parses the certificate file before its first line
 * (`node -e 0` 115 ms with it against 36 ms without, means of 21 runs, 2026-12-06). No contestant
 * speaks TLS; cp and Python do not read it.
 */
const extraCaCerts = process.env.NODE_EXTRA_CA_CERTS;
delete process.env.NODE_EXTRA_CA_CERTS;
/**
 * The processor a row was measured on, kept with its figures: machines of this project's kind
 * are not always the same processor, and `cp` of 1 GiB took 0.16 s on one and 0.4 s on another.
 */
const machine = cpus()[0]?.model ?? "unknown CPU";
const formats = spawnSync(process.execPath, [cli, "--help"], { encoding: "utf8" }).stdout;

function parseSize(text) {
  const m = /^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB)?$/i.exec(text);
  if (!m) throw new Error(`--size ${text}: expected e.g. 512MiB or 1GiB`);
  const unit = { b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 }[(m[2] ?? "B").toLowerCase()];
  return Math.round(Number(m[1]) * unit);
}

/** Whether `--only` (TEXT, or several joined by |) picks the row called `name`. */
const chosen = (name) => values.only === undefined || values.only.split("|").some((part) => name.includes(part));
const hasFormat = (name) => new RegExp(`^\\s+${name}\\s`, "m").test(formats);

/**
 * The paths. `kind` is the input bench/reference.py makes; `baselines` run with the same input;
 * `reference` names the Python pipeline whose safetensors output must equal ours byte for byte;
 * `target` is the issue's goal as [baseline label, largest ratio ours/baseline], or a list of such
 * goals; `peakMB`, a goal for st-convert's peak RSS in MB (10^6 bytes). `compare: "tensors"`: the
 * outputs are compared tensor by tensor (names, dtypes, shapes, bytes) by the reference tools, where
 * the reference cannot write our metadata. `bytes`: the input's size, or a function of `--size`.
 * `env`: variables st-convert runs with in this row (its baselines run without them).
 */
const cases = [
  {
    name: "safetensors → safetensors",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.safetensors",
    format: "safetensors",
    baselines: ["cp", "py:st2st"],
    reference: "st2st",
    target: ["cp", 1.3],
  },
  {
    name: "npy → safetensors",
    kind: "npy",
    input: "x.npy",
    output: "out.safetensors",
    format: "npy",
    baselines: ["cp", "py:npy2st"],
    reference: "npy2st",
    target: ["cp", 1.3],
  },
  {
    name: "npz (stored) → safetensors",
    kind: "npz",
    input: "model.npz",
    output: "out.safetensors",
    format: "npz",
    baselines: ["cp", "py:npz2st"],
    reference: "npz2st",
    target: ["cp", 1.3],
  },
  {
    name: "npz (deflated) → safetensors",
    kind: "npz-compressed",
    input: "model.npz",
    output: "out.safetensors",
    format: "npz",
    baselines: ["py:npz-load", "py:npz2st"],
    reference: "npz2st",
    target: ["py:npz-load", 1],
  },
  {
    name: "npz (deflated, Fortran order) → safetensors",
    kind: "npz-compressed-fortran",
    input: "model.npz",
    output: "out.safetensors",
    format: "npz",
    baselines: ["py:npz-contiguous", "py:npz-fortran2st"],
    reference: "npz-fortran2st",
    target: ["py:npz-contiguous", 2],
  },
  {
    name: "npy Fortran order → safetensors",
    kind: "npy-fortran",
    input: "x.npy",
    output: "out.safetensors",
    format: "npy",
    baselines: ["py:fortran-contiguous", "py:fortran2st"],
    reference: "fortran2st",
    target: ["py:fortran-contiguous", 2],
  },
  {
    name: "flax msgpack → safetensors",
    kind: "flax",
    input: "flax_model.msgpack",
    output: "out.safetensors",
    format: "flax",
    baselines: ["cp", "py:flax2st"],
    reference: "flax2st",
    target: ["cp", 1.3],
  },
  {
    name: "PyTorch .bin → safetensors",
    kind: "torch",
    input: "pytorch_model.bin",
    output: "out.safetensors",
    format: "torch",
    baselines: ["cp", "py:torch2st"],
    reference: "torch2st",
    target: ["cp", 1.3],
  },
  {
    name: "safetensors → npy (one tensor)",
    kind: "safetensors",
    count: 1,
    tag: "-one",
    input: "model.safetensors",
    output: "out.npy",
    format: "npy",
    baselines: ["cp", "py:st2npy"],
    reference: "st2npy",
    target: ["cp", 1.3],
  },
  {
    name: "safetensors → npz (stored)",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.npz",
    format: "npz",
    baselines: ["cp", "py:st2npz"],
    reference: "st2npz",
    target: ["cp", 1.3],
  },
  {
    name: "safetensors → npz (deflated)",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.npz",
    args: ["--compress"],
    format: "npz",
    baselines: ["py:st2npz-deflated"],
    target: ["py:st2npz-deflated", 1],
  },
  {
    name: "safetensors → flax msgpack",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.msgpack",
    format: "flax",
    baselines: ["cp", "py:st2flax"],
    reference: "st2flax",
    target: ["cp", 1.3],
  },
  {
    name: "safetensors → PyTorch .bin",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.bin",
    format: "torch",
    baselines: ["cp", "py:st2torch"],
    target: ["cp", 1.3],
  },
  {
    name: "cast F32 → BF16 (safetensors)",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.safetensors",
    args: ["--cast", "F32=BF16", "--no-record"],
    format: "safetensors",
    baselines: ["cp", "py:cast-bf16"],
    reference: "cast-bf16",
    target: ["cp", 2],
  },
  {
    name: "merge: 1 GiB of shards → one safetensors file",
    kind: "st-sharded",
    shardBytes: (bytes) => Math.floor(bytes * 0.28), // 300 MB at 1 GiB: four shards
    input: "shards/model.safetensors.index.json",
    output: "out.safetensors",
    format: "safetensors",
    baselines: ["cp", "py:merge"],
    reference: "merge",
    target: ["cp", 1.3],
    big: false,
  },
  {
    name: "reshard: 4 GiB of 2 GB shards → 1 GB shards",
    kind: "st-sharded",
    tag: "-4g",
    bytes: 4 * 1024 ** 3,
    shardBytes: 2_000_000_000,
    input: "shards/model.safetensors.index.json",
    output: "out",
    args: ["--max-shard-size", "1GB"],
    format: "safetensors",
    baselines: ["cp", "py:reshard"],
    target: ["cp", 1.3],
    big: false,
  },
  {
    name: "GGUF F16 → safetensors",
    kind: "gguf-f16",
    input: "model.gguf",
    output: "out.safetensors",
    format: "gguf",
    baselines: ["cp", "py:gguf2st"],
    // The output's metadata holds the GGUF's keys (gguf.KEY entries), which save_file does not
    // write: the tensors are compared, not the files.
    reference: "gguf2st",
    compare: "tensors",
    target: ["cp", 1.3],
    big: false,
  },
  {
    // The input: random Q4_K blocks with finite f16 scales, written by GGUFWriter (bench/reference.py
    // gen_gguf_q4_k; gguf.quants.quantize cannot make Q4_K). 256 MiB of blocks at --size 1GiB.
    name: "GGUF Q4_K → F32 safetensors",
    kind: "gguf-q4_k",
    bytes: (size) => Math.floor(size / 4),
    input: "model.gguf",
    output: "out.safetensors",
    format: "gguf",
    baselines: ["py:gguf-dequant2st"],
    reference: "gguf-dequant2st",
    compare: "tensors",
    target: ["py:gguf-dequant2st", 0.2],
    peakMB: 200,
    big: false,
  },
  {
    name: "F32 → GGUF Q8_0",
    kind: "safetensors",
    input: "model.safetensors",
    output: "out.gguf",
    args: ["--quantize", "Q8_0"],
    format: "gguf",
    baselines: ["py:st2gguf-q8_0"],
    reference: "st2gguf-q8_0",
    target: ["py:st2gguf-q8_0", 0.1],
    peakMB: 200,
    big: false,
  },
  // Saved by `torchrun --nproc_per_node=4` workers, each holding only its piece (bench/reference.py gen_dcp).
  dcpRow("rows", 1.5),
  dcpRow("columns", 2.5),
  {
    // What a user would run instead: sha256sum of the file (st-convert hashes each tensor's bytes).
    name: "hash (each tensor's SHA-256 and the checkpoint digest)",
    kind: "safetensors",
    input: "model.safetensors",
    command: "hash",
    format: "safetensors",
    baselines: ["tool:sha256sum"],
    target: ["tool:sha256sum", 1.3],
    big: false,
  },
  {
    name: "diff of two equal files, exactly (both read once)",
    kind: "safetensors",
    input: "model.safetensors",
    command: "diff",
    format: "safetensors",
    baselines: ["tool:cmp"],
    target: ["tool:cmp", 1.5],
    big: false,
  },
  {
    name: "stats of one F32 tensor (min, max, mean, std, NaN/Inf/zero counts)",
    kind: "safetensors",
    count: 1,
    input: "t.safetensors",
    command: "stats",
    format: "safetensors",
    baselines: ["py:nanstats"],
    target: ["py:nanstats", 0.5],
    big: false,
  },
  {
    name: "info, 10,000 tensors (process start included)",
    kind: "many",
    count: 10_000,
    input: "many.safetensors",
    info: true,
    format: "safetensors",
    baselines: ["py:keys"],
    target: ["py:keys", 1],
  },
  {
    name: "safetensors → JSON, one 256 MiB F32 tensor",
    kind: "safetensors",
    bytes: 256 * 1024 ** 2,
    count: 1,
    input: "t.safetensors",
    output: "out.json",
    format: "json",
    baselines: ["py:small-st2json"],
    // MiB of F32 data per second (the text is about three times as long).
    target: ["MiB/s", 200],
    runs: 3,
    big: false,
  },
  {
    name: "JSON → safetensors, one 256 MiB F32 tensor",
    kind: "json-f32",
    bytes: 256 * 1024 ** 2,
    input: "t.json",
    output: "out.safetensors",
    format: "json",
    baselines: ["py:small-json2st"],
    reference: "small-json2st",
    target: ["MiB/s", 200],
    runs: 3,
    big: false,
  },
];

// The page, macOS, Windows and musl run without the native module: the GGUF and DCP rows again on
// that path, as `ST_CONVERT_NATIVE=0` shows it on Linux (the baselines as in the rows above).
for (const name of [
  "GGUF F16 → safetensors",
  "GGUF Q4_K → F32 safetensors",
  "F32 → GGUF Q8_0",
  ...["rows", "columns"].map((split) => `DCP 4 ranks, split by ${split} → safetensors`),
]) {
  const row = cases.find((c) => c.name === name);
  cases.push({ ...row, name: `${name} (JavaScript path)`, env: { ST_CONVERT_NATIVE: "0" } });
}

const LABELS = {
  cp: "cp",
  start: "Node's start-up alone (`node -e 0`); ratio: st-convert less it, over cp",
  "py:st2st": "Python load_file + save_file",
  "py:npy2st": "np.load + save_file",
  "py:npz2st": "np.load(npz) + save_file",
  "py:npz-load": "np.load(npz), all members",
  "py:npz-contiguous": "np.load(npz) + np.ascontiguousarray, all members",
  "py:npz-fortran2st": "np.load(npz) + ascontiguousarray + save_file",
  "py:fortran-contiguous": "np.load + np.ascontiguousarray",
  "py:fortran2st": "np.load + ascontiguousarray + save_file",
  "py:flax2st": "msgpack_restore + flatten + save_file",
  "py:keys": "safe_open(...).keys()",
  "py:json-dumps": "load_file + json.dumps(a.tolist())",
  "py:small-st2json": "load_file + json.dump(tolist())",
  "py:small-json2st": "json.load + np.array + save_file",
  "py:torch2st": "torch.load + save_file",
  "py:st2npy": "load_file + np.save",
  "py:st2npz": "load_file + np.savez",
  "py:st2npz-deflated": "load_file + np.savez_compressed",
  "py:st2flax": "load_file + unflatten + msgpack_serialize",
  "py:st2torch": "load_file + torch.save",
  "py:cast-bf16": "load_file + .to(torch.bfloat16) + save_file (torch)",
  "py:merge": "load_file each shard + save_file",
  "py:reshard": "load_file each shard + save_torch_state_dict(max_shard_size=1GB)",
  "tool:sha256sum": "sha256sum of the file",
  "tool:cmp": "cmp of the two files",
  "py:gguf2st": "gguf-py GGUFReader + save_file",
  "py:gguf-dequant2st": "gguf-py GGUFReader + gguf.quants.dequantize + save_file",
  "py:st2gguf-q8_0": "load_file + gguf.quants.quantize + GGUFWriter",
  "py:dcp2st": "torch dcp_to_torch_save + torch.load + save_file",
  "py:nanstats": "load_file + nanmin, nanmax, nanmean, nanstd (float64) and the counts",
};

function measure(command, args, env) {
  const run = measureCommand(command, args, work, env === undefined ? {} : { env: { ...process.env, ...env } });
  if (run.status !== 0) throw new Error(`${command} ${args.join(" ")} failed (${run.status}):\n${run.stderr}`);
  return { seconds: run.seconds, rssMiB: run.rssMiB };
}

/** `measure`, after flushing the dirty pages a previous run left, so that no run pays for another's writeback. */
function measureAfterSync(command, args, env) {
  spawnSync("sync");
  return measure(command, args, env);
}

function variantCommand(variant, c, input, output) {
  // hash, stats, diff (against a copy of the input, made beside it by runCase).
  if (variant === "ours" && c.command !== undefined)
    return [process.execPath, [cli, c.command, input, ...(c.command === "diff" ? [`${input}.copy`] : []), "--quiet"], c.env];
  if (variant === "tool:sha256sum") return ["sha256sum", [input]];
  if (variant === "tool:cmp") return ["cmp", [input, `${input}.copy`]];
  if (variant === "ours")
    return c.info ? [process.execPath, [cli, "info", input], c.env] : [process.execPath, [cli, input, output, "--force", "--quiet", ...(c.args ?? [])], c.env];
  // A sharded input is a folder, and so is a DCP checkpoint: cp copies all of it.
  if (variant === "cp")
    return c.kind === "st-sharded" ? ["cp", ["-r", dirname(input), output]] : isFolder(c) ? ["cp", ["-r", input, output]] : ["cp", [input, output]];
  // What any Node program pays before its first line.
  if (variant === "start") return [process.execPath, ["-e", "0"]];
  return [python, [join(root, "bench", "reference.py"), "run", variant.slice(3), input, output]];
}

/** Whether the row's input is a folder given as such (a DCP checkpoint). */
const isFolder = (c) => c.kind.startsWith("dcp-");
/** The row's goals as [baseline label, largest ratio] pairs. */
const targetsOf = (c) => (Array.isArray(c.target[0]) ? c.target : [c.target]);

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
/** SHA-256 of a file, read in 8 MiB pieces (readFileSync stops at 2 GiB). */
function sha(path) {
  const hash = createHash("sha256");
  const buffer = Buffer.allocUnsafe(8 * 1024 * 1024);
  const fd = openSync(path, "r");
  try {
    for (let n; (n = readSync(fd, buffer)) > 0; ) hash.update(buffer.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest("hex");
}

function gen(c, bytes, dir) {
  const input = join(dir, c.input);
  if (c.kind === "json-f32") {
    // The file the writer row produces: the reference tool makes the tensor, st-convert its JSON
    // form (shortest decimals; Python's json.dump of the same floats writes 17 digits each).
    const tensor = gen({ kind: "safetensors", count: 1, input: "t.safetensors" }, bytes, dir);
    const made = spawnSync(process.execPath, [cli, tensor, input, "--force", "--quiet"], { encoding: "utf8" });
    if (made.status !== 0) throw new Error(`making ${c.input} failed:\n${made.stderr}`);
    rmSync(tensor);
    return input;
  }
  const amount = c.kind === "many" ? c.count : bytes;
  const target = c.kind === "st-sharded" ? dirname(input) : input;
  const args = [join(root, "bench", "reference.py"), "gen", c.kind, target, String(amount)];
  if (c.count !== undefined && c.kind === "safetensors") args.push(String(c.count));
  if (c.kind === "st-sharded") args.push(String(typeof c.shardBytes === "function" ? c.shardBytes(bytes) : c.shardBytes));
  const run = spawnSync(python, args, { encoding: "utf8" });
  if (run.status !== 0) throw new Error(`making ${c.input} failed:\n${run.stderr}`);
  return input;
}

/** Largest scratch file `prime` writes. */
const PRIME_MAX = 8 * 1024 ** 3;
const PRIME_PIECE = Buffer.alloc(8 * 1024 * 1024);

/**
 * Writes `bytes` to a scratch file in page cache and deletes it. On this VM, memory that stays free
 * for about two seconds is handed back to the host (virtio-balloon free page reporting), and the
 * first write into it pays the host's page faults: 1 GiB written after three idle seconds took
 * 1.4–2.2 s, for `cp` and st-convert alike, and 0.26–0.44 s right after another write of 1 GiB
 * (5 pairs each, 2026-12-07). Without it a run in the fresh state was fast or slow by when the host
 * took back the memory the run before it freed (the Python reference's most of all), so a contestant
 * paid for another's leftovers; primed, each run writes into memory freed a moment before. Only in the
 * fresh state: the host takes back free blocks of 2 MiB or more, and the aged state's free memory lies
 * mostly in smaller pieces (its runs were steady unprimed, and primed they were not).
 */
function prime(bytes) {
  const scratch = join(work, "prime.scratch");
  const fd = openSync(scratch, "w");
  try {
    for (let at = 0; at < bytes; at += PRIME_PIECE.length) writeSync(fd, PRIME_PIECE, 0, Math.min(PRIME_PIECE.length, bytes - at));
  } finally {
    closeSync(fd);
    rmSync(scratch, { force: true });
  }
}

function runCase(c, state) {
  const dir = join(work, c.kind + (c.tag ?? ""));
  mkdirSync(dir, { recursive: true });
  const input = gen(c, typeof c.bytes === "function" ? c.bytes(size) : (c.bytes ?? size), dir);
  const output = join(dir, c.output ?? "unused");
  const inputBytes = bytesOf(c.kind === "st-sharded" ? dirname(input) : input);
  if (c.command === "diff") copyFileSync(input, `${input}.copy`);
  const variants = ["ours", ...c.baselines.filter((b) => b === "cp" || b.startsWith("tool:") || python !== undefined)];
  // Beside cp: the share of st-convert's time that is Node's start-up, measured in the same runs.
  if (c.baselines.includes("cp")) variants.push("start");
  const results = Object.fromEntries(variants.map((v) => [v, []]));
  // In the fresh state, twice the larger of the input and the largest output (a Python contestant
  // holds the tensors in memory as well as writing them), known once each contestant has run.
  let primeBytes = 0;
  let largestOutput = 0;
  /** One run of `variant`, primed, its output removed afterwards (and its size kept, when `sized`). */
  const runVariant = (variant, sized = false) => {
    if (primeBytes > 0) prime(primeBytes);
    const run = measureAfterSync(...variantCommand(variant, c, input, output));
    if (sized && existsSync(output)) largestOutput = Math.max(largestOutput, bytesOf(output));
    rmSync(output, { recursive: true, force: true });
    return run;
  };
  // One untimed run of each first: the machine settles after making the input (page cache,
  // memory the generator freed), so the first timed runs measure the conversion, not the aftermath.
  // Their outputs size the primer.
  for (const variant of variants) runVariant(variant, true);
  if (!values["no-prime"] && state === "fresh") primeBytes = Math.min(PRIME_MAX, 2 * Math.max(inputBytes, largestOutput));
  const rowRuns = Math.min(runs, c.runs ?? runs);
  for (let r = 0; r < rowRuns; r++) {
    for (let k = 0; k < variants.length; k++) {
      const variant = variants[(k + r) % variants.length]; // interleaved, rotating order
      results[variant].push(runVariant(variant));
    }
  }
  let identical;
  if (c.reference !== undefined && python !== undefined) {
    const theirs = join(dir, `reference-${c.output}`);
    measure(...variantCommand(`py:${c.reference}`, c, input, theirs));
    measure(...variantCommand("ours", c, input, output));
    identical =
      c.compare === "tensors"
        ? spawnSync(python, [join(root, "bench", "reference.py"), "same-tensors", theirs, output], { stdio: "inherit" }).status === 0
        : shaOfOutput(theirs) === shaOfOutput(output);
    rmSync(theirs, { recursive: true, force: true });
    rmSync(output, { recursive: true, force: true });
  }
  rmSync(dir, { recursive: true, force: true });
  const summary = Object.fromEntries(
    Object.entries(results).map(([v, xs]) => [
      v,
      { seconds: median(xs.map((x) => x.seconds)), rssMiB: median(xs.map((x) => x.rssMiB)), all: xs.map((x) => x.seconds) },
    ]),
  );
  return { c, inputBytes, summary, identical, date: today(), runs: rowRuns, ...(primeBytes > 0 ? { primeBytes } : {}) };
}

/** Bytes of a file, or of a folder's files. */
function bytesOf(path) {
  const stats = statSync(path);
  if (!stats.isDirectory()) return stats.size;
  return readdirSync(path).reduce((sum, name) => sum + bytesOf(join(path, name)), 0);
}

const today = () => new Date().toISOString().slice(0, 10);

/** Largest flax input made: its reference writer (`msgpack_serialize`) needs about three times the file in RAM. */
const FLAX_BIG = 2 * 1024 ** 3;

/** Peak memory on big inputs: the pass-through paths once each, beside `cp` (flax at most {@link FLAX_BIG}). */
function bigRss(bytes) {
  const rows = [];
  for (const c of cases.filter((c) => c.baselines.includes("cp") && c.big !== false && hasFormat(c.format) && chosen(c.name))) {
    const dir = join(work, `big-${c.kind}${c.tag ?? ""}`);
    try {
      mkdirSync(dir, { recursive: true });
      const size = c.kind === "flax" ? Math.min(bytes, FLAX_BIG) : bytes;
      console.log(`bench: ${c.name} at ${fmt(mib(size) / 1024, 0)} GiB …`);
      const input = gen(c, size, dir);
      const output = join(dir, c.output);
      // One untimed cp first, as the 1 GiB rows run each contestant once first: the first run
      // after making the input pays for its aftermath (the generator's memory reclaimed, the page
      // cache refilled). Without it st-convert, run first, took 22.6 s for 8 GiB of npy, then 4.2 s.
      measureAfterSync(...variantCommand("cp", c, input, output));
      rmSync(output, { recursive: true, force: true });
      const ours = measureAfterSync(...variantCommand("ours", c, input, output));
      rmSync(output, { recursive: true, force: true });
      const cp = measureAfterSync(...variantCommand("cp", c, input, output));
      rows.push({ name: c.name, inputBytes: bytesOf(c.kind === "st-sharded" ? dirname(input) : input), ours, cp, date: today() });
    } catch (error) {
      console.warn(`bench: ${c.name} at ${values.big} not run: ${error.message.split("\n")[0]}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return rows;
}

const mib = (b) => b / 1024 ** 2;
/** The "same bytes as the reference" cell: "yes (tensors)" where only the tensors were compared. */
const sameCell = (c, identical) => (identical === undefined ? "n/a" : identical ? (c.compare === "tensors" ? "yes (tensors)" : "yes") : "**no**");
const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");

function report(rows, big, many, kernels) {
  const pyVersions = python
    ? spawnSync(
        python,
        [
          "-c",
          "import numpy, safetensors, flax, sys; print(f'Python {sys.version.split()[0]}, numpy {numpy.__version__}, safetensors {safetensors.__version__}, flax {flax.__version__}')",
        ],
        { encoding: "utf8" },
      ).stdout.trim()
    : "no reference Python (Python baselines skipped)";
  const lines = [
    "# Benchmarks",
    "",
    `Written by \`pnpm bench\` (bench/run.mjs), last on ${today()}, from the figures in bench/results.json. Each run replaces the rows it measured and keeps the others (\`pnpm bench --only TEXT\` measures the rows whose names contain TEXT); the raw times at the end give each row's date and number of runs.`,
    "",
    `- Machine of the last run: ${machine}, ${cpus().length} cores, ${(totalmem() / 1024 ** 3).toFixed(0)} GiB RAM, Linux ${release()}; a shared machine, so figures are noisy: medians of interleaved runs after one untimed run each. Rows measured from 2026-12-06 on name their processor in the raw times; earlier ones did not record it (the page's last runs before then were on an AMD EPYC of the same size).`,
    `- Node ${process.version}; ${pyVersions}.`,
    `- Node's start-up: rows measured from 2026-12-06 on run every contestant without this machine's \`NODE_EXTRA_CA_CERTS\`${extraCaCerts === undefined ? " (not set in the last run)" : ""}, which makes any Node process parse a certificate file before its first line (\`node -e 0\` 115 ms with it, 36 ms without, means of 21 runs); earlier rows include it. A user whose environment sets it pays the same.`,
    `- st-convert's native module (\`@st-convert/native\`): ${native === undefined ? `not loaded (${nativeAbsence}): every copy goes through user space, CRCs through zlib` : "loaded: pass-through tensors are copied in the kernel (`copy_file_range`), CRC-32 folds with PCLMULQDQ"}. Rows keep the figures of the run that last measured them, with or without it.`,
    `- Input size ${fmt(mib(size), 0)} MiB unless the path says otherwise; page cache warm, \`sync\` before every run, no fsync inside it, for every contestant.`,
    "- Ratio = st-convert's median time / the baseline's median time (below 1: st-convert is faster). Peak RSS is the median of `/usr/bin/time` maximum resident set sizes.",
    '- States (`--state`): **fresh** is the machine just after `sync`, dropping the page cache and compacting memory; **aged** is fresh, then 60 % of memory (at most 16 GiB) written as 16 files in round-robin 64 KiB pieces and 15 of them deleted, which leaves a sixteenth of it in page cache, one 64 KiB piece in every 1 MiB of the memory it went through: free memory plentiful but in pieces under 1 MiB, as hours of ordinary work leave it (see "Reading these figures" below). Both are made before each row, so a row does not depend on what ran before it.',
    "- Primed runs (fresh-state rows whose raw times below say so, from 2026-12-07 on): before every run in the fresh state, the bench writes a scratch file twice the size of the larger of the row's input and output into page cache and deletes it. On this VM, free memory in blocks of 2 MiB or more that stays free for about two seconds is handed back to the host (virtio-balloon free page reporting, `page_reporting_order` 9), and the first write into it pays the host's page faults: 1 GiB written after three idle seconds took 1.4–2.2 s, for `cp` and st-convert alike, against 0.26–0.44 s right after another write of 1 GiB (5 pairs each). Unprimed, a fresh-state run was fast or slow by when the host took back what the run before it had freed, the Python reference's memory most of all (`cp` started 0–15 s after gguf-py's GGUF → safetensors took 0.31–2.99 s, the fast ones started at once), so contestants paid for each other's leftovers and a row's median was a draw (the GGUF F16 row's st-convert [2.18, 0.33, 2.42, 0.30, 1.48, 0.39, 2.36, 0.31, 1.56] beside `cp` [0.25, 2.31, 0.26, 0.25, 0.31, 2.09, 0.26, 0.25, 0.31]). Primed, every contestant writes into memory freed a moment before. Not in the aged state, whose free memory lies mostly in pieces the VM does not hand back: there its rows ran steadily unprimed (that row: st-convert 0.31–0.38 s, `cp` 0.26–0.30), and primed they did not (`cp` 0.28–0.82 s). A Python contestant that holds gigabytes gains the most from it, so the ratios against the references are the stricter for it. `--no-prime` leaves it out.",
  ];
  for (const state of STATES) {
    const inState = rows.filter((r) => r.state === state);
    const kernelsInState = kernels.filter((r) => r.state === state);
    if (inState.length === 0 && kernelsInState.length === 0) continue;
    lines.push("", `## ${state[0].toUpperCase()}${state.slice(1)} state`);
    if (inState.length > 0)
      lines.push(
        "",
        "| path | input | st-convert | MiB/s | peak RSS | baseline | baseline time | ratio | target | met | same bytes as the reference |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
      );
    for (const { c, inputBytes, summary, identical } of inState) {
      const ours = summary.ours;
      // A throughput target: MiB of tensor data per second (c.bytes; the input may be text).
      if (targetsOf(c)[0][0] === "MiB/s") {
        const rate = mib(c.bytes ?? inputBytes) / ours.seconds;
        lines.push(
          `| ${c.name} | ${fmt(mib(inputBytes), 0)} MiB | ${fmt(ours.seconds)} s | ${fmt(rate, 0)} | ${fmt(ours.rssMiB, 0)} MiB | MiB of F32 data per second |  |  | ≥ ${c.target[1]} MiB/s | ${rate >= c.target[1] ? "yes" : "**no**"} | ${sameCell(c, identical)} |`,
        );
      }
      for (const [i, b] of c.baselines.entries()) {
        const lead = i === 0 && targetsOf(c)[0][0] !== "MiB/s";
        const base = summary[b];
        const ratio = base ? ours.seconds / base.seconds : NaN;
        const goal = targetsOf(c).find(([label]) => label === b);
        const isTarget = goal !== undefined;
        // A peak-memory goal is judged with the row's first line.
        const peak = lead && c.peakMB !== undefined ? c.peakMB : undefined;
        const peakMet = peak === undefined || (ours.rssMiB * 1024 ** 2) / 1e6 <= peak;
        const met = !base ? "n/a" : ratio <= (isTarget ? goal[1] : 1) && peakMet ? "yes" : "**no**";
        const aim = [isTarget ? `≤ ${goal[1]}×` : b.startsWith("py:") ? "faster" : "", peak === undefined ? "" : `peak ≤ ${peak} MB`]
          .filter(Boolean)
          .join(", ");
        lines.push(
          `| ${lead ? c.name : ""} | ${lead ? `${fmt(mib(inputBytes), 0)} MiB` : ""} | ${lead ? `${fmt(ours.seconds)} s` : ""} | ${lead && !c.info ? fmt(mib(inputBytes) / ours.seconds, 0) : ""} | ${lead ? `${fmt(ours.rssMiB, 0)} MiB` : ""} | ${LABELS[b]} | ${base ? `${fmt(base.seconds)} s (${fmt(base.rssMiB, 0)} MiB)` : "not run"} | ${fmt(ratio)} | ${aim} | ${met} | ${lead ? sameCell(c, identical) : ""} |`,
        );
        const start = summary.start;
        if (b === "cp" && base && start)
          lines.push(
            `|  |  |  |  |  | ${LABELS.start} | ${fmt(start.seconds)} s (${fmt(start.rssMiB, 0)} MiB) | ${fmt((ours.seconds - start.seconds) / base.seconds)} |  |  |  |`,
          );
      }
    }
    lines.push(...kernelTable(kernelsInState));
  }
  if (big.length > 0) {
    lines.push(
      "",
      `## Peak memory on big inputs (\`--big\`; flax at most ${fmt(mib(FLAX_BIG) / 1024, 0)} GiB)`,
      "",
      "One untimed `cp`, then one run each, st-convert then `cp`, each after a `sync`, in each state the run was given (`--state`; made once for the whole section): the figure that matters is peak RSS. Past a few GiB the output no longer fits the page cache's dirty limit (20 % of memory here), so the times mostly measure the disk's writeback, which varies more than the copies do; one run each, so a ratio is one draw, not a median.",
      "",
      "| path | state | input | st-convert time | peak RSS | cp time | ratio | target ≤ 1.3× | date |",
      "|---|---|---|---|---|---|---|---|---|",
    );
    for (const r of big) {
      const ratio = r.ours.seconds / r.cp.seconds;
      lines.push(
        `| ${r.name} | ${r.state ?? "fresh"} | ${fmt(mib(r.inputBytes) / 1024, 2)} GiB | ${fmt(r.ours.seconds)} s | ${fmt(r.ours.rssMiB, 0)} MiB | ${fmt(r.cp.seconds)} s | ${fmt(ratio)} | ${ratio <= 1.3 ? "yes" : "**no**"} | ${r.date}${r.machine ? `, ${r.machine}` : ""} |`,
      );
    }
  }
  lines.push(...manyReport(many));
  lines.push(
    "",
    "## Reading these figures",
    "",
    "- The machine is shared: the same command varies by 20–50 % between runs, and the Python pipelines by more. Ratios near a target flip between runs; the raw times below show the spread.",
    "- Rows measured on different occasions met different machines: `cp` of 1 GiB took 0.18–0.21 s in the morning of 2026-12-02 and 0.38–0.87 s that evening, when the cast row was measured again (st-convert's own 0.60 s fresh was the 0.63 s of the morning within noise). That row's `yes` rests on that `cp`; against the morning's it is 3×. Compare st-convert's seconds across rows, and ratios only within a row.",
    "- With the native module, st-convert copies a tensor whose bytes pass as they are in the kernel (`copy_file_range`, 64 MiB per call), as `cp` does; a check it owes (a stored member's CRC-32) reads the bytes alongside. Without it, a read and a write per 2 MiB chunk, from a ring of three reused buffers. Where the input's and output's offsets lie at different places within a page (npy, npz, flax and PyTorch data against a safetensors header, shards against a merged file), `copy_file_range` moves each page in two parts: 0.53–0.60 s for 1 GiB against 0.39–0.41 s for an equally placed copy (2026-12-03, 4 runs each, outputs removed and synced between runs), where a read and a write through one reused buffer, each write but the first starting on a page of the output, took 0.40–0.43 s. So the native copy takes that path for such ranges (1 MiB or more) and `copy_file_range` for the others: npy → safetensors at 1 GiB went from 0.59–0.62 s to 0.47–0.49 s, against a `cp` of 0.35–0.37 s in the same interleaved runs. The buffer is 512 KiB: with 2 MiB the 4 GiB reshard took 2.0× `cp` in the aged state (st-convert 2.07–3.73 s against 1.66 s), with 512 KiB 1.16×, in runs hours apart (2026-12-03); run interleaved later that day, the two sizes were within noise of each other at 1 GiB (medians 0.68 and 0.69 s against a `cp` of 0.48 s) and at 4 GiB, and large writes are what costs more past a few GiB here (below). (Earlier sessions measured a read and a write through a 2 MiB buffer at 0.2–2 s and a write from the input mapped in 8 MiB windows at 0.18–2.4 s, this VM's page faults costing up to ~14 µs each: the buffer here is made once per pool thread and kept, so it faults once.) Two `copy_file_range` calls into one file at once took as long as one (the kernel serializes writes to a file). A check's CRC-32 (npz and PyTorch stored members) reads its bytes on the thread pool through a 256 KiB buffer (`crc32Range`, 0.13 s/GiB) beside the copy. Since 2026-12-06 a buffered copy of 4 MiB or more reads ahead on a thread of its own while the pool thread writes, and where a check is the CRC-32 of exactly the bytes copied (a PyTorch member read whole, an npz member read to its end, the members the npz and PyTorch writers copy), that thread takes the CRC as each buffer arrives instead of a third thread reading the bytes again: the nine rows these touch went from 1.24–1.47× `cp` (fresh) and 1.21–1.49× (aged) that morning to 0.97–1.28× and 0.97–1.46× that afternoon, when `cp` itself ran faster (0.25–0.37 s against 0.33–0.52 s), so compare the ratios; the one that did not improve, PyTorch aged (1.36× to 1.46×), had st-convert at 0.36–0.38 s in all five runs against a `cp` of 0.25–0.33 s. That evening, `strace` of the PyTorch row showed 4,096 reads of 256 KiB beside the copy's 2,048 of 512 KiB: the command's own wrapper of each tensor (progress, the abort check) passed on the extent's check but not its CRC-32 fold, so the check alongside read every stored npz and PyTorch member a second time, and only the library's own path folded. With the fold passed on (and a test through `convert()` that the check makes no read of its own), npz (stored) → safetensors went to 1.12× fresh and 1.16× aged, PyTorch .bin → safetensors to 1.00× and 1.04× (st-convert 0.28–0.29 s). The CRC-32 itself now folds 512 bits at a time where the CPU has AVX-512 and VPCLMULQDQ, as this one does (native README).",
    "- Start-up: each pass-through row times `node -e 0` in the same interleaved runs (the line under `cp`), and gives st-convert's time less it, over `cp`. Since 2026-12-06 every contestant runs without this machine's `NODE_EXTRA_CA_CERTS` (above): `node -e 0` 0.03–0.05 s in those runs, against 0.10–0.14 s with it on 2026-12-04. What st-convert adds to Node's own start-up (2026-12-06, hyperfine, means of 21 runs, without the variable): `st-convert --version` 62 ms against `node -e 0` 36 ms; a 124 KB PyTorch checkpoint (a tiny GPT-2, 28 tensors) → safetensors 107 ms, `info` of it 97 ms. A CPU profile of the 1 GiB PyTorch row (5 runs) shows compiling the CLI's chunks (16 ms), reading the checkpoint's directory and pickle (5 ms), removing the replaced 1 GiB output (56 ms, which `cp` pays too as it truncates its output), and otherwise waiting for the copy. So these 1 GiB ratios move with `cp`'s own speed on the machine of the day (a machine of this project's kind is not always the same processor): on 2026-12-06 (an Intel Xeon), with `cp` at 0.25–0.52 s and `node -e 0` at 0.02–0.05 s, every pass-through row was 0.97–1.46× `cp`, fresh and aged; on 2026-12-04 (an AMD EPYC), with `cp` at 0.16–0.22 s and Node's start-up at 0.10–0.14 s (the variable included), they were 1.7–2.3×, and less that start-up 1.1–1.6×. Earlier measurements of the same costs (2026-12-04): loading the CLI's entry and its core chunk 22–29 ms (the core chunk, 200 KB, 14–17 ms: 6.5 ms of it compiling, which a V8 code cache cut to 3.5 ms), the PyTorch reader's chunks 9 ms, two young-generation collections during loading 2–3 ms each.",
    "- Tried and dropped on 2026-12-04: folding a stored member's CRC-32 into the copy (one read of the bytes instead of the copy's and the check's). In a C harness copying 1 GiB at offsets that differ within a page (9 interleaved runs, outputs synced between): the copy alone took a median 0.236 s, the copy with the check reading alongside on another thread 0.207 s, the copy folding the CRC into its own buffer 0.299 s. On two cores the check's second read costs no wall-clock time, while the fold adds its 74 ms/GiB to the copy's thread. (Taken up again on 2026-12-06, once the buffered copy read ahead on a thread of its own: that thread folds the CRC as each buffer arrives, which is what the copy now does; see the native-module note above.) Also tried: three output buffers for the JSON writer instead of two, so that formatting never waits for the write before (no difference beyond noise in 6 interleaved runs: three buffers 2.56–3.59 s, two 2.47–3.58 s), and reading ahead during its lossless pre-pass (likewise).",
    "- Chunks of 4 MiB made most runs on this machine spend 2–3× the system time in page-cache writes (2.0–2.3× `cp` against 1.1–1.4× with 2 MiB, same paths, medians of 9–11 runs), hence the 2 MiB default.",
    "- A stored `.npz` adds the CRC-32 check of every member (zlib's crc32, about 0.15 s of CPU per GiB). It is folded in while the chunk before is being written, but on 2 cores it still competes with the read and the write for CPU time (stored npz: 1.3–1.4× `cp` in separate A/B runs, safetensors and npy 1.0–1.25×). The check stays: an archive whose bytes do not match their CRC is refused, as numpy's zipfile refuses it.",
    "- Outputs of several GiB: on this VM, write calls of 1 MiB or more into fresh page cache often cost 2–10× the system time, more so as the page cache fills memory (ext4 on Linux 6.18 apparently allocates page-cache folios as large as the write, which fragmented memory makes expensive). 4 GiB safetensors → safetensors took 3.2–4.3 s against `cp`'s 1.2–1.3 s; the 8 GiB rows above show it too. Writes of 512 KiB avoid it (1.3–1.4 s at 4 GiB), but cost 20–40 % more at 1 GiB when issued through Node's thread pool, and made synchronous they serialize the npz CRC with the write (1.87× `cp` at 1 GiB); picking the write size by output size is the open follow-up. The stored npz path, paced by its CRC, does not show it (8 GiB: 4.2 s, `cp` 3.7 s).",
    "- JSON, one 256 MiB F32 tensor (about 800 MB of text): the reader scans the text twice (its structure, then its values), the writer formats every element; both move the text through the page cache. The reader's C loops take plain numbers 64 bytes at a time (7.6 ns a number storing, 7.7 counting, in the loops alone, against 20 and 17 for the line-for-line loops, 2026-12-03; native README); the writer's search and digits take about 23 ns an element (in a C harness over 16 M normally distributed F32 values: 9 ns deciding the digits, 14 ns writing them, the same whether or not values below 1 and above it come mixed, so not a matter of branch prediction). A CPU profile of the 256 MiB writer row (2026-12-04, 2.65 s of samples): the kernel 1.72 s, the lossless pre-pass (a NaN other than the canonical one sends a tensor to base64) 0.18 s, and 0.56 s idle, of which 0.22 s waiting for a write to finish before a buffer is refilled and about 0.2 s waiting for the pre-pass's reads; the writes themselves take 0.6–0.9 s of system time on the other core. Two cores' worth of that work is 2.7 s or more, so 200 MiB/s (1.28 s for 256 MiB) needs a kernel about twice as fast and split across both cores, not the I/O strategy. The rest is the text's reads and writes, whose system time on this VM swings with the state of its memory: `dd` writing 762 MiB in 1 MiB blocks took 0.09 s of system time, and 1.6 s a few minutes later with some GiB more in page cache (2026-12-03). Tried for the reader and dropped, in alternating runs: each window read ahead on the thread pool while the one before is parsed (no faster: both cores were busy already, one parsing, one writing), and the value blocks reused three in turn (no faster). That kernel came on 2026-12-06 (the native README has the details):\n  - The writer decides four elements at a time (AVX2) and makes eight elements' digits at once,\n    with one shuffle per element for its text. Its loop went from 33 to 9.2 ns an element, equal\n    to the scalar one on all 2^32 bit patterns.\n  - The reader's scan judges and counts a 64-byte window of plain numbers at once (12.8 to 4.9 ns\n    a number). Its store parses a window's numbers four at a time, one per 128-bit lane (about 13\n    to 7–9 ns).\n  - Windows of 256 KiB or more are read ahead while the one before is parsed (about 3 % in\n    alternating runs).\n\n  The rows above went from 2.2 s (writer) and 1.7–1.9 s (reader) that morning to 0.92–1.03 s and\n  0.79–0.84 s, fresh and aged: 248–324 MiB/s.",
    "- GGUF F16 → safetensors is a copy of each tensor's bytes. Since 2026-12-07 the safetensors header of a conversion from GGUF (which no reference writes byte for byte, since it holds the GGUF's keys) is padded so that the tensors lie at their GGUF offsets modulo 64 KiB (core's `matchSourcePages`), and the native module copies them with `copy_file_range` at `cp`'s speed: 1 GiB from offset 320 to an offset equal modulo 64 KiB took a median 0.285 s against `cp`'s 0.286 s, and 0.412 s modulo a 4 KiB page only, the case before (7 interleaved runs after dropping the page cache and compacting memory). Traced in a conversion (`strace --seccomp-bpf`, 4 runs): 38–49 ms from `exec` to opening the input, 9–13 ms more to the first copy, the copy 0.27–0.32 s, then 8–10 ms to the shell; what is left above `cp` is Node's start-up (`node -e 0` 25–34 ms) and st-convert's own. Start-up fell the same day: the executable keeps V8's code cache of its chunks in a private folder (a small GGUF's conversion 53 ms against 69, medians of 10 runs; these figures are with the cache written, as from a user's second run), loads `node:crypto` only for `--digest`/`--verify` and makes `process.stderr` only where it may be a terminal (about 3 ms each); a GGUF read no longer compiles the K-quant modules (about 3 ms), and `process.stdout` is made only for a listing (1–2 ms). The runs of a row in the fresh state, right after dropping the page cache and compacting memory, held slow draws for every contestant (st-convert 1.37 s and `cp` 0.65 s among runs of 0.31–0.36 and 0.25–0.29 s), and the medians moved with them: the VM handing free memory back to its host (see Primed runs above), which the fresh-state rows have been primed against since the afternoon of 2026-12-07. By hand the same day, 9 interleaved runs after the same preparation: st-convert 0.33–0.42 s (median 0.37), the JavaScript path 0.40–0.50 s (median 0.43), `cp` 0.27–0.34 s (median 0.29). The JavaScript path copies every byte twice (page cache to buffer, buffer to page cache, 2 MiB at a time through Node's thread pool): a plain Node script doing only that (reads 2 MiB ahead, one write at a time, Node's start-up included, no st-convert code) took 0.34–0.56 s (median 0.40) against `cp`'s 0.26–0.35 s (median 0.31), and 0.33–0.54 s (median 0.42) against 0.26–0.39 s (median 0.28) in another series, so 1.3× `cp` is at or below what JavaScript reaches here; with two or three writes in flight it was no faster (medians 0.41 and 0.43 s), with 512 KiB or 1 MiB pieces slower (0.57 and 0.43 s), with 4 MiB pieces 1.3–1.7 s (large page-cache folios). Since the evening of 2026-12-07 the JavaScript path copies a tensor's bytes with the file sink's `copyFromFile` (core's node.ts): each 2 MiB piece read through the pool while the one before is written by a synchronous `write` on the main thread, half the pool's trips. Plain scripts, 10 interleaved runs: that scheme 0.32–0.42 s (median 0.37), reads and writes both synchronous 0.34–0.48 s (median 0.40), both through the pool 0.38–0.60 s (median 0.44), `cp` 0.29–0.41 s (median 0.33); in st-convert, 12 interleaved runs: 0.40–0.56 s (median 0.43) against 0.44–0.64 s (median 0.49) before, `cp` 0.29–0.38 s (median 0.34). A check of the bytes' own (a zip member's CRC-32) would read them a second time beside such a copy, so those are still piped (a DCP split by rows took 1.0 s that way against 0.76 s piped). The native row's fresh runs that evening were two kinds, 0.35–0.38 s and 0.51–0.63 s (4 of 9), where `cp` ran 0.27–0.33 s; by hand the same day in the same preparation (fresh, each run primed with 2 GiB), 8 interleaved runs gave st-convert 0.31–0.37 s (median 0.34), the JavaScript path 0.33–0.40 s (median 0.355) and `cp` 0.26–0.32 s (median 0.28): the slow kind is the machine's (it came in the bench's rounds, where each contestant runs right after another's, gguf-py's 1 GiB included). Of st-convert's time above `cp`'s, about 60 ms come before the first copy (`exec` to `copy_file_range`, traced), Node's own start-up (25–30 ms) and st-convert's (loading its chunks and the native module, reading the GGUF's header, planning and creating the output), none of it a single large cost (a CPU profile of a small GGUF's conversion: 40 ms of work spread over module loading, option parsing and planning, the rest waiting for I/O).",
    "- GGUF Q4_K → F32: since 2026-12-07 Q8_0, Q4_K and Q6_K blocks are dequantized in WebAssembly SIMD (`src/quants/simdDequant.ts` of @st-convert/gguf; four float32 lanes round each product and difference as numpy's float32 does, so the bits are gguf-py's), on either path: per value 0.31, 0.45 and 0.50 ns against the JavaScript loops' 1.6, 1.3 and 3.2 ns (65,536 blocks at a time, copied into and out of the module's memory included; best of 5 on a quiet machine). The row, 256 MiB of blocks to 1.8 GiB of F32, went from medians of 0.84–1.02 s (the loops on the main thread while the writes ran on the thread pool; either path, either state) to 0.70 s (native) and 0.76 s (JavaScript path) in the aged state, now paced by writing 1.8 GiB; in the same interleaved runs by hand under load, its user time went from 0.85–1.29 s to 0.35–0.43 s. Writing the values straight into slots of the module's memory, which a writer then wrote out, saved no wall time (0.73–1.41 s against 0.77–1.21 s, 4 alternating runs) and would tie the slots' reuse to the writer's pace, so the values are copied out.",
    "- `--quantize Q8_0` (F32): the values are read into the WebAssembly kernel's own memory and its blocks written there, the next batch read while one is quantized; on one thread, as the kernel keeps up with the reads (two worker threads took 0.88 s against 0.6 s). The floor here is reading 1 GiB (about 0.2 s of system time) beside the kernel's time: 0.18 s per GiB until the evening of 2026-12-07, 0.13 s since (four blocks at a time, 0.67 → 0.47 ns per value; 8 interleaved runs of the whole conversion by hand: 0.31–0.41 s → 0.27–0.46 s with the native module, medians 0.37 → 0.31 s). In the fresh state that evening the native row's runs were 0.31–0.47 s (median 0.35, 0.101× gguf-py's, not met) and the JavaScript path's 0.26–0.38 s (median 0.32); the rows run again later, the same build, are those shown: native 0.089× fresh and 0.094× aged, the JavaScript path 0.09× and 0.07×, so on this machine the native row's ratio moves between 0.07 and 0.10 from run to run of the same build (gguf-py's own medians 3.38–4.06 s); by hand in the same preparation (fresh, each run primed with 2 GiB), 8 interleaved runs each gave 0.24–0.29 s (median 0.26) with the native module and 0.23–0.36 s (median 0.255) without, against gguf-py's 3.3–4.4 s in the bench. Single runs on either path sometimes take 0.41–0.55 s where the others take 0.31–0.33 s (the aged native row of 2026-12-07: 0.31, 0.41, 0.52, 0.47, 0.46, 0.31, 0.32); made by hand in the same aged state, 8 interleaved runs each gave 0.32–0.40 s with the native module and 0.31–0.38 s without (medians 0.33 and 0.325 s), so the slow draws are the machine's, not the path's. Tried and dropped on 2026-12-07 (plain scripts, 5 interleaved runs each, fresh and primed, against the conversion's 0.24–0.37 s): reading 256 KiB at a time synchronously into the kernel's memory and quantizing it there while still in cache (0.52–0.61 s: read and kernel in turn on one thread), and worker threads that each read and quantized whole 4 MiB batches for the main thread to write (one worker 0.41–0.55 s, two 0.38–0.43 s: about 0.12 s to start a worker with the kernels loaded, and the two reads contending).",
    "- DCP on the JavaScript path (the rows' 2.0–2.2× `cp` against the 1.5× target; by hand on 2026-12-07, warm cache, 5–7 interleaved runs): rows took 0.53–0.72 s with 0.37–0.54 s of user and 0.43–0.55 s of system time, against `cp`'s 0.27–0.34 s. zlib's CRC-32 in Node 20 folds 4.6 GB/s (55 ms per 256 MiB), 0.22 s of the user time on the CRC thread; a test build that skipped the check still took 0.50–0.61 s, as did a plain safetensors → safetensors copy on the same path (0.48–0.56 s): without `copy_file_range`, every byte is copied twice (page cache to buffer, buffer to page cache) through Node's thread pool. Together about 0.85 s of CPU per GiB, so on 2 cores the floor is near 1.5× `cp` before any wait. What plain Node reaches here, with nothing of st-convert's (a script: one worker thread reading with `readSync` and folding zlib's CRC-32, another writing with `writeSync`, a shared ring of four 2 MiB buffers, the same four files): 0.44–0.59 s with the CRC (median 0.48) and 0.32–0.45 s without, against `cp`'s 0.25–0.28 s. So the rows' JavaScript path is within about 15 % of what JavaScript can do on this machine, and the GGUF F16 JavaScript path (0.35–0.36 s in the same runs) is at it; 1.5× `cp` with the check is out of reach without `copy_file_range` or a CRC faster than zlib's. Split by columns, the JavaScript path also places every share's rows into the output block on the main thread (1 GiB copied in 4 KiB runs): timed inside the run, 0.21–0.28 s of its 0.98–1.17 s; a test build that skipped the placing (so wrong bytes) took 0.71–0.85 s, still 2.7–3.2× `cp`, so reading each share straight into place (as the native module's `readRuns` does) would not reach 2.5× either. Tried and dropped: reads two chunks ahead (rings of 4–8 buffers, the CRC allowed to lag 2–3 chunks) 0.58–0.77 s; 8 MiB chunks 1.1–1.6 s (three times the system time); 0.5–1 MiB chunks 0.62–0.93 s (more user time).",
    "- The Fortran repack reads one short run per column; from a file it reads synchronously (`readIntoSync`) into 16 MiB slabs. A deflated Fortran-order member is inflated once into a scratch file and repacked from there. Its Python baseline needs `np.ascontiguousarray`: `safetensors.numpy.save_file` writes an array's memory as it lies, so a Fortran-order array would come out transposed under its C-order shape.",
  );
  if (kernels.length > 0) lines.push(KERNEL_NOTE(kernels));
  lines.push("", "Raw times (seconds, in run order):", "");
  for (const { c, summary, date, runs, state, memory, machine, primeBytes } of rows)
    lines.push(
      `- ${c.name}, ${state} (${date}, ${runs} runs${machine ? `, ${machine}` : ""}${memory ? `; ${memory}` : ""}${primeBytes ? `; each run primed with ${fmt(mib(primeBytes), 0)} MiB` : ""}): ${Object.entries(
        summary,
      )
        .map(([v, s]) => `${v === "ours" ? "st-convert" : v === "start" ? "node -e 0" : LABELS[v]} [${s.all.map((x) => x.toFixed(2)).join(", ")}]`)
        .join("; ")}`,
    );
  for (const { name, state, date, reps, machine, memory, ours, ggml, values: count } of kernels) {
    const all = (xs) => `[${xs.map((x) => x.toFixed(1)).join(", ")}]`;
    const parts = ["quantize", "dequantize"]
      .filter((op) => ours[op] !== undefined)
      .map((op) => `${op}: ours ${all(ours[op].all)}, ggml's C ${all(ggml[op].all)}`);
    lines.push(
      `- ${KERNEL_GROUP}, ${name}, ${state} (${date}, ${reps} runs${machine ? `, ${machine}` : ""}${memory ? `; ${memory}` : ""}), CPU ms for ${fmtCount(count)} values: ${parts.join("; ")}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

// ---- many small tensors --------------------------------------------------------------------

/**
 * The many-small-tensors section: N F32[2] tensors (8 bytes each) in each format, converted to
 * safetensors and back and listed with `info`, beside the Python code that does the same work
 * (bench/reference.py `small-*`). Per-tensor costs dominate: the figure is µs per tensor.
 * `folder`: the npy form is a folder of one .npy per tensor, converted by the batch command into
 * (or from) a folder of one .safetensors per tensor.
 */
const MANY_FORMATS = [
  { format: "safetensors", input: "many.safetensors", kind: "small-safetensors" },
  { format: "npz", input: "many.npz", kind: "small-npz" },
  { format: "flax", input: "many.msgpack", kind: "small-flax" },
  { format: "json", input: "many.json", kind: "small-json" },
  { format: "npy", input: "npy", kind: "small-npy-folder", folder: true },
];
const MANY_PY_LABELS = {
  "small-st2st": "load_file + save_file",
  "small-npz2st": "np.load(npz), every array + save_file",
  "small-st2npz": "load_file + np.savez",
  "small-flax2st": "msgpack_restore + flatten + save_file",
  "small-st2flax": "load_file + unflatten + msgpack_serialize",
  "small-json2st": "json.load + np.array each + save_file",
  "small-st2json": "load_file + json.dump(tolist() each)",
  "small-npy2st": "np.load + save_file, file by file",
  "small-st2npy": "load_file + np.save, file by file",
  "small-info-safetensors": "safe_open: keys, dtypes, shapes",
  "small-info-npz": "np.load(npz): every array's dtype and shape",
  "small-info-flax": "msgpack_restore + flatten",
  "small-info-json": "json.load",
};

/** The section's rows for `count` tensors: each X → safetensors, safetensors → X and info X. */
function manyRows(count) {
  const rows = [];
  for (const f of MANY_FORMATS) {
    const name = f.folder ? "a folder of .npy → a folder of .safetensors (batch)" : `${f.format} → safetensors`;
    const py = `small-${f.format === "safetensors" ? "st" : f.format}2st`;
    rows.push({ name, input: f, output: f.folder ? "out-st" : "out.safetensors", to: "safetensors", py });
  }
  for (const f of MANY_FORMATS.filter((f) => f.format !== "safetensors")) {
    const input = f.folder ? { format: "safetensors", input: "st", kind: "small-safetensors-folder", folder: true } : MANY_FORMATS[0];
    const output = f.folder ? "out-npy" : `out${extensionOf(f.input)}`;
    // Python's json.dump spaces and spells numbers its own way: the same tensors, other bytes.
    const compare = f.format !== "json";
    rows.push({
      name: f.folder ? "a folder of .safetensors → a folder of .npy (batch)" : `safetensors → ${f.format}`,
      input,
      output,
      to: f.format,
      py: `small-st2${f.format}`,
      compare,
    });
  }
  for (const f of MANY_FORMATS.filter((f) => !f.folder)) rows.push({ name: `info ${f.format}`, input: f, info: true, py: `small-info-${f.format}` });
  return rows.map((r) => ({ ...r, count }));
}

function extensionOf(file) {
  return file.slice(file.lastIndexOf("."));
}

function manyCommand(variant, row, input, output) {
  if (variant === "ours") {
    if (row.info) return [process.execPath, [cli, "info", input]];
    if (row.input.folder) return [process.execPath, [cli, input, "--out-dir", output, "--to", row.to, "--force", "--quiet"]];
    return [process.execPath, [cli, input, output, "--force", "--quiet"]];
  }
  return [python, [join(root, "bench", "reference.py"), "run", row.py, input, output]];
}

/** SHA-256 of a file, or of a folder's files by name. */
function shaOfOutput(path) {
  if (!statSync(path).isDirectory()) return sha(path);
  const hash = createHash("sha256");
  for (const name of readdirSync(path).sort()) hash.update(`${name}\0${sha(join(path, name))}\n`);
  return hash.digest("hex");
}

function* runManySection(counts, folderCounts) {
  for (const count of [...new Set([...counts, ...folderCounts])].sort((a, b) => a - b)) {
    const dir = join(work, `many-${count}`);
    mkdirSync(dir, { recursive: true });
    const inputs = new Map();
    /** Each input once per count, made by the reference tools. */
    const inputFor = (f) => {
      if (!inputs.has(f.kind)) {
        const path = join(dir, f.input);
        console.log(`bench: making ${count} tensors as ${f.kind} …`);
        const run = spawnSync(python, [join(root, "bench", "reference.py"), "gen", f.kind, path, String(count)], { encoding: "utf8" });
        if (run.status !== 0) throw new Error(`making ${f.input} failed:\n${run.stderr}`);
        inputs.set(f.kind, path);
      }
      return inputs.get(f.kind);
    };
    const wanted = (r) =>
      (r.input.folder ? folderCounts : counts).includes(count) && (values["many-rows"] === undefined || r.name.includes(values["many-rows"]));
    for (const row of manyRows(count).filter(wanted)) {
      if (!hasFormat(row.input.format) || (row.to !== undefined && !hasFormat(row.to))) {
        console.warn(`bench: skipping "${row.name}": a format is not registered`);
        continue;
      }
      console.log(`bench: ${count.toLocaleString("en")} small tensors, ${row.name} …`);
      let result;
      try {
        result = timeManyRow(row, inputFor(row.input), dir);
      } catch (error) {
        // One failing row (a command that crashes at this count) leaves the others' figures.
        const lines = error.message.split("\n");
        const message = lines.find((line) => line.startsWith("st-convert:")) ?? lines[0];
        console.warn(`bench: ${row.name} at ${count} failed: ${message}`);
        result = { row, failed: message, date: today(), runs };
      }
      yield result;
    }
    putAside(dir);
  }
  rmSync(join(work, "set-aside"), { recursive: true, force: true });
}

/**
 * Where the many section's outputs go instead of being deleted between runs. ext4 skips inodes
 * freed in the last minute or more when it allocates new ones, so the first run that creates
 * thousands of files after thousands were deleted takes several times as long (measured: 20,000
 * files in 0.5 s, or in 5-8 s right after 20,000 others were deleted, sync and a 15 s wait
 * included). Set aside, outputs free nothing until the section ends, and every run starts alike.
 */
let setAside = 0;
function putAside(path) {
  if (!existsSync(path)) return;
  const trash = join(work, "set-aside");
  mkdirSync(trash, { recursive: true });
  renameSync(path, join(trash, String(setAside++)));
}

/**
 * Rows of at least this many tensors get no warm-up runs: a run of 500,000 files takes a minute,
 * its input was just made (so it is in the page cache), and each run leaves 500,000 more files.
 */
const NO_WARM_UP_FROM = 200_000;

/**
 * One row of the section: interleaved runs of st-convert and its Python equivalent, then the
 * outputs of the last run of each compared.
 */
function timeManyRow(row, input, dir) {
  const outputs = { ours: join(dir, row.output ?? "unused"), py: join(dir, `theirs-${row.output ?? "unused"}`) };
  const variants = ["ours", "py"];
  const times = { ours: [], py: [] };
  const compare = !row.info && row.compare !== false;
  const runVariant = (variant, last = false) => {
    const run = measureAfterSync(...manyCommand(variant, row, input, outputs[variant]));
    // The last run's output stays to be compared.
    if (!(last && compare)) putAside(outputs[variant]);
    return run;
  };
  if (row.count < NO_WARM_UP_FROM) for (const variant of variants) runVariant(variant);
  for (let r = 0; r < runs; r++) {
    for (let k = 0; k < variants.length; k++) {
      const variant = variants[(k + r) % variants.length];
      times[variant].push(runVariant(variant, r === runs - 1));
    }
  }
  let identical;
  if (compare) {
    identical = shaOfOutput(outputs.py) === shaOfOutput(outputs.ours);
    putAside(outputs.py);
    putAside(outputs.ours);
  }
  const summary = Object.fromEntries(
    Object.entries(times).map(([v, xs]) => [
      v,
      { seconds: median(xs.map((x) => x.seconds)), rssMiB: median(xs.map((x) => x.rssMiB)), all: xs.map((x) => x.seconds) },
    ]),
  );
  console.log(
    `  st-convert ${fmt(summary.ours.seconds)} s, ${fmt(summary.ours.rssMiB, 0)} MiB; Python ${fmt(summary.py.seconds)} s, ${fmt(summary.py.rssMiB, 0)} MiB; identical: ${identical}`,
  );
  return { row, summary, identical, date: today(), runs };
}

function manyReport(results) {
  if (results.length === 0) return [];
  const lines = [
    "",
    "## Many small tensors",
    "",
    "Checkpoints of N tensors of F32[2] (8 bytes each: 400 KB of data at 50,000), where per-tensor costs are everything. Each row beside the Python code that does the same work, every array touched (bench/reference.py `small-*`); process start included. The npy form is a folder of one `.npy` per tensor, converted by the batch command (`--out-dir`, 2 jobs) into or from a folder of one `.safetensors` per tensor; the Python code goes file by file. Each run's output is set aside (renamed), not deleted, until the section ends: ext4 passes over inodes freed in the last minute or more when it allocates, so the first run to create thousands of files after thousands were deleted takes several times as long (20,000 files: 0.5 s, or 5 to 8 s just after 20,000 others were deleted, with `sync` and a 15 s wait), and whichever tool ran first would pay for the deletion of the last run's output. Each row starts with a warm-up run of each tool (none from 200,000 tensors: such a run takes a minute and its input was just made), and the outputs compared are those of the last timed run of each.",
    "",
    "| path | tensors | st-convert | µs per tensor | peak RSS | Python | Python time (peak RSS) | ratio | same output |",
    "|---|---|---|---|---|---|---|---|---|",
  ];
  for (const { row, summary, identical, failed } of results) {
    if (failed !== undefined) {
      lines.push(`| ${row.name} | ${row.count.toLocaleString("en")} | failed: ${failed.replaceAll("|", "\\|")} | | | ${MANY_PY_LABELS[row.py]} | | | |`);
      continue;
    }
    const ours = summary.ours;
    const py = summary.py;
    lines.push(
      `| ${row.name} | ${row.count.toLocaleString("en")} | ${fmt(ours.seconds)} s | ${fmt((ours.seconds / row.count) * 1e6, 1)} | ${fmt(ours.rssMiB, 0)} MiB | ${MANY_PY_LABELS[row.py]} | ${fmt(py.seconds)} s (${fmt(py.rssMiB, 0)} MiB) | ${fmt(ours.seconds / py.seconds)} | ${identical === undefined ? "n/a" : identical ? "yes" : "no"} |`,
    );
  }
  lines.push("", "Raw times (seconds, in run order):", "");
  for (const { row, summary, date, runs, machine } of results.filter((r) => r.failed === undefined))
    lines.push(
      `- ${row.count.toLocaleString("en")}, ${row.name} (${date}, ${runs} runs, ${row.state ?? "as found"}${machine ? `, ${machine}` : ""}): st-convert [${summary.ours.all.map((x) => x.toFixed(2)).join(", ")}]; Python [${summary.py.all.map((x) => x.toFixed(2)).join(", ")}]`,
    );
  return lines;
}

// ---- block-type kernels against ggml's C ----------------------------------------------------

/** The group's name: `--only` picks it by any part of it ("kernels"). Its rows are `${KERNEL_GROUP}: TYPE`. */
const KERNEL_GROUP = "block-type kernels against ggml's C";
/**
 * The types we quantize that ggml's C quantizes without an importance matrix (`canQuantize`, less
 * none: ggml requires one only for IQ2_XXS, IQ2_XS and IQ1_S, which we do not make). Issue 40's
 * seven first.
 */
const KERNEL_TYPES = ["Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4"];
/** Goals as largest ratios ours / ggml's C, by "TYPE operation" (issue 40: Q4_K within 2× of ggml's C on one thread). */
const KERNEL_TARGETS = { "Q4_K quantize": 2 };
/** MiB of F32 values each type is given (bench/gguf-quants.mjs `testValues`), and the timed runs of each kernel. */
const KERNEL_MIB = 16;
const KERNEL_REPS = 9;

const kernelRow = (type) => `${KERNEL_GROUP}: ${type}`;
const fmtCount = (n) => n.toLocaleString("en");

/**
 * The group's rows, one a type: bench/gguf-quants.mjs's (`quants`) `compareKernels` on the same
 * values for ours and ggml's C, medians of KERNEL_REPS runs.
 */
function runKernels(quants, types) {
  const { compareKernels, ggmlVersion, testValues } = quants;
  const version = ggmlVersion();
  const values = testValues(KERNEL_MIB);
  const summary = (xs) => (xs === undefined ? undefined : { ms: median(xs), all: xs });
  const rows = [];
  for (const type of types) {
    console.log(`bench: ${kernelRow(type)} …`);
    const r = compareKernels(type, values, KERNEL_REPS);
    const row = {
      name: type,
      values: r.values,
      reps: r.reps,
      ours: { quantize: summary(r.ours.quantize), dequantize: summary(r.ours.dequantize) },
      ggml: { quantize: summary(r.ggml.quantize), dequantize: summary(r.ggml.dequantize) },
      sameBlocks: r.sameBlocks,
      sameValues: r.sameValues,
      ggmlVersion: version,
      date: today(),
    };
    const perM = (x) => fmt((x * 1e6) / r.values);
    console.log(
      `  quantize ${perM(row.ours.quantize.ms)} against ${perM(row.ggml.quantize.ms)} ms per million values (${fmt(row.ours.quantize.ms / row.ggml.quantize.ms)}×), dequantize ${perM(row.ours.dequantize.ms)} against ${perM(row.ggml.dequantize.ms)} (${fmt(row.ours.dequantize.ms / row.ggml.dequantize.ms)}×); same blocks: ${row.sameBlocks}, same F32: ${row.sameValues}`,
    );
    rows.push(row);
  }
  return rows;
}

/** A state's table of the group (empty without rows). */
function kernelTable(rows) {
  if (rows.length === 0) return [];
  const counts = [...new Set(rows.map((r) => r.values))];
  const lines = [
    "",
    `### Block-type kernels against ggml's C, one thread (\`--only kernels\`)`,
    "",
    `CPU time (user + system) per million values, ours against ggml's C on the same ${counts.map(fmtCount).join(" or ")} F32 values (${KERNEL_MIB} MiB, weight-like: uniform with a scale varying every 256), medians of ${[...new Set(rows.map((r) => r.reps))].join(" or ")} alternating runs of each side (after untimed ones); ratio = ours / ggml's C. Same bytes: ggml's blocks are ours byte for byte (quantize), and ours and ggml's C dequantize ggml's blocks to the same F32 bits (dequantize). What ran: see "Reading these figures".`,
    "",
    "| type | operation | ours, ms per million values | ggml's C | ratio | target | met | same bytes as ggml's C |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    for (const op of ["quantize", "dequantize"]) {
      const ours = r.ours[op];
      const theirs = r.ggml[op];
      if (ours === undefined || theirs === undefined) continue;
      const perM = (x) => fmt((x * 1e6) / r.values);
      const ratio = ours.ms / theirs.ms;
      const goal = KERNEL_TARGETS[`${r.name} ${op}`];
      const same = op === "quantize" ? r.sameBlocks : r.sameValues;
      lines.push(
        `| ${op === "quantize" ? r.name : ""} | ${op} | ${perM(ours.ms)} | ${perM(theirs.ms)} | ${fmt(ratio)} | ${goal === undefined ? "—" : `≤ ${goal}× ggml's C (one thread)`} | ${goal === undefined ? "—" : ratio <= goal ? "yes" : "**no**"} | ${same === undefined ? "n/a" : same ? (op === "quantize" ? "yes" : "yes (F32 bits)") : "**no**"} |`,
      );
    }
  }
  return lines;
}

/** The line of "Reading these figures" on what the group ran. */
function KERNEL_NOTE(rows) {
  const versions = [...new Set(rows.map((r) => r.ggmlVersion).filter(Boolean))];
  return `- Block-type kernels against ggml's C (a table in each state): ours are @st-convert/gguf's \`quantizeRows\` and \`dequantizeRows\` as the CLI runs them (WebAssembly where the package has a kernel for it, JavaScript elsewhere), called on the bench's main thread (bench/gguf-quants.mjs); ggml's C is libggml-base${versions.length > 0 ? ` ${versions.join(", ")}` : ""} built by scripts/ggml-oracle.sh from ../shared/oracles with its default flags: CMake's Release \`-O3 -DNDEBUG\` (GCC 12.2 here) and \`GGML_NATIVE=OFF\`, so no \`-march=native\`, the x86-64 baseline (SSE2, whatever the compiler vectorizes) and no AVX, FMA or F16C (ggml's \`GGML_AVX2\` and the like pick ggml-cpu's kernels, not libggml-base's). Its \`ggml_quantize_chunk\` without an importance matrix and the type's \`to_float\` are ggml-quants.c's reference C, called through ctypes from python3 (fixtures/reference_ggml.py), on this machine, one thread each, in alternating runs (one of ours, then one of ggml's in a process of its own, its CPU time taken inside it) after untimed ones, so that the machine's drift falls on both alike (before 2026-12-07's afternoon the two sides ran one after the other, and ggml's Q4_K quantization took 66–84 ms per million values from one run of the group to the next).`;
}

// ---- machine states ------------------------------------------------------------------------

/**
 * The machine states a row is measured in. Shared machines drift: after hours of work the page
 * cache holds pages scattered all over memory and free memory is in small pieces, which makes the
 * kernel's page-cache allocations for big writes slower. Each row makes its state first, so that
 * its figures do not depend on what ran before it.
 */
const STATES = ["fresh", "aged"];
/**
 * The aged state: AGED_FILES files written round-robin in AGED_PIECE pieces, AGED_BYTES in all
 * (60 % of memory, at most 16 GiB), then all but one deleted. What stays is a sixteenth of it in
 * page cache, one piece in every AGED_FILES, so that free memory is plentiful but in pieces
 * smaller than 1 MiB, as on a machine after hours of work (the state issue 16 measured: a few GB
 * of page cache, most memory free, big writes 2–7× slower).
 */
const AGED_FILES = 16;
const AGED_PIECE = 64 * 1024;
const AGED_BYTES = Math.min(16 * 1024 ** 3, Math.floor((totalmem() * 0.6) / (AGED_PIECE * AGED_FILES)) * AGED_PIECE * AGED_FILES);
const agedDir = join(work, "aged");

/** Writes `value` to a /proc/sys file; false when not allowed (not root). */
function writeProc(path, value) {
  try {
    writeFileSync(path, value);
    return true;
  } catch {
    return false;
  }
}

/** Free memory from /proc/buddyinfo: total and in blocks of 2 MiB or more (what a large folio needs), in MiB. */
function freeMemory() {
  let total = 0;
  let large = 0;
  for (const line of readFileSync("/proc/buddyinfo", "utf8").split("\n")) {
    const counts = line.split(/\s+/).slice(4).filter(Boolean).map(Number);
    counts.forEach((n, order) => {
      const mibs = (n * 4 * 2 ** order) / 1024;
      total += mibs;
      if (order >= 9) large += mibs;
    });
  }
  return `free memory ${fmt(total / 1024, 1)} GiB, ${fmt(large / 1024, 1)} GiB of it in blocks of 2 MiB or more`;
}

/** Makes `state` (see {@link STATES}) and returns a line on free memory once it is made. */
function enterState(state) {
  spawnSync("sync");
  const fresh = writeProc("/proc/sys/vm/drop_caches", "3") && writeProc("/proc/sys/vm/compact_memory", "1");
  if (!fresh) console.warn("bench: cannot drop the page cache or compact memory (not root): the state is as found");
  if (state === "aged") {
    mkdirSync(agedDir, { recursive: true });
    const piece = Buffer.alloc(AGED_PIECE, 0x5a);
    const fds = Array.from({ length: AGED_FILES }, (_, i) => openSync(join(agedDir, `piece-${i}`), "w"));
    try {
      for (let written = 0; written < AGED_BYTES; written += AGED_PIECE * AGED_FILES) for (const fd of fds) writeSync(fd, piece);
    } finally {
      for (const fd of fds) closeSync(fd);
    }
    spawnSync("sync");
    for (let i = 1; i < AGED_FILES; i++) rmSync(join(agedDir, `piece-${i}`));
  }
  return freeMemory();
}

/** Undoes {@link enterState}: the aged state's pinned file is removed. */
function leaveState() {
  rmSync(agedDir, { recursive: true, force: true });
}

// ---- stored figures ------------------------------------------------------------------------

/** Where the big-input section keeps a row of a state in bench/results.json. */
function bigKey(state, name) {
  return state === "fresh" ? name : `${state}: ${name}`;
}

/** bench/results.json: every row's figures from the run that last measured it. */
function loadResults() {
  const empty = { cases: {}, many: {}, big: {} };
  if (!existsSync(resultsFile)) return empty;
  return { ...empty, ...JSON.parse(readFileSync(resultsFile, "utf8")) };
}

function saveResults(results) {
  writeFileSync(resultsFile, `${JSON.stringify(results, null, 1)}\n`);
}

/** The page from the stored figures, rows in the order of the tables above (rows of removed cases dropped). */
function renderStored(results) {
  const rows = STATES.flatMap((state) =>
    cases.filter((c) => results.cases[state]?.[c.name] !== undefined).map((c) => ({ c, ...results.cases[state][c.name] })),
  );
  // Keyed by the row's name in the fresh state (as before the aged state was measured here too), else "aged: name".
  const big = STATES.flatMap((state) =>
    cases.map((c) => results.big[bigKey(state, c.name)]).filter((row) => row !== undefined && (row.state ?? "fresh") === state),
  );
  const order = (key) => {
    const [count, ...name] = key.split(" ");
    const index = manyRows(Number(count)).findIndex((r) => r.name === name.join(" "));
    return [Number(count), index];
  };
  const many = Object.keys(results.many)
    .filter((key) => order(key)[1] >= 0)
    .sort((a, b) => order(a)[0] - order(b)[0] || order(a)[1] - order(b)[1])
    .map((key) => results.many[key]);
  const kernels = STATES.flatMap((state) =>
    KERNEL_TYPES.map((type) => results.cases[state]?.[kernelRow(type)]).filter((row) => row !== undefined && row.state === state),
  );
  return report(rows, big, many, kernels);
}

// ---- the run ------------------------------------------------------------------------------

mkdirSync(work, { recursive: true });
if (python === undefined) console.warn("bench: no reference Python; inputs cannot be made (create .venv-ref as the README says)");
// --big-only: only the big-input section, for the rows --only picks.
const selected = values["big-only"] ? [] : cases.filter((c) => chosen(c.name) && hasFormat(c.format));
for (const c of cases.filter((c) => !hasFormat(c.format))) console.warn(`bench: skipping "${c.name}": format ${c.format} is not registered`);
const stored = loadResults();
const states = values.state.split(",");
for (const state of states) if (!STATES.includes(state)) throw new Error(`--state ${state}: expected ${STATES.join(" or ")}`);
for (const state of states) {
  for (const c of selected) {
    console.log(`bench: ${c.name}, ${state} state …`);
    const memory = enterState(state);
    let row;
    try {
      row = runCase(c, state);
    } catch (error) {
      // One failing row leaves the others' figures (and says why it has none).
      console.warn(`bench: ${c.name}, ${state} state, failed: ${error.message.split("\n").slice(0, 3).join(" ")}`);
      continue;
    } finally {
      leaveState();
    }
    const { c: _, ...figures } = row;
    stored.cases[state] = { ...stored.cases[state], [c.name]: { ...figures, state, memory, machine } };
    saveResults(stored);
    console.log(
      `  st-convert ${fmt(row.summary.ours.seconds)} s, ${fmt(row.summary.ours.rssMiB, 0)} MiB; ${c.baselines.map((b) => `${LABELS[b]} ${fmt(row.summary[b]?.seconds)} s`).join("; ")}; identical: ${row.identical}; ${memory}`,
    );
  }
}
// The block-type kernels against ggml's C: the group once in each state (made once for the group),
// skipped without ggml's library.
let kernelTypes = values["big-only"] ? [] : KERNEL_TYPES.filter((type) => chosen(kernelRow(type)));
const quants = kernelTypes.length > 0 ? await import("./gguf-quants.mjs") : undefined;
if (quants !== undefined && !quants.hasGgml()) {
  console.warn(`bench: skipping the ${KERNEL_GROUP}: no ggml library at ${quants.ggmlLibrary} (scripts/ggml-oracle.sh builds it, or set ST_CONVERT_GGML_LIB)`);
  kernelTypes = [];
}
for (const state of kernelTypes.length > 0 ? states : []) {
  console.log(`bench: ${KERNEL_GROUP}, ${state} state …`);
  const memory = enterState(state);
  let rows;
  try {
    rows = runKernels(quants, kernelTypes);
  } catch (error) {
    console.warn(`bench: ${KERNEL_GROUP}, ${state} state, failed: ${error.message.split("\n").slice(0, 3).join(" ")}`);
  } finally {
    leaveState();
  }
  if (rows === undefined) continue;
  for (const row of rows) stored.cases[state] = { ...stored.cases[state], [kernelRow(row.name)]: { ...row, state, memory, machine } };
  saveResults(stored);
}
const wantsMany = !values["big-only"] && (values.only === undefined || values.only.split("|").some((part) => "many small tensors".includes(part)));
const manyCounts = values.many.split(",").map(Number);
if (wantsMany && python !== undefined) {
  enterState(states[0]);
  for (const result of runManySection(manyCounts, values["many-folders"]?.split(",").map(Number) ?? manyCounts)) {
    stored.many[`${result.row.count} ${result.row.name}`] = { ...result, machine, row: { ...result.row, state: states[0] } };
    // Row by row: an interrupted run keeps what it measured (removing the section's files at its
    // end takes minutes at 500,000 files a run).
    saveResults(stored);
    writeFileSync(resolve(root, values.out), renderStored(stored));
  }
  leaveState();
}
// Written before the long big-file runs too, so that an interrupted run still leaves its figures.
writeFileSync(resolve(root, values.out), renderStored(stored));
if (values.big !== undefined) {
  for (const state of states) {
    enterState(state);
    for (const row of bigRss(parseSize(values.big))) stored.big[bigKey(state, row.name)] = { ...row, state, machine };
    leaveState();
    saveResults(stored);
    writeFileSync(resolve(root, values.out), renderStored(stored));
  }
}
rmSync(work, { recursive: true, force: true });
writeFileSync(resolve(root, values.out), renderStored(stored));
console.log(`bench: wrote ${values.out} (figures in ${relative(root, resultsFile)})`);

/** A row converting a 4-rank DCP checkpoint split by `split` to safetensors, against `cp` (target `cpRatio`) and torch. */
function dcpRow(split, cpRatio) {
  return {
    name: `DCP 4 ranks, split by ${split} → safetensors`,
    kind: `dcp-${split}`,
    input: "ckpt",
    output: "out.safetensors",
    format: "dcp",
    baselines: ["cp", "py:dcp2st"],
    reference: "dcp2st",
    compare: "tensors",
    target: [
      ["cp", cpRatio],
      ["py:dcp2st", 0.25],
    ],
    peakMB: 256,
    big: false,
  };
}
