/**
 * The GGUF format (llama.cpp, ggml) as registered with the `st-convert` command: its options, how
 * it is recognised, and the reader and writer behind it (loaded on first use). Also the package's
 * `./format` entry point.
 */
import { type TensorFormat, lazyModule, stringListOption } from "@st-convert/core";
import type { GgufTensor } from "./readGguf.js";

/** Loaded on first use, then kept. */
const readerModule = lazyModule(() => import("./readGguf.js"));
const writerModule = lazyModule(() => import("./writeGguf.js"));
const kernelModule = lazyModule(() => import("./quantize.js"));

/** Arrays longer than this are shown by `info` as their type and length. */
const SHOWN_ITEMS = 16;

/**
 * `info`'s short form of a `gguf.KEY` entry: its type and value (`UINT32 32`, `STRING "llama"`),
 * an array of more than 16 items as its item type and length (`ARRAY<STRING>[151936]`).
 */
export function describeGgufMetadata(key: string, value: string): string | undefined {
  if (!key.startsWith("gguf.")) return undefined;
  let parsed: { type?: unknown; itemType?: unknown; value?: unknown };
  try {
    parsed = JSON.parse(value);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null || typeof parsed.type !== "string") return undefined;
  if (parsed.type !== "ARRAY") return `${parsed.type} ${JSON.stringify(parsed.value)}`;
  const items = Array.isArray(parsed.value) ? parsed.value : [];
  return items.length > SHOWN_ITEMS ? `ARRAY<${String(parsed.itemType)}>[${items.length}]` : `ARRAY<${String(parsed.itemType)}> ${JSON.stringify(items)}`;
}

/** `GGUF`: the first four bytes of every GGUF file, in either byte order. */
const MAGIC = [0x47, 0x47, 0x55, 0x46];

/** True when `head` starts with GGUF's magic. */
export function sniffGguf(head: Uint8Array): boolean {
  return MAGIC.every((b, i) => head[i] === b);
}

/**
 * The GGUF format, as registered with the `st-convert` command. Options: `keep-quantized` (read:
 * quantized tensors stay their blocks, as U8 `[rows, bytes per row]`, their ggml type recorded in
 * the metadata) and `quantize` (write: `TYPE` or `NAME_REGEX:TYPE`, repeatable).
 */
export const ggufFormat: TensorFormat = {
  name: "gguf",
  description: "GGUF (llama.cpp, ggml): v2/v3, either byte order, split sets; every ggml block type",
  extensions: [".gguf"],
  // Its keys go into the output's metadata in st-convert's own encoding: no reference writes the same file.
  freeLayout: true,
  options: [
    {
      name: "keep-quantized",
      type: "boolean",
      multiple: false,
      description: "gguf: keep quantized tensors as their blocks (U8 [rows, bytes per row]) instead of dequantizing them to F32",
      appliesTo: "read",
    },
    {
      name: "quantize",
      type: "string",
      multiple: true,
      valueName: "TYPE",
      description: "gguf: quantize floating tensors of 2+ dims to TYPE (Q8_0, Q4_K...), or NAME_REGEX:TYPE for some",
      appliesTo: "write",
    },
  ],
  sniff: sniffGguf,
  firstOfSet(fileName) {
    const match = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i.exec(fileName);
    return match === null || Number(match[2]) <= 1 ? undefined : `${match[1]}-00001-of-${match[3]}.gguf`;
  },
  describeMetadata: describeGgufMetadata,
  storedForm(entry) {
    const { ggmlType, storedBytes } = entry as Partial<Pick<GgufTensor, "ggmlType" | "storedBytes">>;
    return ggmlType === undefined || storedBytes === undefined ? undefined : { type: ggmlType, bytes: storedBytes };
  },
  // Quantization, on a kernel pool's threads (writeGguf runs it there when given one).
  async kernels() {
    return (await kernelModule()).GGUF_KERNELS;
  },
  // The reader and writer load on first use: a command that touches no GGUF file does not pay for them.
  async open(source, context) {
    const { readGguf } = await readerModule();
    return readGguf(source, {
      // Read for a GGUF output, quantized tensors stay their blocks, which the writer puts back untouched.
      keepQuantized: context.options["keep-quantized"] === true || context.writing === "gguf",
      onWarning: context.onWarning,
      fileName: context.fileName,
      openSibling: context.openSibling,
    });
  },
  splitSet: {
    defaultName: "model.gguf",
    async plan(tensors, maxShardSize, weightsName, context) {
      const { planSplitSet } = await writerModule();
      return planSplitSet(tensors, maxShardSize, weightsName, {
        quantize: stringListOption(context.options, "quantize"),
        onWarning: context.onWarning,
        kernelPool: context.kernelPool,
        onStored: context.onStored,
      });
    },
  },
  async write(tensors, sink, context) {
    const { writeGguf } = await writerModule();
    await writeGguf(tensors, sink, {
      quantize: stringListOption(context.options, "quantize"),
      onWarning: context.onWarning,
      kernelPool: context.kernelPool,
      onStored: context.onStored,
    });
  },
};
