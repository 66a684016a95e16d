/**
 * The GGUF format (llama.cpp, ggml) as registered with the `st-convert` command: its options, how
 * it is recognised, and the reader and writer behind it (loaded on first use). Also the package's
 * `./format` entry point.
 */
import { type TensorFormat, lazyModule, stringListOption } from "@st-convert/core";

/** Loaded on first use, then kept. */
const readerModule = lazyModule(() => import("./readGguf.js"));
const writerModule = lazyModule(() => import("./writeGguf.js"));

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
  // The reader and writer load on first use: a command that touches no GGUF file does not pay for them.
  async open(source, context) {
    const { readGguf } = await readerModule();
    return readGguf(source, {
      keepQuantized: context.options["keep-quantized"] === true,
      onWarning: context.onWarning,
      fileName: context.fileName,
      openSibling: context.openSibling,
    });
  },
  async write(tensors, sink, context) {
    const { writeGguf } = await writerModule();
    await writeGguf(tensors, sink, { quantize: stringListOption(context.options, "quantize"), onWarning: context.onWarning });
  },
};
