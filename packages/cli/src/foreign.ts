/**
 * Files of formats st-convert does not convert, recognised by their content (and, where the
 * content has no mark of its own, their name) so that a user hears what the file is instead of
 * "cannot tell the format": ONNX models, HDF5 and Keras files, TensorFlow Lite models, TensorFlow
 * checkpoints and SavedModels, TorchScript archives. Also names what a file is when its name says
 * another format (an npz renamed `.safetensors`). Only reached once a file was refused, so it
 * costs nothing on the way of a conversion.
 */
import { basename } from "node:path";
import { type ByteSource, StConvertError, type TensorFormat } from "@st-convert/core";

/** The HDF5 format signature; a file may start with a user block of 512, 1024, 2048… bytes before it. */
const HDF5_SIGNATURE = [0x89, 0x48, 0x44, 0x46, 0x0d, 0x0a, 0x1a, 0x0a];
/** The LevelDB table magic number that ends a TensorFlow checkpoint's `.index` (little-endian). */
const TABLE_MAGIC = [0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb];
/** How much of a zip's end is searched for its end-of-central-directory record (the record and the longest comment). */
const ZIP_TAIL = 22 + 0xffff;
/** The most of a central directory read to list member names. */
const CENTRAL_DIRECTORY_MAX = 1 << 20;
/** The formats whose files are zip archives. */
const ZIP_FORMATS = new Set(["npz", "torch"]);
/** Fields of ONNX's ModelProto (onnx.proto): ir_version 1 … configuration 26. */
const ONNX_MODEL_FIELDS = new Set([1, 2, 3, 4, 5, 6, 7, 8, 14, 20, 25, 26]);

const TORCHSCRIPT =
  "a TorchScript archive (torch.jit.save: code/ and constants.pkl beside the weights): load it with torch.jit.load and save its state_dict() with torch.save or safetensors";

/**
 * What a file of a format st-convert does not convert is (`an ONNX model`, …, with advice where
 * there is some), or undefined when it is none of them. `head` is the file's first bytes.
 */
export async function foreignFormat(source: ByteSource, head: Uint8Array): Promise<string | undefined> {
  const name = source.name === undefined ? "" : basename(source.name);
  if (isZip(head)) {
    const members = await zipMemberNames(source);
    if (members === undefined) return undefined;
    if (members.some((m) => /(^|\/)constants\.pkl$/.test(m)) || members.some((m) => /(^|\/)code\/.*\.py$/.test(m))) return TORCHSCRIPT;
    if (members.includes("model.weights.h5") && (members.includes("config.json") || members.includes("metadata.json"))) {
      return "a Keras model archive (.keras: config.json and model.weights.h5, an HDF5 file)";
    }
    return undefined;
  }
  for (const at of [0, 512, 1024, 2048]) {
    if (HDF5_SIGNATURE.every((b, i) => head[at + i] === b)) return "an HDF5 file (Keras .h5 weights or model, or other HDF5 data)";
  }
  if (head.byteLength >= 8 && head[4] === 0x54 && head[5] === 0x46 && head[6] === 0x4c && head[7] === 0x33) {
    return "a TensorFlow Lite model (a .tflite FlatBuffer, file identifier TFL3)";
  }
  if (/\.data-\d{5}-of-\d{5}$/.test(name)) return "a data shard of a TensorFlow checkpoint (tf.train.Checkpoint; its index is the .index file beside it)";
  if (source.size >= 48) {
    const tail = await source.read(source.size - 8, 8);
    if (TABLE_MAGIC.every((b, i) => tail[i] === b)) {
      return "the index of a TensorFlow checkpoint (tf.train.Checkpoint; a LevelDB table; the tensors are in the .data-NNNNN-of-NNNNN files beside it)";
    }
  }
  if (name === "saved_model.pb") return "the graph of a TensorFlow SavedModel (saved_model.pb)";
  if (looksLikeOnnx(head, name.toLowerCase().endsWith(".onnx"))) return "an ONNX model (a graph with its weights inside)";
  return undefined;
}

/** The refusal of a file of a format st-convert does not convert. */
export function unsupportedFormat(what: string, file: string | undefined, formats: readonly TensorFormat[]): StConvertError {
  const converted = formats.filter((f) => f.namedOnly !== true && f.readOnly !== true).map((f) => f.name);
  return new StConvertError("UnsupportedFormat", `${what}; st-convert does not convert it (it reads ${converted.join(", ")})`, { file });
}

/**
 * What a file whose reader refused it is, when its content says another format than its name:
 * a zip archive (an npz, a PyTorch checkpoint), another format's magic number, or a format st-convert
 * does not convert. Undefined when its content says nothing else (the reader's error stands).
 */
export async function misnamedFormat(source: ByteSource, named: TensorFormat, formats: readonly TensorFormat[]): Promise<StConvertError | undefined> {
  const head = await source.read(0, Math.min(4096, source.size));
  // Its own format after all (refused for what is inside), or a zip where the format is one (npz, torch): the reader's error stands.
  if (named.sniff?.(head) === true || (isZip(head) && ZIP_FORMATS.has(named.name))) return undefined;
  const foreign = await foreignFormat(source, head);
  if (foreign !== undefined) return unsupportedFormat(`${foreign}, though its name says ${named.name}`, source.name, formats);
  const claims = formats.filter((f) => f !== named && f.readOnly !== true && f.sniff?.(head) === true && !(f.name === "flax" || f.name === "json"));
  if (isZip(head)) {
    const which =
      claims.length > 0 ? claims.map((f) => describeZipFormat(f.name)).join(" or ") : "perhaps an npz (NumPy) archive or a PyTorch checkpoint (torch.save)";
    const from = claims.length > 0 ? claims.map((f) => `--from ${f.name}`).join(" or ") : "--from npz or --from torch";
    return new StConvertError("FormatMismatch", `the file is a zip archive, not ${named.name} as its name says: ${which}; rename it or pass ${from}`, {
      file: source.name,
    });
  }
  if (claims.length === 1) {
    const other = claims[0]!;
    return new StConvertError(
      "FormatMismatch",
      `the file is ${other.name} (${other.description}), not ${named.name} as its name says; rename it or pass --from ${other.name}`,
      {
        file: source.name,
      },
    );
  }
  return undefined;
}

function describeZipFormat(name: string): string {
  if (name === "npz") return "an npz (NumPy) archive";
  if (name === "torch") return "a PyTorch checkpoint (torch.save)";
  return name;
}

function isZip(head: Uint8Array): boolean {
  return head.byteLength >= 4 && head[0] === 0x50 && head[1] === 0x4b && ((head[2] === 3 && head[3] === 4) || (head[2] === 5 && head[3] === 6));
}

/** The member names of a zip archive, from its central directory (ZIP64 included); undefined when it cannot be found. */
async function zipMemberNames(source: ByteSource): Promise<string[] | undefined> {
  const tailStart = Math.max(0, source.size - ZIP_TAIL);
  const tail = await source.read(tailStart, source.size - tailStart);
  const view = new DataView(tail.buffer, tail.byteOffset, tail.byteLength);
  let end = -1;
  for (let at = tail.byteLength - 22; at >= 0; at--) {
    if (view.getUint32(at, true) === 0x06054b50) {
      end = at;
      break;
    }
  }
  if (end < 0) return undefined;
  let size = view.getUint32(end + 12, true);
  let offset = view.getUint32(end + 16, true);
  if ((size === 0xffffffff || offset === 0xffffffff) && end >= 20 && view.getUint32(end - 20, true) === 0x07064b50) {
    const record = Number(view.getBigUint64(end - 12, true));
    if (record + 56 > source.size) return undefined;
    const zip64 = await source.read(record, 56);
    const z = new DataView(zip64.buffer, zip64.byteOffset, zip64.byteLength);
    if (z.getUint32(0, true) !== 0x06064b50) return undefined;
    size = Number(z.getBigUint64(40, true));
    offset = Number(z.getBigUint64(48, true));
  }
  if (offset + size > source.size) return undefined;
  const directory = await source.read(offset, Math.min(size, CENTRAL_DIRECTORY_MAX));
  const d = new DataView(directory.buffer, directory.byteOffset, directory.byteLength);
  const names: string[] = [];
  for (let at = 0; at + 46 <= directory.byteLength && d.getUint32(at, true) === 0x02014b50; ) {
    const nameLength = d.getUint16(at + 28, true);
    if (at + 46 + nameLength > directory.byteLength) break;
    names.push(new TextDecoder().decode(directory.subarray(at + 46, at + 46 + nameLength)));
    at += 46 + nameLength + d.getUint16(at + 30, true) + d.getUint16(at + 32, true);
  }
  return names;
}

/**
 * Whether `head` starts like an ONNX ModelProto: field 1 (ir_version) a small varint first, then
 * only ModelProto's fields with their wire types, a producer name (field 2) of printable text,
 * and a graph (7) or opset import (8) among them; `named` (an .onnx name) asks less.
 */
function looksLikeOnnx(head: Uint8Array, named: boolean): boolean {
  if (head[0] !== 0x08 || head[1] === undefined || head[1] < 3 || head[1] > 30) return false;
  let at = 2;
  let graph = false;
  let fields = 1;
  while (at < head.byteLength) {
    const key = varint(head, at);
    if (key === undefined) break;
    const field = key.value >>> 3;
    const wire = key.value & 7;
    if (!ONNX_MODEL_FIELDS.has(field)) return false;
    at = key.next;
    if (wire === 0) {
      const value = varint(head, at);
      if (value === undefined || (field !== 1 && field !== 5)) return false;
      at = value.next;
    } else if (wire === 2) {
      const length = varint(head, at);
      if (length === undefined || field === 1 || field === 5) return false;
      if (field === 2 || field === 3) {
        const text = head.subarray(length.next, Math.min(head.byteLength, length.next + length.value));
        if (length.value > 256 || !text.every((b) => b >= 0x20 && b < 0x7f)) return false;
      }
      if (field === 7 || field === 8) graph = true;
      at = length.next + length.value;
    } else return false;
    fields++;
  }
  return graph && (named || fields >= 2);
}

function varint(bytes: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  for (let i = 0; i < 8 && at + i < bytes.byteLength; i++) {
    const b = bytes[at + i]!;
    value += (b & 0x7f) * 2 ** (7 * i);
    if ((b & 0x80) === 0) return { value, next: at + i + 1 };
  }
  return undefined;
}
