/**
 * The formats the page reads and writes: the same registry as the `st-convert` command, imported
 * from the adapters' light `./format` entry points (readers and writers load on first use, so the
 * page fetches the code of a format only when a file needs it).
 */
import { type ByteSource, StConvertError, type TensorFormat, fileStem, safetensorsFormat, safetensorsIndexFormat } from "@st-convert/core";
import { flaxFormat } from "@st-convert/flax/format";
import { ggufFormat } from "@st-convert/gguf/format";
import { jsonFormat } from "@st-convert/json/format";
import { npyFormat, npzFormat } from "@st-convert/npy/format";
import { dcpFormat, torchFormat, torchIndexFormat } from "@st-convert/torch/format";

/** Every format the page knows, in the order the command's `--help` lists them. */
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
 * The formats a conversion can write (the choices of `select[name=to]`): a page offers one file
 * to save, so a format whose checkpoints are folders (dcp) is read here but not written.
 */
export const OUTPUT_FORMATS: readonly TensorFormat[] = FORMATS.filter((f) => f.readOnly !== true && !f.name.endsWith("-index") && f.writeFolder === undefined);

/** Bytes read to recognise a file by its content (as the command reads). */
export const SNIFF_BYTES = 4096;

/**
 * The format called `name`, case-insensitive.
 * @throws StConvertError `UnknownFormat`.
 */
export function formatByName(name: string): TensorFormat {
  const found = FORMATS.find((f) => f.name.toLowerCase() === name.toLowerCase());
  if (found === undefined) {
    throw new StConvertError("UnknownFormat", `unknown format ${JSON.stringify(name)}; known formats: ${FORMATS.map((f) => f.name).join(", ")}`);
  }
  return found;
}

/** The format whose extension (the longest that matches, case-insensitive) ends `fileName`. */
export function formatByExtension(fileName: string): TensorFormat | undefined {
  const lower = fileName.toLowerCase();
  let best: { format: TensorFormat; length: number } | undefined;
  for (const format of FORMATS) {
    for (const extension of format.extensions) {
      if (lower.endsWith(extension) && extension.length > (best?.length ?? 0)) best = { format, length: extension.length };
    }
  }
  return best?.format;
}

/**
 * The format of an input, decided as the command decides it: its extension, unless that extension
 * is one many files share (`.json`, `.bin`) and the content says otherwise; else its first bytes.
 * @throws StConvertError `UnknownFormat` when neither tells.
 */
export async function detectInputFormat(source: ByteSource): Promise<TensorFormat> {
  const byExtension = source.name === undefined ? undefined : formatByExtension(source.name);
  if (byExtension !== undefined && (byExtension.ambiguousExtension !== true || byExtension.sniff === undefined)) return byExtension;
  const head = await source.read(0, Math.min(SNIFF_BYTES, source.size));
  const sniffed = byExtension?.sniff?.(head) === true ? byExtension : FORMATS.find((f) => f.sniff?.(head) === true);
  if (sniffed !== undefined) return sniffed;
  if (byExtension !== undefined) return byExtension;
  throw new StConvertError("UnknownFormat", `cannot tell the format from the name or the content (${FORMATS.map((f) => f.name).join(", ")})`, {
    file: source.name,
  });
}

/**
 * The name the output is offered under: the input's name without its format's extension (or its
 * last extension), with the output format's first one (`model.safetensors` → `model.npz`).
 */
export function outputFileName(inputName: string, output: TensorFormat): string {
  const base = inputName.slice(Math.max(inputName.lastIndexOf("/"), inputName.lastIndexOf("\\")) + 1);
  const lower = base.toLowerCase();
  const known = FORMATS.flatMap((f) => f.extensions)
    .filter((e) => lower.endsWith(e) && lower.length > e.length)
    .sort((a, b) => b.length - a.length)[0];
  const stem = known !== undefined ? base.slice(0, base.length - known.length) : (fileStem(base) ?? "tensors");
  return `${stem}${output.extensions[0] ?? ""}`;
}
