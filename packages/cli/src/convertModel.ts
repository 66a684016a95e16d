/**
 * A whole model folder into another: each checkpoint in it (a single file, or an index with its
 * shards) becomes the same checkpoint in the target format, named as the Hugging Face tools name
 * it (`pytorch_model-00001-of-00002.bin` → `model-00001-of-00002.safetensors`), sharded as the
 * source was unless `maxShardSize` says otherwise, with a rewritten index; the other files
 * (config.json, tokenizer files) are copied when asked. Everything is written into a staging
 * folder inside the output folder and moved into place only when all of it succeeded.
 */
import { copyFile, mkdir, readFile, readdir, rm, rmdir, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { MAX_INDEX_SIZE, StConvertError, type TensorEntry, type TensorFormat, isStConvertError, parseShardIndex } from "@st-convert/core";
import { openFileSource, replaceFile } from "@st-convert/core/node";
import { type ConvertOptions, convert, convertInto } from "./convert.js";
import { FORMATS, formatByExtension, formatByName, matchExtension, readHead, writableFormatNames } from "./formats.js";
import { type ShardPlan, shardName, shardable } from "./shards.js";
import { parameterCount } from "./text.js";
import { compileTransforms, renamedName } from "./transforms.js";

/** Options of {@link convertModel}: those of `convert()` (`to` required) plus what to do with the other files. */
export interface ConvertModelOptions extends ConvertOptions {
  to: string;
  /** Copy the files that are not checkpoints (config.json, tokenizer files, README). Default false: they are listed. */
  copyOtherFiles?: boolean;
}

/** One checkpoint of the folder and what became of it. */
export interface ModelCheckpoint {
  /** The single file or the index, in the input folder. */
  input: string;
  /** The single file or the index written. */
  output: string;
  /** Every file written for it (shards and index). */
  files: string[];
  tensors: number;
  bytes: number;
}

/** What {@link convertModel} did. */
export interface ModelResult {
  inputDir: string;
  outputDir: string;
  outputFormat: string;
  checkpoints: ModelCheckpoint[];
  /** Other files copied (with `copyOtherFiles`). */
  copied: string[];
  /** Other files left out (without `copyOtherFiles`). */
  notCopied: string[];
  warnings: { file: string; message: string }[];
}

/** The names the Hugging Face tools give a checkpoint, per format: `model.safetensors`, `pytorch_model.bin`. */
const HUB_STEMS: Readonly<Record<string, string>> = { safetensors: "model", torch: "pytorch_model", flax: "flax_model" };

const SHARD_SUFFIX = /-(\d{5})-of-(\d{5})$/;

/**
 * Converts every checkpoint of `inputDir` into `outputDir` (created if needed) as `options.to`.
 * @throws StConvertError `InvalidOption` when `inputDir` is not a folder or holds no checkpoint,
 *   `OutputExists` when an output is there and `force` is off, and the first conversion's error
 *   (nothing is then left in `outputDir`, and the folders this call created are removed again).
 */
export async function convertModel(inputDir: string, outputDir: string, options: ConvertModelOptions): Promise<ModelResult> {
  const formats = options.formats ?? FORMATS;
  const to = formatByName(options.to, formats, "write");
  if (to.readOnly === true) throw new StConvertError("UnknownFormat", `${to.name} can be read but not written; write one of ${writableFormatNames(formats)}`);
  if (to.writeFolder !== undefined) {
    throw new StConvertError(
      "InvalidOption",
      `${to.name} writes a folder per checkpoint: convert one checkpoint at a time (st-convert IN OUT_DIR --to ${to.name})`,
      {
        file: inputDir,
      },
    );
  }
  const layout = await readLayout(inputDir, formats);
  if (layout.singles.length === 0 && layout.indexes.length === 0) {
    const foreign = foreignFolder(layout.others);
    if (foreign !== undefined) {
      const { unsupportedFormat } = await import("./foreign.js");
      throw unsupportedFormat(foreign, inputDir, formats);
    }
    throw new StConvertError("InvalidOption", "the folder holds no checkpoint (no tensor file and no index)", { file: inputDir });
  }
  const result: ModelResult = { inputDir, outputDir, outputFormat: to.name, checkpoints: [], copied: [], notCopied: [], warnings: [] };
  const staging = join(outputDir, `.st-convert-staging-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  const warn = (message: string, file: string) => {
    // Files being written sit in the staging folder; users know them by where they will land.
    const shown = file.startsWith(`${staging}/`) ? join(outputDir, file.slice(staging.length + 1)) : file;
    result.warnings.push({ file: shown, message });
    options.onWarning?.(message, shown);
  };

  // Every name the output will hold, checked before anything is written.
  const plan: { run: (staging: string) => Promise<ModelCheckpoint>; names: string[] }[] = [];
  for (const index of layout.indexes) plan.push(planIndex(index, to, formats, options, warn));
  for (const single of layout.singles) plan.push(planSingle(single, inputDir, to, formats, options, warn));
  const copies = options.copyOtherFiles === true ? layout.others : [];
  result.notCopied = options.copyOtherFiles === true ? [] : layout.others.map((f) => join(inputDir, f));
  const targets = [...plan.flatMap((p) => p.names), ...copies];
  const clash = targets.find((name, i) => targets.indexOf(name) !== i);
  if (clash !== undefined) throw new StConvertError("InvalidArgument", `two checkpoints of the folder would both write ${clash}`, { file: inputDir });
  if (options.force !== true) {
    for (const name of targets) {
      if (await exists(join(outputDir, name)))
        throw new StConvertError("OutputExists", "the output exists; pass --force to replace it", { file: join(outputDir, name) });
    }
  }

  // The first folder this call creates (none when outputDir was there): removed again on failure.
  const created = await mkdir(outputDir, { recursive: true });
  let succeeded = false;
  await mkdir(staging);
  try {
    for (const step of plan) result.checkpoints.push(await step.run(staging));
    for (const name of copies) await copyFile(join(inputDir, name), join(staging, name));
    options.signal?.throwIfAborted();
    // Names that depended on a split are known only now: checked before anything is moved.
    const written = [...result.checkpoints.flatMap((c) => c.files), ...copies];
    if (options.force !== true) {
      for (const name of written) {
        if (await exists(join(outputDir, name)))
          throw new StConvertError("OutputExists", "the output exists; pass --force to replace it", { file: join(outputDir, name) });
      }
    }
    // With --force, a file there is swapped into staging (removed with it), not renamed over: see replaceFile.
    for (const name of written) replaceFile(join(staging, name), join(outputDir, name));
    succeeded = true;
  } finally {
    await rm(staging, { recursive: true, force: true });
    if (!succeeded && created !== undefined) await removeCreatedFolders(outputDir, created);
  }
  result.copied = copies.map((f) => join(outputDir, f));
  for (const checkpoint of result.checkpoints) {
    checkpoint.output = join(outputDir, checkpoint.output);
    checkpoint.files = checkpoint.files.map((f) => join(outputDir, f));
  }
  return result;
}

/** What a folder of no checkpoint is, by its files' names, when it is a TensorFlow model st-convert does not convert. */
function foreignFolder(files: readonly string[]): string | undefined {
  if (files.includes("saved_model.pb")) return "a TensorFlow SavedModel folder (saved_model.pb, variables/)";
  if (files.some((f) => /\.data-\d{5}-of-\d{5}$/.test(f))) return "a TensorFlow checkpoint folder (.index and .data-NNNNN-of-NNNNN files)";
  return undefined;
}

/**
 * Removes the folders `mkdir(outputDir, { recursive: true })` made, from `outputDir` up to `created`,
 * each only while it is empty (a folder is never taken away with anything in it).
 */
async function removeCreatedFolders(outputDir: string, created: string): Promise<void> {
  const last = resolve(created);
  for (let dir = resolve(outputDir); ; dir = dirname(dir)) {
    try {
      await rmdir(dir);
    } catch {
      return;
    }
    if (dir === last || dirname(dir) === dir) return;
  }
}

interface IndexCheckpoint {
  path: string;
  name: string;
  /** Shard file names (normalized: `./x` is `x`) in the order they first appear in `weight_map`. */
  shards: string[];
  weightMap: ReadonlyMap<string, string>;
}

interface Layout {
  indexes: IndexCheckpoint[];
  singles: string[];
  others: string[];
}

/** The folder's checkpoints (indexes and single files, shards belonging to their index) and other files. */
async function readLayout(dir: string, formats: readonly TensorFormat[]): Promise<Layout> {
  const info = await stat(dir).catch(() => undefined);
  if (info === undefined || !info.isDirectory()) throw new StConvertError("InvalidOption", "is not a folder", { file: dir });
  const entries = (await readdir(dir, { withFileTypes: true })).filter((e) => !e.name.startsWith(".") && (e.isFile() || e.isSymbolicLink()));
  const names = entries.map((e) => e.name).sort();
  const indexes: IndexCheckpoint[] = [];
  const sharded = new Set<string>();
  for (const name of names) {
    const format = formatByExtension(name, formats);
    if (format?.namedOnly !== true || !name.endsWith(".index.json")) continue;
    const path = join(dir, name);
    const info = await stat(path);
    // A FIFO would block the read below; an index, like its shards, must be a file.
    if (!info.isFile()) throw new StConvertError("Io", "is not a regular file; an index must be one", { file: path });
    if (info.size > MAX_INDEX_SIZE) throw new StConvertError("LimitExceeded", `the index is larger than ${MAX_INDEX_SIZE} bytes`, { file: path });
    // Judged as the index reader judges it (it reads the index again, with the shards).
    const parsed = parseShardIndex(await readFile(path), { file: path });
    for (const shard of parsed.shards) sharded.add(shard);
    indexes.push({ path, name, shards: [...parsed.shards], weightMap: parsed.weightMap });
  }
  const singles: string[] = [];
  const others: string[] = [];
  for (const name of names) {
    if (sharded.has(name) || indexes.some((i) => i.name === name)) continue;
    const format = formatByExtension(name, formats);
    if (format !== undefined && format.namedOnly !== true && (await looksLike(join(dir, name), format))) singles.push(name);
    else others.push(name);
  }
  return { indexes, singles, others };
}

/** False for a file of an ambiguous extension (`.json`) whose content is not that format (config.json). */
async function looksLike(path: string, format: TensorFormat): Promise<boolean> {
  if (format.ambiguousExtension !== true || format.sniff === undefined) return true;
  const source = await openFileSource(path);
  try {
    return format.sniff(await readHead(source));
  } finally {
    await source.close();
  }
}

/** `pytorch_model` (a torch checkpoint's Hub name) → `model` for safetensors; other stems stay. */
function targetStem(stem: string, from: TensorFormat | undefined, to: TensorFormat): string {
  if (from !== undefined && HUB_STEMS[from.name] === stem && HUB_STEMS[to.name] !== undefined) return HUB_STEMS[to.name]!;
  return stem;
}

/** A checkpoint file's name in the target format: `pytorch_model-00001-of-00002.bin` → `model-00001-of-00002.safetensors`. */
function targetName(name: string, formats: readonly TensorFormat[], to: TensorFormat): string {
  const match = matchExtension(name, formats);
  const stemWithSuffix = match === undefined ? name : name.slice(0, name.length - match.extension.length);
  const suffix = SHARD_SUFFIX.exec(stemWithSuffix)?.[0] ?? "";
  const stem = stemWithSuffix.slice(0, stemWithSuffix.length - suffix.length);
  return `${targetStem(stem, match?.format, to)}${suffix}${to.extensions[0] ?? `.${to.name}`}`;
}

function planSingle(
  name: string,
  dir: string,
  to: TensorFormat,
  formats: readonly TensorFormat[],
  options: ConvertModelOptions,
  warn: (message: string, file: string) => void,
): { run: (staging: string) => Promise<ModelCheckpoint>; names: string[] } {
  const output = targetName(name, formats, to);
  const sharding = options.maxShardSize !== undefined && shardable(to);
  return {
    // With a shard size, the names depend on the split: only the unsharded name is checked up front.
    names: sharding ? [] : [output],
    run: async (staging) => {
      const result = await convert(join(dir, name), join(staging, output), {
        ...checkpointOptions(options, warn),
        maxShardSize: sharding ? options.maxShardSize : undefined,
      });
      const files = result.files.map((f) => f.slice(staging.length + 1));
      return { input: join(dir, name), output: result.output.slice(staging.length + 1), files, tensors: result.tensors, bytes: result.bytes };
    },
  };
}

function planIndex(
  index: IndexCheckpoint,
  to: TensorFormat,
  formats: readonly TensorFormat[],
  options: ConvertModelOptions,
  warn: (message: string, file: string) => void,
): { run: (staging: string) => Promise<ModelCheckpoint>; names: string[] } {
  const weightsName = index.name.slice(0, -".index.json".length);
  const outWeights = targetName(weightsName, formats, to);
  // Resharding (a size given) or a target without a sharded form: the checkpoint goes through the index reader whole.
  if (options.maxShardSize !== undefined || !shardable(to)) {
    const output = shardable(to) ? `${outWeights}.index.json` : outWeights;
    return {
      names: shardable(to) ? [] : [output],
      run: async (staging) => {
        if (!shardable(to)) warn(`${to.name} has no sharded form: the shards are merged into ${output}`, index.path);
        const result = await convert(index.path, join(staging, output), checkpointOptions(options, warn));
        const files = result.files.map((f) => f.slice(staging.length + 1));
        return { input: index.path, output: result.output.slice(staging.length + 1), files, tensors: result.tensors, bytes: result.bytes };
      },
    };
  }
  // As the source was: shard k of the source becomes shard k of the output, and the index is
  // rewritten. The checkpoint is read through its index, as when the index is named: the same
  // checks, its metadata and tied weights, and shards that are not regular files refused.
  const renamed = new Map(index.shards.map((shard) => [shard, targetName(basename(shard), formats, to)]));
  const outIndex = `${outWeights}.index.json`;
  // The shards' tensors by the names they are written under (--rename applies before the split).
  const transforms = compileTransforms(options);
  const shardOf = new Map([...index.weightMap].map(([name, shard]) => [renamedName(transforms, name), shard]));
  const split = (tensors: readonly TensorEntry[]): ShardPlan => {
    const groups = new Map<string, TensorEntry[]>([...renamed.values()].map((name) => [name, []]));
    let totalSize = 0;
    let totalParameters = 0;
    for (const tensor of tensors) {
      const shard = shardOf.get(tensor.name);
      const group = shard === undefined ? undefined : groups.get(renamed.get(shard)!);
      // The index reader gives only tensors the index maps, so every one has its shard.
      if (group === undefined) throw new StConvertError("InvalidIndex", "the index does not map this tensor", { file: index.path, tensor: tensor.name });
      group.push(tensor);
      totalSize += tensor.byteLength;
      totalParameters += parameterCount(tensor.shape);
    }
    // Shards the selection emptied are left out, and the rest numbered again.
    const kept = [...groups].filter(([, group]) => group.length > 0);
    const renumber = kept.length !== groups.size;
    return {
      shards: kept.map(([name, group], i) => ({ name: renumber ? shardName(outWeights, i + 1, kept.length) : name, tensors: group })),
      sharded: true,
      totalSize,
      totalParameters,
    };
  };
  return {
    names: [...renamed.values(), outIndex],
    run: async (staging) => {
      const result = await convertInto(index.path, join(staging, outIndex), checkpointOptions(options, warn), false, split);
      const files = result.files.map((f) => f.slice(staging.length + 1));
      return { input: index.path, output: outIndex, files, tensors: result.tensors, bytes: result.bytes };
    },
  };
}

/** The options of each checkpoint's conversion: the caller's, with warnings collected. */
function checkpointOptions(options: ConvertModelOptions, warn: (message: string, file: string) => void): ConvertOptions {
  const { copyOtherFiles: _copy, ...rest } = options;
  // Into the fresh staging folder: nothing to force there (the real targets were checked up front).
  return { ...rest, force: false, onWarning: warn };
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    (error: unknown) => {
      if (isStConvertError(error)) throw error;
      return false;
    },
  );
}
