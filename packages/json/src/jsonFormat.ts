/**
 * The JSON form as registered with the `st-convert` command: its option and how it is recognised,
 * the reader and writer behind it loaded on first use. Also the package's `./format` entry point.
 */
import { type TensorFormat, lazyModule } from "@st-convert/core";

/** Loaded on first use, then kept. */
const tensorJsonModule = lazyModule(() => import("./tensorJson.js"));

const TENSOR_FIELDS = new Set(["dtype", "shape", "data", "data_base64"]);

/**
 * True when the first bytes look like the tensor JSON form rather than any JSON object (a
 * `config.json`, a tokenizer): the first member is `__metadata__`, or its value is an object whose
 * first key is one of the tensor fields. A head cut before that point counts as a match when the
 * first key is complete and its value opens an object.
 */
export function sniffTensorJson(head: Uint8Array): boolean {
  let i = head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf ? 3 : 0;
  const skip = () => {
    while (i < head.length && (head[i] === 0x20 || head[i] === 0x0a || head[i] === 0x0d || head[i] === 0x09)) i++;
  };
  const key = (): string | undefined => {
    if (head[i] !== 0x22) return undefined;
    const start = ++i;
    while (i < head.length && head[i] !== 0x22) i += head[i] === 0x5c ? 2 : 1;
    if (i >= head.length) return undefined;
    return new TextDecoder().decode(head.subarray(start, i++));
  };
  skip();
  if (head[i] !== 0x7b) return false;
  i++;
  skip();
  const first = key();
  if (first === undefined) return false;
  if (first === "__metadata__") return true;
  skip();
  if (head[i++] !== 0x3a) return false;
  skip();
  if (head[i++] !== 0x7b) return false;
  skip();
  if (i >= head.length) return true;
  const field = key();
  return field === undefined ? i >= head.length : TENSOR_FIELDS.has(field);
}

/**
 * The JSON form, as registered with the `st-convert` command: extension `.json`; option
 * `--base64` writes every tensor as `data_base64`.
 */
export const jsonFormat: TensorFormat = {
  name: "json",
  description: "raw-tensor JSON: lossless values (or base64), readable and diffable",
  extensions: [".json"],
  options: [
    {
      name: "base64",
      type: "boolean",
      multiple: false,
      description: "write every tensor as data_base64 (raw bytes, bit-exact, compact)",
      appliesTo: "write",
    },
  ],
  ambiguousExtension: true,
  sniff: sniffTensorJson,
  // The reader and writer load on first use: a command that touches no JSON file does not pay for them.
  async open(source) {
    const { readTensorJson } = await tensorJsonModule();
    return readTensorJson(source);
  },
  async write(tensors, sink, context) {
    const { writeTensorJson } = await tensorJsonModule();
    await writeTensorJson(tensors, sink, { base64: context.options.base64 === true, onWarning: context.onWarning });
  },
};
