/**
 * The record of a flax tree that st-convert keeps in metadata under {@link FLAX_TREE_KEY}: what
 * the tensors alone cannot say (values that are not arrays, empty dicts and lists, lists, numpy
 * scalars, key order, chunk sizes), so that flax → safetensors → flax restores with
 * `flax.serialization.from_bytes` into the original target. The reader writes it; the writer
 * parses it here, strictly (it comes from a file), into the tree it fills with the tensors.
 *
 * The value is JSON: `{"version": 1, "sep": ".", "tree": NODE}`, where NODE is one of
 * - `[key, NODE, key, NODE, …]`: a dict, entries in file order. A key is a JSON string, or for
 *   the keys msgpack allows besides (flax restores them, `strict_map_key=False`) the encoding of
 *   that value below: an int, a float, a bool, None, bytes, a complex, a timestamp or another ext
 *   value (not an array or a numpy scalar);
 * - `{"l": [NODE, …]}`: a list (a msgpack array);
 * - `1`: an ndarray (ext 1), the tensor whose name is the path joined with `sep`;
 * - `3`: a numpy scalar (ext 3), likewise a tensor;
 * - `{"k": n}`: an array flax stored in chunks of `n` elements (`__msgpack_chunked_array__`);
 * - `{"s": "int" | "float" | "bool"}`: a Python number or bool read as a 0-d tensor (`keepScalars`);
 * - a value: `null` (None), `true`/`false`, a string, `{"i": 7}` (an int; a decimal string past
 *   2^53), `{"f": 1.5}` (a float; the 16 hex digits of its big-endian float64 for -0, NaN and
 *   infinities), `{"b": "hex"}` (bytes), `{"c": [re, im]}` (a complex, each part a float as in
 *   `f`), `{"x": [code, "hex"]}` (another ext value: code 0–127, or -1 for a timestamp).
 */
import { StConvertError, type TensorEntry, hasLoneSurrogate } from "@st-convert/core";

/** The metadata key of the record. */
export const FLAX_TREE_KEY = "flax.tree";

/** The record's `version`. */
export const FLAX_TREE_VERSION = 1;

/** The key flax puts in a dict that holds one array in chunks (`_chunk` in `serialization.py`). */
export const CHUNKED_ARRAY_MARKER = "__msgpack_chunked_array__";

/**
 * flax's `MAX_CHUNK_SIZE` (2^30 bytes): an array with more bytes than this is written as a
 * `__msgpack_chunked_array__` dict of 1-d chunks of at most this many bytes, as flax does, since
 * a msgpack bin holds less than 2^31 bytes in msgpack-python.
 */
export const MAX_CHUNK_SIZE = 2 ** 30;

/** A msgpack value that is not an array or a container, as the writer encodes it. */
export type FlaxValue =
  | { readonly kind: "nil" }
  | { readonly kind: "bool"; readonly value: boolean }
  | { readonly kind: "int"; readonly value: bigint }
  /** `bits`: the big-endian float64, 8 bytes (msgpack-python writes every float as float64). */
  | { readonly kind: "float"; readonly bits: Uint8Array }
  | { readonly kind: "str"; readonly value: string }
  | { readonly kind: "bin"; readonly value: Uint8Array }
  | { readonly kind: "complex"; readonly real: Uint8Array; readonly imag: Uint8Array }
  | { readonly kind: "ext"; readonly code: number; readonly data: Uint8Array };

/** How a tensor is written at its place in the tree. */
export type SlotForm =
  | { readonly type: "ndarray" }
  | { readonly type: "npscalar" }
  | { readonly type: "chunked"; readonly run: number }
  | { readonly type: "python"; readonly python: "int" | "float" | "bool" };

export interface DictEntry {
  readonly key: FlaxValue;
  node: FlaxTreeNode;
  /** Made for a tensor the record does not place (written after the recorded keys, sorted). */
  readonly added: boolean;
}

export interface DictNode {
  readonly kind: "dict";
  readonly entries: DictEntry[];
  /** The entries with string keys, by key. */
  readonly byText: Map<string, DictEntry>;
  /** A name for messages: the path, or the first tensor placed under it. */
  readonly example: string;
}

export interface ListNode {
  readonly kind: "list";
  readonly items: FlaxTreeNode[];
  readonly example: string;
}

export interface SlotNode {
  readonly kind: "slot";
  readonly form: SlotForm;
  /** The name of the tensor it takes: the path joined with the record's separator ("" at the top). */
  readonly name: string;
  /** The tensor written here, once placed. */
  tensor: TensorEntry | undefined;
  /** Containers above it, the top-level one included. */
  readonly depth: number;
  /** Every container above it is a dict: flax chunks (and unchunks) only there. */
  readonly inDicts: boolean;
}

export interface LeafNode {
  readonly kind: "leaf";
  readonly value: FlaxValue;
}

export type FlaxTreeNode = DictNode | ListNode | SlotNode | LeafNode;

/** A parsed record: the tree, and its slots by the name of the tensor each one takes. */
export interface FlaxTree {
  readonly root: FlaxTreeNode;
  /** Slots by path joined with the record's separator (the top-level slot is not here). */
  readonly slots: Map<string, SlotNode>;
}

export function dictNode(example: string): DictNode {
  return { kind: "dict", entries: [], byText: new Map(), example };
}

/**
 * What makes two keys one in a Python dict (`1`, `True` and `1.0` are the same key), or undefined
 * for a NaN, which equals nothing.
 */
export function keyIdentity(key: FlaxValue): string | undefined {
  switch (key.kind) {
    case "str":
      return `s${key.value}`;
    case "bin":
      return `b${toHex(key.value)}`;
    case "nil":
      return "n";
    case "bool":
      return key.value ? "#1" : "#0";
    case "int":
      return `#${key.value}`;
    case "float": {
      const value = new DataView(key.bits.buffer, key.bits.byteOffset, 8).getFloat64(0);
      if (Number.isNaN(value)) return undefined;
      if (!Number.isFinite(value)) return value > 0 ? "#inf" : "#-inf";
      return Number.isInteger(value) ? `#${BigInt(value)}` : `#${value}`;
    }
    case "complex": {
      // complex(1, 0) is the key 1: a complex without an imaginary part is its real part.
      const imag = new DataView(key.imag.buffer, key.imag.byteOffset, 8).getFloat64(0);
      const real = new DataView(key.real.buffer, key.real.byteOffset, 8).getFloat64(0);
      if (Number.isNaN(real) || Number.isNaN(imag)) return undefined;
      return imag === 0 ? keyIdentity({ kind: "float", bits: key.real }) : `c${real}:${imag}`;
    }
    case "ext":
      // A Timestamp equals another of the same time, whichever of the three forms holds it.
      return key.code === -1 ? `t${timestampParts(key.data).join(":")}` : `x${key.code}:${toHex(key.data)}`;
  }
}

/** The JSON form of a float64 (`bits` big-endian): a number where JSON keeps it exactly, else hex. */
export function floatJson(bits: Uint8Array): number | string {
  const value = new DataView(bits.buffer, bits.byteOffset, 8).getFloat64(0);
  return Number.isFinite(value) && !Object.is(value, -0) ? value : toHex(bits);
}

/** The JSON form of an int: a number when exact, else its decimal digits. */
export function intJson(value: number | bigint): number | string {
  return typeof value === "number" ? value : value.toString();
}

export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

/** Why msgpack-python refuses a timestamp (ext -1) payload of this length, or undefined for 4, 8 and 12. */
export function timestampLengthFault(length: number): string | undefined {
  return length === 4 || length === 8 || length === 12 ? undefined : `a timestamp (ext -1) of ${length} bytes; msgpack has 4-, 8- and 12-byte timestamps`;
}

/** The seconds and nanoseconds of a valid timestamp (ext -1) payload of 4, 8 or 12 bytes. */
export function timestampParts(data: Uint8Array): [bigint, number] {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  if (data.byteLength === 4) return [BigInt(view.getUint32(0)), 0];
  if (data.byteLength === 8) {
    const word = view.getBigUint64(0);
    return [word & (2n ** 34n - 1n), Number(word >> 34n)];
  }
  return [view.getBigInt64(4), view.getUint32(0)];
}

/** Why msgpack-python's `Timestamp` refuses this ext -1 payload, or undefined when it accepts it. */
export function timestampFault(data: Uint8Array): string | undefined {
  const lengthFault = timestampLengthFault(data.byteLength);
  if (lengthFault !== undefined) return lengthFault;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const nanoseconds = data.byteLength === 8 ? Number(view.getBigUint64(0) >> 34n) : data.byteLength === 12 ? view.getUint32(0) : 0;
  return nanoseconds > 999_999_999 ? `a timestamp (ext -1) of ${nanoseconds} nanoseconds; at most 999,999,999 fit in a second` : undefined;
}

/**
 * Longest record parsed, in UTF-16 units: twice what the reader records at most (its 16 MiB of
 * values and their keys, in JSON), so that a hostile metadata value (a safetensors header holds
 * up to 100 MB) cannot make the writer build hundreds of MB of tree.
 */
export const MAX_TREE_RECORD = 32 * 1024 * 1024;

const NIL: LeafNode = { kind: "leaf", value: { kind: "nil" } };
const TRUE: LeafNode = { kind: "leaf", value: { kind: "bool", value: true } };
const FALSE: LeafNode = { kind: "leaf", value: { kind: "bool", value: false } };

const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);

/**
 * Parses and checks a record read from metadata. Refuses anything the reader never writes or the
 * writer could not turn into a file both its own reader and flax accept.
 * @throws StConvertError `InvalidMetadata` naming the broken rule, `LimitExceeded` past `maxChars`.
 */
export function parseFlaxTree(text: string, maxDepth: number, maxChars = MAX_TREE_RECORD): FlaxTree {
  const fail = (rule: string): never => {
    throw new StConvertError("InvalidMetadata", `the ${FLAX_TREE_KEY} metadata is not a tree st-convert records: ${rule}`);
  };
  if (text.length > maxChars) {
    throw new StConvertError("LimitExceeded", `the ${FLAX_TREE_KEY} metadata holds ${text.length} characters, more than the ${maxChars} st-convert parses`);
  }
  // Checked before parsing, so that nesting past any tree flax reads is refused before it is built:
  // a dict is one bracket deep, a list two ({"l":[), a value at most two.
  if (jsonDepth(text) > 2 * maxDepth + 3) fail(`it nests deeper than ${maxDepth} dicts and lists; flax's reader stops at ${maxDepth}`);
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return fail("it is not JSON");
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) return fail("it is not a JSON object");
  const { version, sep, tree } = doc as Record<string, unknown>;
  if (version !== FLAX_TREE_VERSION) return fail(`version ${JSON.stringify(version)} is not ${FLAX_TREE_VERSION}`);
  if (typeof sep !== "string" || sep === "") return fail('"sep" is not a non-empty string');
  if (tree === undefined) return fail('it has no "tree"');

  const slots = new Map<string, SlotNode>();
  interface Pending {
    readonly json: unknown;
    /** Path joined with `sep`, or undefined below a non-string key (no tensor can be named there). */
    readonly name: string | undefined;
    readonly top: boolean;
    readonly depth: number;
    readonly inDicts: boolean;
    readonly place: (node: FlaxTreeNode) => void;
  }
  let root: FlaxTreeNode | undefined;
  // An explicit stack: the JSON may nest as deep as it likes; the check below stops it at maxDepth.
  const stack: Pending[] = [{ json: tree, name: "", top: true, depth: 0, inDicts: true, place: (node) => (root = node) }];
  while (stack.length > 0) {
    const { json, name, top, depth, inDicts, place } = stack.pop()!;
    const where = top ? "at the top level" : name === undefined ? "below a key that is not a string" : `at ${JSON.stringify(name)}`;
    const child = (key: string | undefined) => (name === undefined || key === undefined ? undefined : top ? key : `${name}${sep}${key}`);
    if (json === 1 || json === 3 || isTagged(json, "k") || isTagged(json, "s")) {
      const form = slotForm(json, fail);
      if (name === undefined) fail(`an array ${where}: tensor names need string keys`);
      const slot: SlotNode = { kind: "slot", form, name: name!, tensor: undefined, depth, inDicts };
      if (!top) {
        if (slots.has(name!)) fail(`two arrays are named ${JSON.stringify(name)}`);
        slots.set(name!, slot);
      }
      place(slot);
      continue;
    }
    if (Array.isArray(json) || isTagged(json, "l")) {
      if (depth + 1 > maxDepth) fail(`it nests deeper than ${maxDepth} dicts and lists ${where}; flax's reader stops at ${maxDepth}`);
      if (Array.isArray(json)) {
        if (json.length % 2 !== 0) fail(`the dict ${where} has a key without a value`);
        const dict = dictNode(name ?? "");
        place(dict);
        const pairs: Pending[] = [];
        const seen = new Set<string>();
        for (let i = 0; i < json.length; i += 2) {
          const key = typeof json[i] === "string" ? ({ kind: "str", value: json[i] } as const) : leafValue(json[i], where, fail);
          if (key.kind === "str" && hasLoneSurrogate(key.value)) fail(`a key ${where} holds a lone UTF-16 surrogate, which UTF-8 cannot encode`);
          if (key.kind === "str" && key.value === CHUNKED_ARRAY_MARKER && inDicts) {
            fail(`the dict ${where} has the key ${CHUNKED_ARRAY_MARKER}, which would make flax read it as one chunked array`);
          }
          const identity = keyIdentity(key);
          if (identity !== undefined) {
            if (seen.has(identity)) fail(`the dict ${where} repeats a key`);
            seen.add(identity);
          }
          const entry: DictEntry = { key, node: dict, added: false };
          dict.entries.push(entry);
          if (key.kind === "str") dict.byText.set(key.value, entry);
          const keyName = key.kind === "str" ? key.value : undefined;
          pairs.push({ json: json[i + 1], name: child(keyName), top: false, depth: depth + 1, inDicts, place: (node) => (entry.node = node) });
        }
        // Reversed onto the stack, so that slots are met (and named) in file order.
        for (let i = pairs.length - 1; i >= 0; i--) stack.push(pairs[i]!);
      } else {
        const items = (json as { l: unknown }).l;
        if (!Array.isArray(items)) return fail(`the list ${where} is not a JSON array`);
        const list: ListNode = { kind: "list", items: new Array<FlaxTreeNode>(items.length), example: name ?? "" };
        place(list);
        for (let i = items.length - 1; i >= 0; i--) {
          stack.push({ json: items[i], name: child(String(i)), top: false, depth: depth + 1, inDicts: false, place: (node) => (list.items[i] = node) });
        }
      }
      continue;
    }
    // None and bools, the commonest values, share one node each.
    place(json === null ? NIL : json === true ? TRUE : json === false ? FALSE : { kind: "leaf", value: leafValue(json, where, fail) });
  }
  return { root: root!, slots };
}

/** How deep brackets and braces nest in JSON text, strings skipped. */
function jsonDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest) deepest = depth;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

function isTagged(json: unknown, tag: string): json is Record<string, unknown> {
  return typeof json === "object" && json !== null && !Array.isArray(json) && Object.keys(json).length === 1 && Object.hasOwn(json, tag);
}

function slotForm(json: unknown, fail: (rule: string) => never): SlotForm {
  if (json === 1) return { type: "ndarray" };
  if (json === 3) return { type: "npscalar" };
  if (isTagged(json, "k")) {
    const run = json.k;
    if (typeof run !== "number" || !Number.isSafeInteger(run) || run < 1) return fail(`a chunk size ${JSON.stringify(run)} that is not a positive integer`);
    return { type: "chunked", run };
  }
  const python = (json as { s: unknown }).s;
  if (python !== "int" && python !== "float" && python !== "bool") return fail(`a scalar kind ${JSON.stringify(python)}; expected "int", "float" or "bool"`);
  return { type: "python", python };
}

function leafValue(json: unknown, where: string, fail: (rule: string) => never): FlaxValue {
  if (json === null) return { kind: "nil" };
  if (typeof json === "boolean") return { kind: "bool", value: json };
  if (typeof json === "string") {
    if (hasLoneSurrogate(json)) fail(`a string ${where} holds a lone UTF-16 surrogate, which UTF-8 cannot encode`);
    return { kind: "str", value: json };
  }
  if (isTagged(json, "i")) return { kind: "int", value: intValue(json.i, where, fail) };
  if (isTagged(json, "f")) return { kind: "float", bits: floatBits(json.f, where, fail) };
  if (isTagged(json, "b")) return { kind: "bin", value: hexBytes(json.b, where, fail) };
  if (isTagged(json, "c")) {
    const parts = json.c;
    if (!Array.isArray(parts) || parts.length !== 2) return fail(`a complex ${where} that is not [real, imag]`);
    return { kind: "complex", real: floatBits(parts[0], where, fail), imag: floatBits(parts[1], where, fail) };
  }
  if (isTagged(json, "x")) {
    const parts = json.x;
    if (!Array.isArray(parts) || parts.length !== 2) return fail(`an ext value ${where} that is not [code, hex]`);
    const [code, hex] = parts as [unknown, unknown];
    if (typeof code !== "number" || !Number.isInteger(code) || code < -1 || code > 127) {
      return fail(`an ext code ${JSON.stringify(code)} ${where}; flax restores codes 0 to 127 and -1 (a timestamp)`);
    }
    const data = hexBytes(hex, where, fail);
    const fault = code === -1 ? timestampFault(data) : undefined;
    if (fault !== undefined) fail(`${fault} ${where}`);
    if (code >= 1 && code <= 3) fail(`ext ${code} ${where} as a plain value; flax decodes it as an array or a complex`);
    return { kind: "ext", code, data };
  }
  return fail(`a value ${where} that is none of the recorded forms: ${JSON.stringify(json)?.slice(0, 40)}`);
}

function intValue(json: unknown, where: string, fail: (rule: string) => never): bigint {
  let value: bigint | undefined;
  if (typeof json === "number" && Number.isSafeInteger(json)) value = BigInt(json);
  else if (typeof json === "string" && /^-?(0|[1-9][0-9]{0,19})$/.test(json)) value = BigInt(json);
  if (value === undefined || value < I64_MIN || value > U64_MAX) return fail(`an int ${where} outside msgpack's -2^63 to 2^64 - 1: ${JSON.stringify(json)}`);
  return value;
}

function floatBits(json: unknown, where: string, fail: (rule: string) => never): Uint8Array {
  const bits = new Uint8Array(8);
  if (typeof json === "number") {
    new DataView(bits.buffer).setFloat64(0, json);
    return bits;
  }
  if (typeof json === "string" && /^[0-9a-f]{16}$/.test(json)) return hexBytes(json, where, fail);
  return fail(`a float ${where} that is neither a number nor 16 hex digits`);
}

function hexBytes(json: unknown, where: string, fail: (rule: string) => never): Uint8Array {
  if (typeof json !== "string" || json.length % 2 !== 0 || !/^[0-9a-f]*$/.test(json)) return fail(`bytes ${where} that are not lower-case hex`);
  const out = new Uint8Array(json.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(json.slice(2 * i, 2 * i + 2), 16);
  return out;
}
