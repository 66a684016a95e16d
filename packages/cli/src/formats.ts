/**
 * The registry of formats. This list is the only place that names them; everything else in the
 * CLI and the `convert()` API works through the `TensorFormat` interface. Adapters are imported
 * through their light `./format` entry points, which load readers and writers on first use: a
 * command pays only for the formats it touches (about 30 ms of start-up otherwise).
 */
import { type ByteSource, StConvertError, type TensorFormat, safetensorsFormat, safetensorsIndexFormat } from "@st-convert/core";
import { flaxFormat } from "@st-convert/flax/format";
import { ggufFormat } from "@st-convert/gguf/format";
import { jsonFormat } from "@st-convert/json/format";
import { npyFormat, npzFormat } from "@st-convert/npy/format";
import { dcpFormat, torchFormat, torchIndexFormat } from "@st-convert/torch/format";
import { statSync } from "node:fs";
import { join } from "node:path";

/** Every format st-convert reads and writes, in the order `--help` lists them. */
export const FORMATS: readonly TensorFormat[] = [
  safetensorsFormat,
  safetensorsIndexFormat,
  npyFormat,
  npzFormat,
  flaxFormat,
  jsonFormat,
  torchFormat,
  torchIndexFormat,
  dcpFormat,
  ggufFormat,
];

/**
 * The file a folder given as the input is read through, when it is a checkpoint of a format
 * whose checkpoints are folders (a distributed checkpoint's `.metadata`); undefined for any
 * other path (a model folder, a file).
 */
export async function folderEntryOf(path: string, formats: readonly TensorFormat[] = FORMATS): Promise<string | undefined> {
  // Synchronous: a few µs, where a trip through the thread pool costs tens, paid by every file of a batch.
  // A path that cannot be looked at is not a folder here: opening it reports why.
  const is = (p: string, kind: "isDirectory" | "isFile"): boolean => {
    try {
      return statSync(p, { throwIfNoEntry: false })?.[kind]() === true;
    } catch {
      return false;
    }
  };
  if (!is(path, "isDirectory")) return undefined;
  for (const format of formats) {
    if (format.folderEntry === undefined) continue;
    const entry = join(path, format.folderEntry);
    if (is(entry, "isFile")) return entry;
  }
  return undefined;
}

/**
 * The format called `name` (as in `--from`/`--to`), case-insensitive. `use` says which: an unknown
 * name is answered with the formats that can be read, or (`"write"`) written.
 */
export function formatByName(name: string, formats: readonly TensorFormat[] = FORMATS, use: "read" | "write" = "read"): TensorFormat {
  const found = formats.find((f) => f.name.toLowerCase() === name.toLowerCase());
  if (found === undefined) {
    const known = use === "write" ? `formats that can be written: ${writableNames(formats)}` : `known formats: ${formats.map((f) => f.name).join(", ")}`;
    throw new StConvertError("UnknownFormat", `unknown format ${JSON.stringify(name)}; ${known}`);
  }
  return found;
}

/** The format whose extension `path` ends with, if any. */
export function formatByExtension(path: string, formats: readonly TensorFormat[] = FORMATS): TensorFormat | undefined {
  return matchExtension(path, formats)?.format;
}

/** The longest registered extension `path` ends with (case-insensitive), and its format. */
export function matchExtension(path: string, formats: readonly TensorFormat[] = FORMATS): { format: TensorFormat; extension: string } | undefined {
  const lower = path.toLowerCase();
  let best: { format: TensorFormat; extension: string } | undefined;
  for (const format of formats) {
    for (const extension of format.extensions) {
      if (lower.endsWith(extension) && extension.length > (best?.extension.length ?? 0)) best = { format, extension };
    }
  }
  return best;
}

/** Bytes read to recognise a file by its content (a JSON tensor name can be long). */
export const SNIFF_BYTES = 4096;

/**
 * The format of an input: `--from` if given, else its extension, else its first bytes.
 * @throws StConvertError `UnsupportedFormat` for a file of a format st-convert recognises but does
 *   not convert (ONNX, HDF5, TFLite, TensorFlow checkpoints, TorchScript); `UnknownFormat` when
 *   nothing tells.
 */
export async function detectInputFormat(source: ByteSource, from?: string, formats: readonly TensorFormat[] = FORMATS): Promise<TensorFormat> {
  if (from !== undefined) return formatByName(from, formats);
  const byExtension = source.name === undefined ? undefined : formatByExtension(source.name, formats);
  // An extension many files share (.bin, .json) is trusted only when the content does not say otherwise:
  // a safetensors file saved as weights.bin reads as safetensors; one nothing recognises goes to the
  // extension's format, which names what it is.
  if (byExtension !== undefined && (byExtension.ambiguousExtension !== true || byExtension.sniff === undefined)) return byExtension;
  const head = await readHead(source);
  const sniffed = byExtension?.sniff?.(head) === true ? byExtension : formats.find((f) => f.sniff?.(head) === true);
  if (sniffed !== undefined) return sniffed;
  // A format st-convert does not convert (ONNX, HDF5, a TorchScript .pt…) is named, not guessed at.
  const { foreignFormat, unsupportedFormat } = await import("./foreign.js");
  const foreign = await foreignFormat(source, head);
  if (foreign !== undefined) throw unsupportedFormat(foreign, source.name, formats);
  if (byExtension !== undefined) return byExtension;
  throw new StConvertError("UnknownFormat", `cannot tell the format from the name or the content; pass --from (${formats.map((f) => f.name).join(", ")})`, {
    file: source.name,
  });
}

/** The first {@link SNIFF_BYTES} of a source (fewer if it is shorter). */
export async function readHead(source: ByteSource): Promise<Uint8Array> {
  return source.read(0, Math.min(SNIFF_BYTES, source.size));
}

/**
 * The format of an output: `--to` if given, else its extension.
 * @throws StConvertError `UnknownFormat` when neither tells, or the format can only be read.
 */
export function detectOutputFormat(path: string, to?: string, formats: readonly TensorFormat[] = FORMATS): TensorFormat {
  const format = to !== undefined ? formatByName(to, formats, "write") : formatByExtension(path, formats);
  if (format === undefined) {
    throw new StConvertError("UnknownFormat", `cannot tell the output format from the file name; pass --to (${writableNames(formats)})`, { file: path });
  }
  if (format.readOnly === true) {
    throw new StConvertError("UnknownFormat", `${format.name} can be read but not written; write one of ${writableNames(formats)}`, { file: path });
  }
  return format;
}

/** The formats that can be written, by name, for a message (made only when one is given: a batch detects once per file). */
export function writableFormatNames(formats: readonly TensorFormat[] = FORMATS): string {
  return writableNames(formats);
}

function writableNames(formats: readonly TensorFormat[]): string {
  return formats
    .filter((f) => f.readOnly !== true)
    .map((f) => f.name)
    .join(", ");
}
