/**
 * Batch conversion: many inputs (files or folders, searched recursively) into one output folder,
 * keeping the relative layout. Every file is attempted; the summary says what was converted,
 * skipped and failed, and why.
 */
import { type Stats, closeSync, openSync, writeSync } from "node:fs";
import { mkdir, readdir, stat } from "node:fs/promises";
import { basename, dirname, join, normalize, resolve, sep } from "node:path";
import { StConvertError, type TensorFormat, compareCodePoints, isStConvertError } from "@st-convert/core";
import { type ConvertOptions, type ConvertResult, convertInto } from "./convert.js";
import { openFileSource, removeStaleTempFiles } from "@st-convert/core/node";
import { batchThreads, runInWorkers } from "./batchWorkers.js";
import { isRemoteInput } from "./remoteInput.js";
import { FORMATS, detectOutputFormat, matchExtension, readHead } from "./formats.js";
import { DEFAULT_JOBS } from "./cliOptions.js";
import { describeError } from "./report.js";

/** Options of {@link convertMany}: those of `convert()` plus where and how to write. */
export interface ConvertManyOptions extends Omit<ConvertOptions, "to" | "onProgress"> {
  /** The folder that receives the outputs (created if needed). */
  outDir: string;
  /** The output format's name, e.g. `"safetensors"`. */
  to: string;
  /**
   * Conversions run at once. Default 2. With 2 or more, a batch of at least 128 local files also
   * runs conversions in worker threads (up to one thread per job and per core, one per 64 files):
   * a small file's conversion is mostly JavaScript, so a folder of thousands is bound by one core.
   */
  jobs?: number;
  /** Plan and report, write nothing. Default false. */
  dryRun?: boolean;
  /** Receives what happens, as it happens. */
  onEvent?: (event: BatchEvent) => void;
  /**
   * Do only part `part` (1 to `of`) of the batch: the planned conversions, sorted by input in
   * code-point order, split into `of` runs of consecutive jobs whose sizes differ by at most one.
   * The `of` parts together are the whole batch, each job in exactly one (a Slurm array task or a
   * Kubernetes Indexed Job pod per part).
   */
  shard?: { part: number; of: number };
  /**
   * An output that exists and reads back whole (every tensor's bytes, with the format's checks) is
   * skipped, reported with its digest; one that does not (a half-written file of a killed run) is
   * converted again over it. Without it an existing output is skipped unless `force`. Default false.
   */
  skipExisting?: boolean;
  /**
   * Append one JSON line per input to this file as each finishes: `{input, output, status,
   * tensors, bytes, digest}` (`digest`: the checkpoint digest of the output's tensors, as `hash()`
   * gives it; null for a failure). Implies `digest`.
   */
  manifest?: string;
}

/** One planned conversion. */
export interface BatchJob {
  input: string;
  output: string;
}

/** What {@link convertMany} reports while it works. */
export type BatchEvent =
  | { type: "planned"; jobs: readonly BatchJob[] }
  /** `thread`: 0 for the main thread, 1 and up for a worker thread (see `jobs`). */
  | { type: "start"; job: BatchJob; index: number; thread: number }
  | { type: "progress"; job: BatchJob; done: number; total: number }
  | { type: "converted"; job: BatchJob; result: ConvertResult }
  /** A non-fatal notice during the job, naming its file (the input, the output or a shard). */
  | { type: "warning"; job: BatchJob; file: string; message: string }
  | { type: "skipped"; job: BatchJob; reason: string }
  | { type: "failed"; job: BatchJob; error: unknown; message: string }
  /** The job was under way when `signal` stopped the batch: nothing was written for it. */
  | { type: "interrupted"; job: BatchJob; message: string };

/** The outcome of a batch. `failed` is empty when everything attempted succeeded or was skipped. */
export interface BatchSummary {
  dryRun: boolean;
  /** Conversions done (in a dry run: the ones that would be done). */
  converted: (BatchJob & { inputFormat?: string; outputFormat?: string; tensors?: number; bytes?: number; digest?: string })[];
  skipped: (BatchJob & { reason: string })[];
  failed: (Partial<BatchJob> & { input: string; code: string; message: string })[];
  /** The output of each job skipped because it already read back whole (`skipExisting`), by output path. */
  whole: Map<string, WholeOutput>;
  /** Conversions under way when `signal` stopped the batch (not failures: nothing was wrong with them); nothing was written for them. */
  interrupted: (BatchJob & { message: string })[];
  /** Files found in folders whose extension is ambiguous (`.json`) and whose content is not a tensor file. */
  ignored: string[];
  /** True when a signal stopped the batch before every file was done (some interrupted, or never started). */
  stopped: boolean;
  /** Planned conversions a signal stopped before they started. */
  notStarted: number;
  /** The notices of every job, each naming its file. */
  warnings: { file: string; message: string }[];
}

export { DEFAULT_JOBS };

/**
 * Converts every input (a file, or a folder searched recursively for files of a known format)
 * into `outDir`, as `to`. Never throws for a single file's failure: it is in the summary.
 * @throws StConvertError `UnknownFormat` for an unknown or read-only `to`; `InvalidOption` for a bad
 *   `jobs` or an `outDir` that is a file.
 */
export async function convertMany(inputs: readonly string[], options: ConvertManyOptions): Promise<BatchSummary> {
  const formats = options.formats ?? FORMATS;
  // By name, refusing a format that can only be read.
  const to = detectOutputFormat(options.outDir, options.to, formats);
  const jobs = options.jobs ?? DEFAULT_JOBS;
  if (!Number.isInteger(jobs) || jobs < 1) throw new StConvertError("InvalidOption", `--jobs must be a whole number of at least 1, got ${jobs}`);
  const outDirInfo = await stat(options.outDir).catch(() => undefined);
  if (outDirInfo !== undefined && !outDirInfo.isDirectory()) {
    throw new StConvertError("InvalidOption", `--out-dir ${options.outDir} exists and is not a folder`);
  }
  const summary: BatchSummary = {
    dryRun: options.dryRun ?? false,
    converted: [],
    skipped: [],
    failed: [],
    whole: new Map(),
    interrupted: [],
    ignored: [],
    stopped: false,
    notStarted: 0,
    warnings: [],
  };
  if (options.manifest !== undefined) options = { ...options, digest: true };
  const manifest = options.manifest === undefined || options.dryRun === true ? undefined : await openManifest(options.manifest);
  try {
    return await runBatch(inputs, options, { to, formats, jobs, outDirInfo }, summary, manifest);
  } finally {
    await manifest?.close();
  }
}

/** The batch itself, once checked; `manifest` records each input as it finishes. */
async function runBatch(
  inputs: readonly string[],
  options: ConvertManyOptions,
  checked: { to: TensorFormat; formats: readonly TensorFormat[]; jobs: number; outDirInfo: Stats | undefined },
  summary: BatchSummary,
  manifest: Manifest | undefined,
): Promise<BatchSummary> {
  const { to, formats, jobs, outDirInfo } = checked;
  const emit = options.onEvent ?? (() => {});
  const plan = await planBatch(inputs, options.outDir, to, formats);
  const { planned, problems, unsupported } = options.shard === undefined ? plan : shardOf(plan, options.shard);
  const { ignored } = plan;
  summary.ignored.push(...ignored);
  // Files of a format st-convert does not convert, found in folders: skipped, saying what they are.
  for (const job of unsupported) {
    summary.skipped.push(job);
    emit({ type: "skipped", job: { input: job.input, output: job.output }, reason: job.reason });
  }
  for (const problem of problems) {
    summary.failed.push(problem);
    manifest?.record(
      { input: problem.input, output: problem.output ?? "" },
      { type: "failed", code: problem.code, message: problem.message, error: undefined },
    );
    emit({ type: "failed", job: { input: problem.input, output: problem.output ?? "" }, error: undefined, message: problem.message });
  }
  emit({ type: "planned", jobs: planned });
  // An output folder that did not exist holds no temporary file of an earlier run.
  if (options.dryRun !== true && outDirInfo !== undefined) {
    // Once for the whole batch (each output folder read once), not once per file.
    for (const stale of await removeStaleTempFiles(planned.map((job) => job.output)).catch(() => [])) {
      const message = `removed ${stale}, a temporary file left by an interrupted run`;
      summary.warnings.push({ file: stale, message });
      emit({ type: "warning", job: { input: stale, output: stale }, file: stale, message });
      options.onWarning?.(message, stale);
    }
  }

  const outcomes: (JobOutcome | undefined)[] = new Array(planned.length);
  const hooksFor = (index: number): JobHooks => ({
    progress: (done, total) => emit({ type: "progress", job: planned[index]!, done, total }),
    warning: (file, message) => {
      summary.warnings.push({ file, message });
      emit({ type: "warning", job: planned[index]!, file, message });
      options.onWarning?.(message, file);
    },
  });
  const settle = (index: number, outcome: JobOutcome): void => {
    const job = planned[index]!;
    outcomes[index] = outcome;
    manifest?.record(job, outcome);
    if (outcome.type === "converted") {
      if (outcome.result !== undefined) emit({ type: "converted", job, result: outcome.result });
    } else if (outcome.type === "skipped") emit({ type: "skipped", job, reason: outcome.reason });
    else if (outcome.type === "interrupted") emit({ type: "interrupted", job, message: outcome.message });
    else emit({ type: "failed", job, error: outcome.error, message: outcome.message });
  };
  // A folder the batch makes holds nothing but what the batch writes (each output planned once):
  // its outputs are not looked for before they are written.
  const outputsAbsent = outDirInfo === undefined;
  const threads = batchThreads(planned, options, jobs);
  const next = new Int32Array(new SharedArrayBuffer(4));
  const folders = new Set<string>();
  const loop = async (): Promise<void> => {
    for (let done = 0; ; done++) {
      if (done % JOBS_PER_TURN === JOBS_PER_TURN - 1) await eventLoopTurn();
      if (options.signal?.aborted === true) return;
      const index = Atomics.add(next, 0, 1);
      if (index >= planned.length) return;
      emit({ type: "start", job: planned[index]!, index, thread: 0 });
      settle(index, await attemptJob(planned[index]!, options, hooksFor(index), folders, outputsAbsent));
    }
  };
  const loops = Math.ceil(Math.min(jobs, Math.max(planned.length, 1)) / threads);
  await Promise.all([
    ...Array.from({ length: loops }, loop),
    ...(threads > 1
      ? [
          runInWorkers(threads - 1, loops, planned, next, options, outputsAbsent, {
            start: (index, thread) => emit({ type: "start", job: planned[index]!, index, thread }),
            hooksFor,
            settle,
            lost: (file, message) => {
              summary.warnings.push({ file, message });
              emit({ type: "warning", job: { input: file, output: file }, file, message });
              options.onWarning?.(message, file);
            },
          }),
        ]
      : []),
  ]);
  // In the order planned, whichever thread finished first.
  for (let index = 0; index < planned.length; index++) {
    const outcome = outcomes[index];
    const job = planned[index]!;
    if (outcome === undefined) continue;
    if (outcome.type === "converted") {
      const r = outcome.result;
      summary.converted.push(
        r === undefined
          ? { input: job.input, output: job.output }
          : {
              input: job.input,
              output: job.output,
              inputFormat: r.inputFormat,
              outputFormat: r.outputFormat,
              tensors: r.tensors,
              bytes: r.bytes,
              ...(r.digest === undefined ? {} : { digest: r.digest }),
            },
      );
    } else if (outcome.type === "skipped") {
      summary.skipped.push({ ...job, reason: outcome.reason });
      if (outcome.whole !== undefined) summary.whole.set(job.output, outcome.whole);
    } else if (outcome.type === "interrupted") summary.interrupted.push({ ...job, message: outcome.message });
    else summary.failed.push({ ...job, code: outcome.code, message: outcome.message });
  }
  // Stopped: a signal interrupted jobs or left them unattempted.
  summary.notStarted = outcomes.reduce((n, outcome) => n - (outcome === undefined ? 0 : 1), planned.length);
  summary.stopped = summary.interrupted.length > 0 || summary.notStarted > 0;
  return summary;
}

/**
 * Jobs a batch loop runs between two turns of the event loop. Small files are read and written
 * by synchronous calls, and their promises are settled ones: a loop of them never gave the event
 * loop a turn, so a signal handler (Ctrl-C) or a worker's abort message waited for the whole
 * batch (20,000 files ran to the end after SIGINT, and exited 0).
 */
export const JOBS_PER_TURN = 32;

/** Lets the event loop run once: timers, signal handlers, messages from other threads. */
export function eventLoopTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** What one conversion of a batch came to. `result` is undefined in a dry run. */
export type JobOutcome =
  | { type: "converted"; result: ConvertResult | undefined }
  | { type: "skipped"; reason: string; whole?: WholeOutput }
  | { type: "interrupted"; message: string }
  | { type: "failed"; code: string; message: string; error: unknown };

/** Where a conversion reports its progress and notices as it runs. */
export interface JobHooks {
  progress(done: number, total: number): void;
  warning(file: string, message: string): void;
}

/**
 * Runs one conversion of a batch; `folders` are the output folders made so far (each is made once,
 * not once per file); `outputAbsent` when the batch made `--out-dir` (see `convertInto`). Never
 * throws: a failure is an outcome.
 */
export async function attemptJob(
  job: BatchJob,
  options: ConvertManyOptions,
  hooks: JobHooks,
  folders: Set<string>,
  outputAbsent: boolean,
): Promise<JobOutcome> {
  const skipped = (reason = "the output exists (--force replaces it)"): JobOutcome => ({ type: "skipped", reason });
  if (options.dryRun === true) return options.force !== true && (await exists(job.output)) ? skipped() : { type: "converted", result: undefined };
  let force = options.force;
  if (options.skipExisting === true && force !== true && (await exists(job.output))) {
    const whole = await readsBackWhole(job.output, options);
    if (whole.ok) return { type: "skipped", reason: "already converted (the output reads back whole)", whole: whole.output };
    hooks.warning(job.output, `converted again: the existing output does not read back whole (${whole.reason})`);
    force = true;
  }
  try {
    const folder = dirname(job.output);
    if (!folders.has(folder)) {
      await mkdir(folder, { recursive: true });
      folders.add(folder);
    }
    const result = await convertInto(
      job.input,
      job.output,
      {
        ...options,
        force,
        to: options.to,
        onProgress: (done, total) => hooks.progress(done, total),
        removeStale: false,
        kernelThreads: 0,
        onWarning: (message, file) => hooks.warning(file, message),
      },
      outputAbsent,
    );
    return { type: "converted", result };
  } catch (error) {
    if (isStConvertError(error) && error.code === "OutputExists") return skipped();
    // Stopped by the batch's signal (Ctrl-C): the file is not at fault.
    if (options.signal?.aborted === true) return { type: "interrupted", message: `${job.output}: interrupted; the output was not written` };
    // A selection that keeps nothing of one file of a folder is not a failure of the batch: that
    // file has nothing the user asked for (a single conversion refuses instead).
    if (isStConvertError(error) && error.code === "NothingToWrite" && options.allowEmpty !== true) {
      return skipped(error.rule.replace(/ \(allow an empty output.*\)$/, "").replace(/; nothing to write$/, ""));
    }
    return { type: "failed", code: isStConvertError(error) ? error.code : "Internal", message: describeError(error), error };
  }
}

export { describeError };

/** An existing output that read back whole: its tensors, bytes and checkpoint digest. */
export interface WholeOutput {
  tensors: number;
  bytes: number;
  digest: string;
}

/** Whether `output` reads back whole, as the batch's output format with its options: every tensor's bytes hashed. */
async function readsBackWhole(output: string, options: ConvertManyOptions): Promise<{ ok: true; output: WholeOutput } | { ok: false; reason: string }> {
  try {
    const { hash } = await import("./hash.js");
    const found = await hash(output, { from: options.to, formats: options.formats, formatOptions: options.formatOptions });
    return { ok: true, output: { tensors: found.tensors.length, bytes: found.bytes, digest: found.digest } };
  } catch (error) {
    return { ok: false, reason: describeError(error) };
  }
}

/**
 * Part `part` of `of` of a plan: its jobs, planning failures and skipped files of formats
 * st-convert does not convert, together, sorted by input in code point order, cut into `of` runs
 * of consecutive entries (sizes differing by at most one), so that each input is reported by one
 * part only.
 * @throws StConvertError `InvalidOption` unless 1 ≤ part ≤ of.
 */
export function shardOf<P extends { planned: BatchJob[]; problems: BatchSummary["failed"]; unsupported: BatchSummary["skipped"] }>(
  plan: P,
  shard: { part: number; of: number },
): P {
  const { part, of } = shard;
  if (!Number.isInteger(part) || !Number.isInteger(of) || of < 1 || part < 1 || part > of) {
    throw new StConvertError("InvalidOption", `--shard ${part}/${of}: expected K/N with 1 <= K <= N`);
  }
  type Entry = { input: string; output: string; put: (into: P) => void };
  const all: Entry[] = [
    ...plan.planned.map((job) => ({ input: job.input, output: job.output, put: (into: P) => into.planned.push(job) })),
    ...plan.problems.map((problem) => ({ input: problem.input, output: problem.output ?? "", put: (into: P) => into.problems.push(problem) })),
    ...plan.unsupported.map((job) => ({ input: job.input, output: job.output, put: (into: P) => into.unsupported.push(job) })),
  ];
  all.sort((a, b) => compareCodePoints(a.input, b.input) || compareCodePoints(a.output, b.output));
  const mine: P = { ...plan, planned: [], problems: [], unsupported: [] };
  for (const entry of all.slice(Math.floor(((part - 1) * all.length) / of), Math.floor((part * all.length) / of))) entry.put(mine);
  return mine;
}

/** The manifest file: one JSON line per input, appended as each finishes, so a killed run keeps what it did. */
interface Manifest {
  record(job: BatchJob, outcome: JobOutcome): void;
  close(): Promise<void>;
}

async function openManifest(path: string): Promise<Manifest> {
  let fd: number;
  try {
    fd = openSync(path, "a");
  } catch (error) {
    throw new StConvertError("Io", `cannot open the manifest ${path}: ${(error as Error).message}`, { file: path, cause: error });
  }
  return {
    record(job, outcome) {
      const line =
        outcome.type === "converted"
          ? {
              input: job.input,
              output: job.output,
              status: "converted",
              tensors: outcome.result?.tensors ?? null,
              bytes: outcome.result?.bytes ?? null,
              digest: outcome.result?.digest ?? null,
            }
          : outcome.type === "skipped"
            ? {
                input: job.input,
                output: job.output,
                status: "skipped",
                tensors: outcome.whole?.tensors ?? null,
                bytes: outcome.whole?.bytes ?? null,
                digest: outcome.whole?.digest ?? null,
              }
            : { input: job.input, output: job.output || null, status: "failed", tensors: null, bytes: null, digest: null, error: outcome.message };
      // One write per line, in append mode: lines of parts run at once into one file never interleave.
      writeSync(fd, `${JSON.stringify(line)}\n`);
    },
    async close() {
      closeSync(fd);
    },
  };
}

/** The file name a URL input's output is named after: its path's last segment, decoded. */
function remoteFileName(input: string): string {
  const path = input.replace(/[?#].*$/, "");
  const last = path.slice(path.lastIndexOf("/") + 1);
  try {
    return basename(decodeURIComponent(last)) || "download";
  } catch {
    return last || "download";
  }
}

/**
 * Expands inputs into conversions: a folder gives every file below it whose extension names a
 * known format (hidden entries are skipped, and so is an output folder below the input folder; when
 * the output folder is the input folder, the files this run writes are not taken as inputs; symbolic links to folders
 * are not followed, which rules out cycles; a file of an ambiguous extension such as `.json` is
 * taken only if its content looks like that format, so `config.json` beside the weights is
 * ignored, not failed; a sharded checkpoint's index is left out, its shards being taken one by
 * one; a split set's later files (GGUF's `-0000k-of-0000N.gguf`, k > 1) are left out, the set
 * converting as one checkpoint through its first file); a file given by name is taken whatever its name and content. Outputs keep the
 * layout relative to the folder given, with the output format's extension.
 */
export async function planBatch(
  inputs: readonly string[],
  outDir: string,
  to: TensorFormat,
  formats: readonly TensorFormat[] = FORMATS,
): Promise<{ planned: BatchJob[]; problems: BatchSummary["failed"]; ignored: string[]; unsupported: BatchSummary["skipped"] }> {
  const planned: BatchJob[] = [];
  const ignored: string[] = [];
  const unsupported: BatchSummary["skipped"] = [];
  const problems: BatchSummary["failed"] = [];
  const outputs = new Map<string, string>();
  const outRoot = resolve(outDir);
  // A format whose checkpoints are folders (dcp) writes one folder per input, named after its stem.
  const outExtension = to.writeFolder !== undefined ? "" : (to.extensions[0] ?? `.${to.name}`);
  /** `key`: the output's absolute path; `inputKey`: the input's (each made once: a folder may hold thousands of files). */
  const add = (input: string, output: string, key: string, inputKey: string): void => {
    const first = outputs.get(key);
    if (first !== undefined) {
      problems.push({ input, output, code: "InvalidArgument", message: `${input}: converts to the same output as ${first} (${output}) [InvalidArgument]` });
      return;
    }
    if (key === inputKey) {
      problems.push({ input, output, code: "InvalidArgument", message: `${input}: the output would be the input itself [InvalidArgument]` });
      return;
    }
    outputs.set(key, input);
    planned.push({ input, output });
  };
  const addNamed = (input: string, name: string, inputKey: string): void => {
    const output = join(outDir, withExtension(name, matchExtension(name, formats)?.extension, outExtension));
    add(input, output, resolve(output), inputKey);
  };

  // Found in folders, with their outputs. Files named by the user are always taken.
  const found: Found[] = [];
  const walker: Walker = { formats, skip: undefined, outDir: childPrefix(outDir), outRoot: childPrefix(outRoot), outExtension, found };
  for (const input of inputs) {
    // A URL is one file, named after the last segment of its path (its query left out).
    if (isRemoteInput(input)) {
      addNamed(input, remoteFileName(input), input);
      continue;
    }
    let info: Stats;
    try {
      info = await stat(input);
    } catch {
      problems.push({ input, code: "Io", message: `${input}: no such file or directory [Io]` });
      continue;
    }
    if (!info.isDirectory()) {
      addNamed(input, basename(input), resolve(input));
      continue;
    }
    // An output folder inside the input folder is left out of the walk (earlier runs' outputs are
    // not inputs); when it is the input folder itself, only this run's own outputs are left out, below.
    const root = resolve(input);
    walker.skip = root === outRoot ? undefined : outRoot;
    await walk(walker, input, root, "");
  }
  const outputsOfRun = new Set(found.map((file) => file.outputKey));
  for (const job of planned) outputsOfRun.add(resolve(job.output));
  const foundKeys = new Set(found.map((file) => file.key));
  for (const file of found) {
    if (outputsOfRun.has(file.key)) continue;
    // A later file of a split set is read with its first, which converts the set; alone (the first
    // missing) it is taken, and refused saying why.
    const first = file.format.firstOfSet?.(basename(file.path));
    if (first !== undefined && foundKeys.has(join(dirname(file.key), first))) continue;
    // Only an ambiguous extension (.json, .pt) makes a file's first bytes worth reading here.
    const looks = file.format.ambiguousExtension === true ? await looksLikeItsFormat(file.path, file.format) : true;
    if (looks === true) add(file.path, file.output, file.outputKey, file.key);
    else if (looks === false) ignored.push(file.path);
    else unsupported.push({ input: file.path, output: file.output, reason: `${looks}; st-convert does not convert it` });
  }
  return { planned, problems, ignored, unsupported };
}

/** A file found in a folder: its path as shown, its absolute path, its format by extension, and its output. */
interface Found {
  path: string;
  key: string;
  format: TensorFormat;
  output: string;
  outputKey: string;
}

/** What a folder walk needs: the output folder as shown and absolute, each as a prefix (see {@link childPrefix}). */
interface Walker {
  formats: readonly TensorFormat[];
  /** An output folder inside the input folder being walked, left out (absolute). */
  skip: string | undefined;
  outDir: string;
  outRoot: string;
  outExtension: string;
  found: Found[];
}

/**
 * What `join(dir, name)` is for every name of a folder, as a prefix: the folder normalized once,
 * then only the name appended for each of its thousands of files (a name from `readdir` has no
 * separator, and hidden names, `.` and `..` among them, are never walked).
 */
function childPrefix(dir: string): string {
  const normal = normalize(dir);
  if (normal === ".") return "";
  return normal.endsWith(sep) ? normal : `${normal}${sep}`;
}

/** Adds the files below `dir` (shown as `dir`, absolute `key`, relative to the input folder `rel`) to `walker.found`, sorted by name. */
async function walk(walker: Walker, dir: string, key: string, rel: string): Promise<void> {
  if (key === walker.skip) return;
  const entries = await readdir(dir, { withFileTypes: true });
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const shown = childPrefix(dir);
  const absolute = childPrefix(key);
  for (const entry of entries) {
    const name = entry.name;
    if (name.startsWith(".")) continue;
    if (entry.isDirectory()) {
      await walk(walker, `${shown}${name}`, `${absolute}${name}`, `${rel}${name}${sep}`);
      continue;
    }
    if (!entry.isFile() && !entry.isSymbolicLink()) continue;
    const match = matchExtension(name, walker.formats);
    // A format whose files a walk takes (not an index, which is converted only when named).
    if (match === undefined || match.format.namedOnly === true) continue;
    const path = `${shown}${name}`;
    if (
      entry.isSymbolicLink() &&
      !(await stat(path).then(
        (s) => s.isFile(),
        () => false,
      ))
    )
      continue;
    const output = withExtension(`${rel}${name}`, match.extension, walker.outExtension);
    walker.found.push({ path, key: `${absolute}${name}`, format: match.format, output: `${walker.outDir}${output}`, outputKey: `${walker.outRoot}${output}` });
  }
}

/**
 * False for a file whose format's extension is ambiguous and whose first bytes are not that format;
 * what it is instead when it is a format st-convert does not convert (a TorchScript `.pt`).
 */
async function looksLikeItsFormat(path: string, format: TensorFormat): Promise<boolean | string> {
  if (format.ambiguousExtension !== true || format.sniff === undefined) return true;
  try {
    const source = await openFileSource(path);
    try {
      const head = await readHead(source);
      if (format.sniff(head)) return true;
      const { foreignFormat } = await import("./foreign.js");
      return (await foreignFormat(source, head)) ?? false;
    } finally {
      await source.close();
    }
  } catch {
    return true; // unreadable: let the conversion attempt report why
  }
}

/** `a/b.npz` → `a/b.safetensors`: the known input extension (`extension`) replaced, or the output's appended. */
function withExtension(path: string, extension: string | undefined, outExtension: string): string {
  const stem = extension === undefined ? path : path.slice(0, path.length - extension.length);
  return `${stem}${outExtension}`;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
