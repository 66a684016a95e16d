/**
 * Structure-aware mutators for the differential fuzzer, one set per format. Each takes a valid
 * file made by a reference tool and changes one thing the format's readers have to judge: a
 * safetensors header field (offsets, shapes, dtypes, numbers such as 1e400, duplicate keys,
 * metadata), a zip record (sizes, CRCs, names with NUL, comment lengths, the end record's
 * position, local and central headers that disagree), an npy header's dict, a msgpack length or
 * ext type, a pickle opcode or a storage's size, a JSON token. Byte flips are there too, at a
 * lower weight. Mutations stack (one to three per mutant), each named, so a failure says what was
 * done to the seed.
 */
import { Random, joinBytes, latin1, splice, utf8 } from "./Random.js";
import { type JsonToken, jsonTokens, replaceTokens, stringValue, topLevelKeys, valueEnd, valuesOfKey } from "./jsonTokens.js";
import { type MsgNode, allNodes, cloneNode, decodeMsgpack, encodeMsgpack } from "./msgpackModel.js";
import { NO_ARGUMENT_OPCODES, type PickleOp, globalOp, intOf, intOp, parsePickle, strOf, strOp, writePickle } from "./pickleOps.js";
import { type ZipModel, type ZipModelEntry, cloneZip, memberContent, parseZip, setMemberContent, writeZip } from "./zipModel.js";

/** What a mutator gets besides the bytes. */
export interface MutationContext {
  readonly random: Random;
  /** Valid files of the same format (for splices). */
  readonly seeds: readonly Uint8Array[];
  /** Valid files of other formats (for polyglots). */
  readonly others: readonly Uint8Array[];
}

/** One kind of change. */
export interface Mutator {
  readonly name: string;
  /** How often it is picked relative to the others of its set. Default 1. */
  readonly weight?: number;
  /** The mutated bytes, or undefined when it does not apply to these bytes. */
  apply(bytes: Uint8Array, context: MutationContext): Uint8Array | undefined;
}

/** A mutant and the names of the mutations that made it. */
export interface Mutant {
  bytes: Uint8Array;
  steps: string[];
}

/** Applies one to `maxSteps` mutators, picked by weight, to `seed`. */
export function mutate(seed: Uint8Array, mutators: readonly Mutator[], context: MutationContext, maxSteps = 3): Mutant {
  const { random } = context;
  const total = mutators.reduce((n, m) => n + (m.weight ?? 1), 0);
  const pick = (): Mutator => {
    let x = random.uint32() / 2 ** 32;
    x *= total;
    for (const m of mutators) {
      x -= m.weight ?? 1;
      if (x < 0) return m;
    }
    return mutators[mutators.length - 1]!;
  };
  let bytes = seed;
  const steps: string[] = [];
  const count = 1 + random.int(maxSteps);
  for (let tries = 0; steps.length < count && tries < count * 8; tries++) {
    const m = pick();
    let out: Uint8Array | undefined;
    try {
      out = m.apply(bytes, context);
    } catch {
      // A mutator that cannot handle what earlier steps made (a 5,000-deep header for JSON.stringify) does not apply.
      out = undefined;
    }
    if (out === undefined) continue;
    bytes = out;
    steps.push(m.name);
  }
  if (steps.length === 0) {
    // Nothing applied: insert bytes, which applies to anything (even an empty file).
    const insert = BYTE_MUTATORS.find((m) => m.name === "bytes.insert")!;
    bytes = insert.apply(seed, context)!;
    steps.push(insert.name);
  }
  return { bytes, steps };
}

// -- bytes ------------------------------------------------------------------------------------

const INTERESTING_BYTES = [0x00, 0x01, 0x7f, 0x80, 0xff, 0x20, 0x22, 0x27, 0x2c, 0x30, 0x39, 0x5b, 0x5d, 0x7b, 0x7d, 0x0a, 0x5c, 0xc1];

/** Format-blind changes: bit flips, byte sets, cuts, insertions, duplicated and removed slices, splices. */
export const BYTE_MUTATORS: readonly Mutator[] = [
  {
    name: "bytes.flip",
    apply(b, { random }) {
      if (b.byteLength === 0) return undefined;
      const out = b.slice();
      out[random.int(b.byteLength)]! ^= 1 << random.int(8);
      return out;
    },
  },
  {
    name: "bytes.set",
    apply(b, { random }) {
      if (b.byteLength === 0) return undefined;
      const out = b.slice();
      out[random.int(b.byteLength)] = random.chance(0.5) ? random.pick(INTERESTING_BYTES) : random.int(256);
      return out;
    },
  },
  {
    name: "bytes.truncate",
    apply: (b, { random }) => (b.byteLength === 0 ? undefined : b.slice(0, random.int(b.byteLength))),
  },
  {
    name: "bytes.insert",
    apply(b, { random }) {
      const at = random.int(b.byteLength + 1);
      return splice(b, at, at, random.bytes(1 + random.int(16)));
    },
  },
  {
    name: "bytes.duplicate",
    apply(b, { random }) {
      if (b.byteLength === 0) return undefined;
      const at = random.int(b.byteLength);
      const slice = b.subarray(at, at + 1 + random.int(64));
      return splice(b, at, at, slice);
    },
  },
  {
    name: "bytes.delete",
    apply(b, { random }) {
      if (b.byteLength === 0) return undefined;
      const at = random.int(b.byteLength);
      return splice(b, at, Math.min(b.byteLength, at + 1 + random.int(32)));
    },
  },
  {
    name: "bytes.splice",
    apply(b, { random, seeds }) {
      if (seeds.length === 0 || b.byteLength === 0) return undefined;
      const other = random.pick(seeds);
      const at = random.int(b.byteLength);
      const from = random.int(other.byteLength);
      return joinBytes(b.subarray(0, at), other.subarray(from));
    },
  },
];

/** Byte mutators at a weight that keeps them a minority beside the structure-aware ones. */
function bytesAt(weight: number): Mutator[] {
  return BYTE_MUTATORS.map((m) => ({ ...m, weight }));
}

// -- numbers and strings both JSON and Python literals share ------------------------------------

/** Numbers in JSON spelling that sit on a boundary of some reader. */
const JSON_NUMBERS = [
  "0",
  "-0",
  "1",
  "-1",
  "1.0",
  "0.5",
  "1e2",
  "1E2",
  "1e400",
  "2e308",
  "-1e400",
  "1e-400",
  "4294967295",
  "4294967296",
  "9007199254740991",
  "9007199254740992",
  "9007199254740993",
  "9223372036854775807",
  "9223372036854775808",
  "18446744073709551615",
  "18446744073709551616",
  "-9223372036854775808",
  "9".repeat(400),
  "100000000",
  "01",
  "1.",
  ".5",
  "+1",
  "0x10",
  "NaN",
  "Infinity",
  "-",
];

/** Shapes, in JSON. */
const JSON_SHAPES = [
  "[]",
  "[0]",
  "[1]",
  "[2]",
  "[3]",
  "[2,3]",
  "[0,0]",
  "[4294967296,4294967296,0]",
  "[0,4294967296,4294967296]",
  "[18446744073709551615,0]",
  "[9007199254740993,0]",
  "[9223372036854775808,0]",
  "[-1]",
  "[1.5]",
  "[1.0]",
  "[null]",
  '["2"]',
  "[true]",
  "null",
  "{}",
  '"2"',
  `[${Array.from({ length: 70 }, () => "1").join(",")}]`,
];

const SAFETENSORS_DTYPES = [
  "BOOL",
  "U8",
  "I8",
  "F8_E5M2",
  "F8_E4M3",
  "F8_E8M0",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "I16",
  "U16",
  "F16",
  "BF16",
  "I32",
  "U32",
  "F32",
  "C64",
  "F64",
  "I64",
  "U64",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
];
const ODD_DTYPES = ["f32", "F128", "I4", "U1", "", " F32", "Bf16", "F8_E4M3FN", "FLOAT32", "float32", "BOOL\\u0000", "C128", "F8_E3M4", "U4", "I1"];

/** String contents (already escaped for JSON) that test escapes, encodings and names. */
const JSON_STRINGS = [
  "",
  "a",
  "__metadata__",
  "\\u0000",
  "a\\u0000b",
  "\\ud800",
  "\\udc00\\ud800",
  "\\ud83d\\ude00",
  "\\u00e9",
  "é",
  "😀",
  "\\/",
  "\\\\",
  '\\"',
  "\\x41",
  "\\u00",
  "\t",
  "\u007f",
  "a.b",
  "a/b",
  "x".repeat(300),
];

// -- safetensors ------------------------------------------------------------------------------

const textDecoder = new TextDecoder();

interface SafetensorsParts {
  header: string;
  data: Uint8Array;
}

function splitSafetensors(bytes: Uint8Array): SafetensorsParts | undefined {
  if (bytes.byteLength < 8) return undefined;
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  if (8 + n > bytes.byteLength) return undefined;
  return { header: textDecoder.decode(bytes.subarray(8, 8 + n)), data: bytes.subarray(8 + n) };
}

function joinSafetensors(header: string | Uint8Array, data: Uint8Array, length?: bigint): Uint8Array {
  const h = typeof header === "string" ? utf8(header) : header;
  const n = new Uint8Array(8);
  new DataView(n.buffer).setBigUint64(0, BigInt.asUintN(64, length ?? BigInt(h.byteLength)), true);
  return joinBytes(n, h, data);
}

/** A mutator of the header's tokens: `edit` returns the new header text or undefined. */
function headerMutator(
  name: string,
  weight: number,
  edit: (header: string, tokens: JsonToken[], context: MutationContext, data: Uint8Array) => string | undefined,
): Mutator {
  return {
    name,
    weight,
    apply(bytes, context) {
      const parts = splitSafetensors(bytes);
      if (parts === undefined) return undefined;
      const tokens = jsonTokens(parts.header);
      if (tokens === undefined || tokens.length === 0) return undefined;
      const header = edit(parts.header, tokens, context, parts.data);
      return header === undefined ? undefined : joinSafetensors(header, parts.data);
    },
  };
}

/** Replaces one of the values of `key` with `choose(current)`. */
function replaceValueOf(key: string, choose: (current: string, context: MutationContext, data: Uint8Array) => string) {
  return (header: string, tokens: JsonToken[], context: MutationContext, data: Uint8Array): string | undefined => {
    const values = valuesOfKey(tokens, key);
    if (values.length === 0) return undefined;
    const i = context.random.pick(values);
    const end = valueEnd(tokens, i);
    return replaceTokens(header, tokens, i, end, choose(header.slice(tokens[i]!.start, tokens[end]!.end), context, data));
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function nested(depth: number, random: Random): string {
  const [open, close] = random.chance(0.5) ? ["[", "]"] : ['{"a":', "}"];
  return open.repeat(depth) + (open === "[" ? "" : "1") + close.repeat(depth);
}

/** JSON token mutators, for any JSON document (a safetensors header, st-convert's JSON form). */
function jsonTokenEdits(
  weight: number,
  prefix: string,
): [string, number, (text: string, tokens: JsonToken[], context: MutationContext) => string | undefined][] {
  return [
    [
      `${prefix}.number`,
      weight * 3,
      (text, tokens, { random }) => {
        const numbers = tokens.map((t, i) => [t, i] as const).filter(([t]) => t.kind === "number");
        if (numbers.length === 0) return undefined;
        const [t, i] = random.pick(numbers);
        let value: string;
        if (random.chance(0.3) && /^-?\d+$/.test(t.text)) value = String(BigInt(t.text) + BigInt(random.pick([1, -1, 8, -8])));
        else value = random.pick(JSON_NUMBERS);
        return replaceTokens(text, tokens, i, i, value);
      },
    ],
    [
      `${prefix}.string`,
      weight * 2,
      (text, tokens, { random }) => {
        const strings = tokens.map((t, i) => [t, i] as const).filter(([t]) => t.kind === "string");
        if (strings.length === 0) return undefined;
        const [t, i] = random.pick(strings);
        const inner = t.text.slice(1, -1);
        const choice = random.int(3);
        const value = choice === 0 ? random.pick(JSON_STRINGS) : choice === 1 ? inner + random.pick(JSON_STRINGS) : random.pick(JSON_STRINGS) + inner;
        return replaceTokens(text, tokens, i, i, `"${value}"`);
      },
    ],
    [
      `${prefix}.token`,
      weight,
      (text, tokens, { random }) => {
        const i = random.int(tokens.length);
        const j = random.int(tokens.length);
        switch (random.int(4)) {
          case 0:
            return replaceTokens(text, tokens, i, i, "");
          case 1:
            return replaceTokens(text, tokens, i, i, tokens[i]!.text + tokens[i]!.text);
          case 2:
            return replaceTokens(text, tokens, i, i, tokens[j]!.text);
          default:
            return replaceTokens(text, tokens, i, i, random.pick(["{", "}", "[", "]", ",", ":", "null", "true", "false", '""']));
        }
      },
    ],
    [
      `${prefix}.whitespace`,
      weight,
      (text, tokens, { random }) => {
        const space = random.pick([" ", "\t", "\n", "\r", "\f", "\u00a0", "\u0000", "\ufeff", "   "]);
        const where = random.int(4);
        if (where === 0) return space + text;
        if (where === 1) return text + space;
        const t = tokens[random.int(tokens.length)]!;
        const at = random.chance(0.5) ? t.start : t.end;
        return text.slice(0, at) + space + text.slice(at);
      },
    ],
    [
      `${prefix}.nesting`,
      weight,
      (text, tokens, { random }) => {
        const values = tokens.map((t, i) => [t, i] as const).filter(([t]) => t.kind !== "punct");
        if (values.length === 0) return undefined;
        const [, i] = random.pick(values);
        return replaceTokens(text, tokens, i, i, nested(random.pick([126, 127, 128, 129, 200, 1000, 5000]), random));
      },
    ],
  ];
}

const SAFETENSORS_METADATA = [
  "null",
  "{}",
  '{"format":"pt"}',
  '{"a":1}',
  '{"a":null}',
  '{"a":{"b":"c"}}',
  "[]",
  '"x"',
  '{"a":"\\ud800"}',
  '{"format":"pt","format":"np"}',
  '{"\\u0000":"x"}',
  '{"a":"b","c":"d"}',
  '{"":""}',
  '{"a":1e400}',
];

const UNKNOWN_FIELD_VALUES = ["1", "1e400", "2e308", "9".repeat(400), "[1,2]", '{"a":[]}', '"\\u0000"', "null", '"\\ud800"', "-0", "1.5"];

/** Mutators of safetensors files. */
export const SAFETENSORS_MUTATORS: readonly Mutator[] = [
  ...jsonTokenEdits(1, "header").map(([name, weight, edit]) => headerMutator(name, weight, (h, t, c) => edit(h, t, c))),
  headerMutator(
    "header.dtype",
    3,
    replaceValueOf("dtype", (_, { random }) => `"${random.chance(0.8) ? random.pick(SAFETENSORS_DTYPES) : random.pick(ODD_DTYPES)}"`),
  ),
  headerMutator(
    "header.shape",
    3,
    replaceValueOf("shape", (current, { random }) => {
      const dims = parseJson(current);
      if (random.chance(0.4) && Array.isArray(dims) && dims.every((d) => typeof d === "number")) {
        const d = [...(dims as number[])];
        switch (random.int(5)) {
          case 0:
            d.push(1);
            break;
          case 1:
            d.unshift(random.pick([0, 1, 2]));
            break;
          case 2:
            d.pop();
            break;
          case 3:
            d.reverse();
            break;
          default:
            if (d.length > 0) d[random.int(d.length)]! += random.pick([1, -1]);
        }
        return JSON.stringify(d);
      }
      return random.pick(JSON_SHAPES);
    }),
  ),
  headerMutator(
    "header.offsets",
    3,
    replaceValueOf("data_offsets", (current, { random }, data) => {
      const parsed = parseJson(current);
      const [a, b] = Array.isArray(parsed) && parsed.length === 2 && parsed.every((x) => typeof x === "number") ? (parsed as [number, number]) : [0, 0];
      const n = data.byteLength;
      return random.pick([
        `[${a},${b + 1}]`,
        `[${a - 1},${b}]`,
        `[${a + 1},${b + 1}]`,
        `[${b},${a}]`,
        `[0,${n}]`,
        `[${n},${n}]`,
        "[0,0]",
        `[${a},${a}]`,
        `[${a},18446744073709551615]`,
        `[18446744073709551615,${b}]`,
        `[${a},18446744073709551616]`,
        `["${a}","${b}"]`,
        `[${a}]`,
        `[${a},${b},${b}]`,
        `[${a}.0,${b}]`,
        `[${a},${b}e0]`,
        "{}",
        "null",
        `[-1,${b}]`,
      ]);
    }),
  ),
  headerMutator("header.duplicateKey", 3, (header, tokens, { random }) => {
    const keys = topLevelKeys(tokens);
    if (keys.length === 0) return undefined;
    const meta = valuesOfKey(tokens, "__metadata__").filter((i) => tokens[i]!.text === "{");
    if (meta.length > 0 && random.chance(0.3)) {
      // A metadata key written twice.
      const open = meta[0]!;
      const end = valueEnd(tokens, open);
      if (end > open + 1) {
        const member = header.slice(tokens[open + 1]!.start, tokens[Math.min(end - 1, open + 3)]!.end);
        return `${header.slice(0, tokens[end]!.start)},${member}${header.slice(tokens[end]!.start)}`;
      }
    }
    const k = random.pick(keys);
    const end = valueEnd(tokens, k + 2);
    const member = header.slice(tokens[k]!.start, tokens[end]!.end);
    if (random.chance(0.5)) {
      // The same entry again at the end.
      const close = tokens[tokens.length - 1]!;
      return `${header.slice(0, close.start)},${member}${header.slice(close.start)}`;
    }
    // Another key renamed to this one.
    const other = random.pick(keys);
    return replaceTokens(header, tokens, other, other, tokens[k]!.text);
  }),
  headerMutator("header.metadata", 2, (header, tokens, { random }) => {
    const value = random.pick(SAFETENSORS_METADATA);
    const meta = valuesOfKey(tokens, "__metadata__");
    if (meta.length > 0) return replaceTokens(header, tokens, meta[0]!, valueEnd(tokens, meta[0]!), value);
    if (tokens[0]?.text !== "{") return undefined;
    return `{"__metadata__":${value}${tokens.length > 2 ? "," : ""}${header.slice(tokens[0].end)}`;
  }),
  headerMutator("header.entry", 2, (header, tokens, { random }) => {
    const keys = topLevelKeys(tokens).filter((k) => stringValue(tokens[k]!) !== "__metadata__" && tokens[k + 2]!.text === "{");
    if (keys.length === 0) return undefined;
    const k = random.pick(keys);
    const open = k + 2;
    const close = valueEnd(tokens, open);
    const body = header.slice(tokens[open]!.start, tokens[close]!.end);
    let entry: Record<string, unknown>;
    try {
      entry = JSON.parse(body) as Record<string, unknown>;
    } catch {
      return undefined;
    }
    let replacement: string;
    switch (random.int(4)) {
      case 0: // the array form serde also reads: [dtype, shape, data_offsets]
        replacement = JSON.stringify([entry.dtype, entry.shape, entry.data_offsets]);
        break;
      case 1: {
        const fields = Object.keys(entry);
        const drop = random.pick(fields);
        replacement = JSON.stringify(Object.fromEntries(Object.entries(entry).filter(([f]) => f !== drop)));
        break;
      }
      case 2:
        replacement = `${body.slice(0, -1)},"${random.pick(["extra", "dtype", "shape", "data_offsets", "offsets"])}":${random.pick(UNKNOWN_FIELD_VALUES)}}`;
        break;
      default:
        replacement = JSON.stringify(Object.fromEntries(Object.entries(entry).reverse()));
    }
    return replaceTokens(header, tokens, open, close, replacement);
  }),
  headerMutator("header.unknownTopLevel", 1, (header, tokens, { random }) => {
    if (tokens[0]?.text !== "{") return undefined;
    const value = random.pick([...UNKNOWN_FIELD_VALUES, '{"dtype":"F32","shape":[0],"data_offsets":[0,0]}']);
    return `{"${random.pick(["x", "__metadata", "__metadata__ ", ""])}":${value}${tokens.length > 2 ? "," : ""}${header.slice(tokens[0].end)}`;
  }),
  {
    name: "header.length",
    weight: 2,
    apply(bytes, { random }) {
      const parts = splitSafetensors(bytes);
      if (parts === undefined) return undefined;
      const n = BigInt(utf8(parts.header).byteLength);
      const length = random.pick([
        n + 1n,
        n - 1n,
        n + 8n,
        n - 8n,
        0n,
        2n ** 63n,
        100_000_001n,
        100_000_000n,
        n + BigInt(parts.data.byteLength),
        2n ** 64n - 1n,
      ]);
      return joinSafetensors(bytes.subarray(8, 8 + Number(n)), parts.data, length);
    },
  },
  {
    name: "header.padding",
    weight: 1,
    apply(bytes, { random }) {
      const parts = splitSafetensors(bytes);
      if (parts === undefined) return undefined;
      const pad = random.pick([" ", "        ", "\0", "\n", "\t", " \0"]);
      return joinSafetensors(parts.header + pad.repeat(1 + random.int(8)), parts.data);
    },
  },
  {
    name: "data.length",
    weight: 2,
    apply(bytes, { random }) {
      const parts = splitSafetensors(bytes);
      if (parts === undefined) return undefined;
      const n = bytes.byteLength - parts.data.byteLength;
      if (random.chance(0.5)) return joinBytes(bytes, random.bytes(random.pick([1, 2, 8, 100])));
      return bytes.slice(0, Math.max(n, bytes.byteLength - random.pick([1, 2, 8, bytes.byteLength])));
    },
  },
  {
    // A valid change: a new tensor over appended bytes, both readers must read it.
    name: "data.addTensor",
    weight: 1,
    apply(bytes, { random }) {
      const parts = splitSafetensors(bytes);
      if (parts === undefined) return undefined;
      const tokens = jsonTokens(parts.header);
      if (tokens === undefined || tokens[0]?.text !== "{") return undefined;
      const n = parts.data.byteLength;
      const [dtype, size] = random.pick([
        ["U8", 1],
        ["F32", 4],
        ["BF16", 2],
        ["F4", 0.5],
      ] as const);
      const count = random.pick([0, 1, 2, 3]);
      const length = Math.ceil(count * size);
      const name = random.pick(["new", "é", "a\\u0000", "__metadata__x", "", " "]);
      const entry = `"${name}":{"dtype":"${dtype}","shape":[${count}],"data_offsets":[${n},${n + length}]}`;
      return joinSafetensors(`{${entry}${tokens.length > 2 ? "," : ""}${parts.header.slice(tokens[0].end)}`, joinBytes(parts.data, random.bytes(length)));
    },
  },
  ...bytesAt(0.5),
];

// -- npy --------------------------------------------------------------------------------------

interface NpyParts {
  major: number;
  minor: number;
  header: string;
  data: Uint8Array;
}

const MAGIC = Uint8Array.of(0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59);

function splitNpy(bytes: Uint8Array): NpyParts | undefined {
  if (bytes.byteLength < 10 || !MAGIC.every((b, i) => bytes[i] === b)) return undefined;
  const major = bytes[6]!;
  const minor = bytes[7]!;
  const wide = major >= 2;
  if (bytes.byteLength < (wide ? 12 : 10)) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = wide ? view.getUint32(8, true) : view.getUint16(8, true);
  const start = wide ? 12 : 10;
  if (start + n > bytes.byteLength) return undefined;
  const raw = bytes.subarray(start, start + n);
  const header = major >= 3 ? textDecoder.decode(raw) : String.fromCharCode(...raw);
  return { major, minor, header, data: bytes.subarray(start + n) };
}

/** An npy file: `pad` pads the header with spaces and a newline to a multiple of 64, as numpy does. */
function joinNpy(parts: NpyParts, options: { pad?: boolean; width?: 2 | 4; length?: number } = {}): Uint8Array {
  const width = options.width ?? (parts.major >= 2 ? 4 : 2);
  let text = parts.header;
  if (options.pad ?? true) {
    text = text.replace(/[ \n]*$/, "");
    const total = 6 + 2 + width + (parts.major >= 3 ? utf8(text).byteLength : text.length) + 1;
    text += `${" ".repeat((64 - (total % 64)) % 64)}\n`;
  }
  const body = parts.major >= 3 ? utf8(text) : latin1(text);
  const length = new Uint8Array(width);
  const view = new DataView(length.buffer);
  const n = options.length ?? body.byteLength;
  if (width === 2) view.setUint16(0, n & 0xffff, true);
  else view.setUint32(0, n >>> 0, true);
  return joinBytes(MAGIC, Uint8Array.of(parts.major, parts.minor), length, body, parts.data);
}

/** `[start, end)` of the value of `'key'` in an npy header dict, or undefined. */
function pyValueSpan(header: string, key: string): [number, number] | undefined {
  const match = new RegExp(`(['"])${key}\\1\\s*:\\s*`).exec(header);
  if (match === null) return undefined;
  const start = match.index + match[0].length;
  let at = start;
  const open = header[at];
  if (open === "'" || open === '"') {
    at++;
    while (at < header.length && header[at] !== open) at += header[at] === "\\" ? 2 : 1;
    return [start, Math.min(at + 1, header.length)];
  }
  let depth = 0;
  for (; at < header.length; at++) {
    const c = header[at]!;
    if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") {
      if (depth === 0) break;
      depth--;
      if (depth === 0) {
        at++;
        break;
      }
    } else if (c === "," && depth === 0) break;
  }
  return [start, at];
}

/** descr values grouped by item size, so that a swap often keeps the data's length right. */
const DESCRS_BY_SIZE: Record<number, string[]> = {
  1: [
    "'|b1'",
    "'|u1'",
    "'|i1'",
    "'<V1'",
    "'|V1'",
    "'<f1'",
    "'?'",
    "'b'",
    "'B'",
    "'bool'",
    "'uint8'",
    "'float8_e4m3fn'",
    "'float8_e5m2'",
    "'|S1'",
    "'float8_e4m3'",
  ],
  2: ["'<f2'", "'>f2'", "'<i2'", "'>u2'", "'<V2'", "'half'", "'short'", "'e'", "'bfloat16'", "'|S2'", "'<U1'"],
  4: ["'<f4'", "'>f4'", "'<i4'", "'<u4'", "'<V4'", "'float32'", "'single'", "'f'", "'i'", "'intc'", "'<U1'", "'<f4 '", "'<F4'", "'(2,)<f2'"],
  8: [
    "'<f8'",
    "'>f8'",
    "'<i8'",
    "'<u8'",
    "'<c8'",
    "'>c8'",
    "'double'",
    "'float'",
    "'d'",
    "'l'",
    "'q'",
    "'long'",
    "'int'",
    "'<M8[D]'",
    "'<m8[s]'",
    "'f4,i4'",
    "'(2,)<f4'",
  ],
  16: ["'<c16'", "'<f16'", "'|V16'", "'<g'"],
};
const ODD_DESCRS = [
  "'|O'",
  "'O'",
  "'<V0'",
  "'|V3'",
  "''",
  "'<'",
  "[('a', '<f4')]",
  "[('a', '<f4'), ('a', '<f4')]",
  "('<f4', (1,))",
  "('<f4', (2,))",
  "'\\N{LESS-THAN SIGN}f4'",
  "'\\N{MICRO SIGN}'",
  "u'<f4'",
  "b'<f4'",
  "'<' 'f4'",
  "('<f4')",
  "'<f4'.upper()",
  "None",
  "4",
  "'float64x'",
  "'<float32'",
  "'int4'",
  "'T'",
  "'1f4'",
  "'(1,1)f4'",
  "'()f4'",
  "'f 4'",
  "'f+4'",
  "'f04'",
];

const PY_SHAPES = [
  "()",
  "(0,)",
  "(1,)",
  "(0, 0)",
  "(4294967296, 4294967296, 0)",
  "(0, 4294967296, 4294967296)",
  "(9223372036854775807, 0)",
  "(9223372036854775808, 0)",
  "(9007199254740993, 0)",
  "(-1,)",
  "(True,)",
  "(1.0,)",
  "[2, 3]",
  "(2 ,3)",
  "(0x2, 3)",
  "(2_0,)",
  "(+2,)",
  "(-0,)",
  "(2L,)",
  "((2,),)",
  "None",
  "2",
  "(1,) * 3",
  `(${Array.from({ length: 65 }, () => "1").join(", ")},)`,
];

const FORTRAN_VALUES = ["True", "False", "0", "1", "None", "'True'", "true", "(False)", "not True", "False or True"];

function factorizations(elements: number, random: Random): string {
  if (elements === 0) return random.pick(["(0,)", "(0, 3)", "(3, 0)"]);
  const dims: number[] = [];
  let left = elements;
  for (let f = 2; f <= left && dims.length < 4; f++) {
    while (left % f === 0 && random.chance(0.6)) {
      dims.push(f);
      left /= f;
    }
  }
  if (left > 1) dims.push(left);
  if (random.chance(0.3)) dims.push(1);
  return dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(", ")})`;
}

function currentElements(header: string): number | undefined {
  const span = pyValueSpan(header, "shape");
  if (span === undefined) return undefined;
  const dims = header.slice(span[0], span[1]).match(/\d+/g);
  return dims === null ? 1 : dims.map(Number).reduce((a, b) => a * b, 1);
}

function itemSizeOf(header: string): number | undefined {
  const span = pyValueSpan(header, "descr");
  if (span === undefined) return undefined;
  const m = /(\d+)/.exec(header.slice(span[0], span[1]));
  return m === null ? undefined : Number(m[1]);
}

function npyHeaderMutator(name: string, weight: number, edit: (header: string, random: Random) => string | undefined): Mutator {
  return {
    name,
    weight,
    apply(bytes, { random }) {
      const parts = splitNpy(bytes);
      if (parts === undefined) return undefined;
      const header = edit(parts.header, random);
      return header === undefined ? undefined : joinNpy({ ...parts, header }, { pad: random.chance(0.9) });
    },
  };
}

function replaceSpan(text: string, span: [number, number] | undefined, value: string): string | undefined {
  return span === undefined ? undefined : text.slice(0, span[0]) + value + text.slice(span[1]);
}

/** Mutators of `.npy` files (also used on the members of `.npz` archives). */
export const NPY_MUTATORS: readonly Mutator[] = [
  npyHeaderMutator("npy.descr", 4, (header, random) => {
    const size = itemSizeOf(header);
    const group = size === undefined ? undefined : DESCRS_BY_SIZE[size];
    const value =
      group !== undefined && random.chance(0.6)
        ? random.pick(group)
        : random.chance(0.5)
          ? random.pick(ODD_DESCRS)
          : random.pick(Object.values(DESCRS_BY_SIZE).flat());
    return replaceSpan(header, pyValueSpan(header, "descr"), value);
  }),
  npyHeaderMutator("npy.shape", 4, (header, random) => {
    const elements = currentElements(header);
    const value = elements !== undefined && random.chance(0.4) ? factorizations(elements, random) : random.pick(PY_SHAPES);
    return replaceSpan(header, pyValueSpan(header, "shape"), value);
  }),
  npyHeaderMutator("npy.fortran", 2, (header, random) => replaceSpan(header, pyValueSpan(header, "fortran_order"), random.pick(FORTRAN_VALUES))),
  npyHeaderMutator("npy.keys", 3, (header, random) => {
    const close = header.lastIndexOf("}");
    if (close < 0) return undefined;
    switch (random.int(6)) {
      case 0: // a key again: the last one wins in Python
        return `${header.slice(0, close)}${random.pick(["'shape': (1,), ", "'descr': '<f4', ", "'fortran_order': True, ", "'shape': (), "])}${header.slice(close)}`;
      case 1:
        return `${header.slice(0, close)}'${random.pick(["extra", "Descr", "shape ", ""])}': 1, ${header.slice(close)}`;
      case 2: {
        const key = random.pick(["descr", "shape", "fortran_order"]);
        const m = new RegExp(`'${key}'\\s*:`).exec(header);
        const span = pyValueSpan(header, key);
        if (m === null || span === undefined) return undefined;
        const end = header[span[1]] === "," ? span[1] + 1 : span[1];
        return header.slice(0, m.index) + header.slice(end);
      }
      case 3:
        return header.replace(/'(descr|shape|fortran_order)'/g, '"$1"');
      case 4: {
        const m = /^\{(.*?),?\s*\}/s.exec(header.trimEnd());
        if (m === null) return undefined;
        const items = m[1]!.split(/,\s*(?=['"])/);
        return `{${items.reverse().join(", ")}}${header.slice(m[0].length)}`;
      }
      default:
        return `{${header.slice(header.indexOf("{") + 1, close)}${header.slice(close)}`.replace("{", random.pick(["{ ", "{\n", "{\t", "dict(", "{{"]));
    }
  }),
  npyHeaderMutator("npy.literal", 2, (header, random) => {
    const spans = ["descr", "shape", "fortran_order"].map((k) => pyValueSpan(header, k)).filter((s) => s !== undefined);
    if (spans.length === 0) return undefined;
    const span = random.pick(spans);
    const value = header.slice(span[0], span[1]);
    const forms = [`(${value})`, `${value} # c`, `${value}\\\n`, ` ${value} `, `${value}\n`, `((${value}))`, `${value}é`, `${value}\t`];
    if (value.startsWith("'"))
      forms.push(`u${value}`, `r${value}`, `${value} ''`, `'' ${value}`, `'''${value.slice(1, -1)}'''`, `"${value.slice(1, -1)}"`, `b${value}`);
    return replaceSpan(header, span, random.pick(forms));
  }),
  {
    name: "npy.version",
    weight: 2,
    apply(bytes, { random }) {
      const parts = splitNpy(bytes);
      if (parts === undefined) return undefined;
      const [major, minor] = random.pick([
        [1, 0],
        [2, 0],
        [3, 0],
        [0, 0],
        [1, 1],
        [4, 0],
        [2, 1],
        [255, 0],
      ] as const);
      const keepWidth = random.chance(0.3);
      return joinNpy({ ...parts, major, minor }, { pad: random.chance(0.8), width: keepWidth ? (parts.major >= 2 ? 4 : 2) : undefined });
    },
  },
  {
    name: "npy.headerLength",
    weight: 2,
    apply(bytes, { random }) {
      const parts = splitNpy(bytes);
      if (parts === undefined) return undefined;
      const n = parts.header.length;
      return joinNpy(parts, { pad: false, length: random.pick([n + 1, n - 1, n + 64, n - 64, 0, 0xffff, 10000, 10001, n + parts.data.byteLength]) });
    },
  },
  {
    name: "npy.padding",
    weight: 1,
    apply(bytes, { random }) {
      const parts = splitNpy(bytes);
      if (parts === undefined) return undefined;
      const trimmed = parts.header.replace(/[ \n]*$/, "");
      const header = random.pick([
        trimmed,
        `${trimmed}\n`,
        `${trimmed}${"\0".repeat(8)}\n`,
        `${trimmed}\t\n`,
        `${trimmed}\n\n`,
        `${trimmed}${" ".repeat(Math.max(0, 9990 - trimmed.length))}\n`,
        `${trimmed}${" ".repeat(Math.max(0, 10000 - trimmed.length))}\n`,
      ]);
      return joinNpy({ ...parts, header }, { pad: false });
    },
  },
  {
    name: "npy.data",
    weight: 2,
    apply(bytes, { random, others }) {
      const parts = splitNpy(bytes);
      if (parts === undefined) return undefined;
      const body = bytes.subarray(0, bytes.byteLength - parts.data.byteLength);
      switch (random.int(4)) {
        case 0:
          return joinBytes(body, parts.data.subarray(0, Math.max(0, parts.data.byteLength - random.pick([1, 2, 4, parts.data.byteLength]))));
        case 1:
          return joinBytes(bytes, random.bytes(random.pick([1, 4, 100])));
        default: {
          // An npy followed by a zip archive: numpy reads the array, an unzip the archive.
          const zips = others.filter((o) => o[0] === 0x50 && o[1] === 0x4b);
          return zips.length === 0 ? undefined : joinBytes(bytes, random.pick(zips));
        }
      }
    },
  },
  ...bytesAt(0.4),
];

// -- zip --------------------------------------------------------------------------------------

function zipMutator(name: string, weight: number, edit: (model: ZipModel, random: Random, context: MutationContext) => boolean | Uint8Array): Mutator {
  return {
    name,
    weight,
    apply(bytes, context) {
      const parsed = parseZip(bytes);
      if (parsed === undefined) return undefined;
      const model = cloneZip(parsed);
      const result = edit(model, context.random, context);
      if (result === false) return undefined;
      return result === true ? writeZip(model).bytes : result;
    },
  };
}

/** Which headers of a member a field change goes to. */
function headersOf(random: Random): ("local" | "central")[] {
  return random.pick([["local"], ["central"], ["local", "central"]] as ("local" | "central")[][]);
}

function pickEntry(model: ZipModel, random: Random): ZipModelEntry | undefined {
  return model.entries.length === 0 ? undefined : random.pick(model.entries);
}

const textEncoder = new TextEncoder();

function newName(name: Uint8Array, model: ZipModel, random: Random): Uint8Array {
  const text = textDecoder.decode(name);
  const other = random.pick(model.entries).central.name;
  switch (random.int(14)) {
    case 0:
      return joinBytes(name, Uint8Array.of(0), textEncoder.encode(random.pick(["y", ".npy", "", "x.npy"])));
    case 1:
      return joinBytes(other, Uint8Array.of(0), textEncoder.encode("z"));
    case 2:
      return other;
    case 3:
      return textEncoder.encode(text.replace(/\.npy$/, ""));
    case 4:
      return textEncoder.encode(`${text}.npy`);
    case 5:
      return textEncoder.encode(`../${text}`);
    case 6:
      return textEncoder.encode(`/${text}`);
    case 7:
      return textEncoder.encode(text.replace("/", "\\"));
    case 8:
      return textEncoder.encode(`é${text}`);
    case 9:
      return Uint8Array.of(0x82, ...name); // cp437 é without the UTF-8 flag
    case 10:
      return new Uint8Array(0);
    case 11:
      return textEncoder.encode(text.replace(/\.npy$/, ".NPY"));
    case 12:
      return textEncoder.encode(`${"d/".repeat(random.int(3))}${text}/`);
    default:
      return textEncoder.encode(`${"x".repeat(300)}${text}`);
  }
}

/** An st-convert archive comment with a twist. */
function archiveComment(model: ZipModel, random: Random): Uint8Array {
  const names = model.entries.map((e) => textDecoder.decode(e.central.name).replace(/\.npy$/, ""));
  const someName = names.length > 0 ? random.pick(names) : "w";
  const dtype = random.pick([...SAFETENSORS_DTYPES, "X", ""]);
  const comments = [
    JSON.stringify({ format: "st-convert.npz", version: 1, metadata: null, dtypes: { [someName]: dtype } }),
    JSON.stringify({ format: "st-convert.npz", version: 1, metadata: { format: "pt" }, dtypes: {} }),
    JSON.stringify({ format: "st-convert.npz", version: 2, metadata: null, dtypes: {} }),
    JSON.stringify({ format: "st-convert.npz", version: 1, metadata: { a: 1 }, dtypes: {} }),
    JSON.stringify({ format: "st-convert.npz", version: 1, metadata: null, dtypes: { nosuch: "BF16" } }),
    `{"format":"st-convert.npz","version":1,"metadata":null,"dtypes":{"${someName}":"BF16","${someName}":"F16"}}`,
    JSON.stringify({ format: "st-convert.npz" }),
    "not json",
    "",
    "\u00ff\u00fe",
  ];
  if (random.chance(0.1)) return random.bytes(random.pick([1, 100, 65535]));
  return textEncoder.encode(random.pick(comments));
}

/** Mutators of zip containers (npz and torch checkpoints share them). */
export const ZIP_MUTATORS: readonly Mutator[] = [
  zipMutator("zip.crc", 3, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const value = random.pick([e.central.crc ^ 1, 0, random.uint32(), e.central.crc ^ 0x80000000]) >>> 0;
    const where = random.int(4);
    if (where === 0 || where === 3) e.central.crc = value;
    if (where === 1 || where === 3) e.local.crc = value;
    if (where === 2 && e.descriptor !== undefined) e.descriptor.crc = value;
    return true;
  }),
  zipMutator("zip.size", 3, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const field = random.pick(["size", "compressedSize"] as const);
    const current = e.central[field];
    const value = random.pick([current + 1, current - 1, 0, 0xffffffff, 2 ** 32, current * 2, 2 ** 40, Math.max(0, current - 8)]);
    if (random.chance(0.2) && e.descriptor !== undefined) e.descriptor[field] = value;
    else for (const h of headersOf(random)) e[h][field] = value;
    return true;
  }),
  zipMutator("zip.name", 4, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const name = newName(e.central.name, model, random);
    for (const h of random.chance(0.7) ? (["local", "central"] as const) : headersOf(random)) e[h].name = name;
    if (random.chance(0.3)) for (const h of ["local", "central"] as const) e[h].flags ^= 0x800;
    return true;
  }),
  zipMutator("zip.method", 2, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const method = random.pick([0, 8, 12, 14, 99, 1, 9]);
    for (const h of headersOf(random)) e[h].method = method;
    return true;
  }),
  zipMutator("zip.recompress", 2, (model, random) => {
    // A valid change: stored members deflated and deflated ones stored, CRC and sizes right.
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const content = memberContent(e);
    if (content === undefined) return false;
    const method = e.central.method === 8 ? 0 : 8;
    e.central.method = method;
    e.local.method = method;
    setMemberContent(e, content);
    return true;
  }),
  zipMutator("zip.flags", 2, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const bit = random.pick([0x1, 0x8, 0x800, 0x40, 0x2000, 0x2, 0x20]);
    for (const h of headersOf(random)) e[h].flags ^= bit;
    return true;
  }),
  zipMutator("zip.version", 1, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const v = random.pick([0, 20, 45, 63, 0xffff, 10]);
    for (const h of headersOf(random)) e[h].versionNeeded = v;
    if (random.chance(0.3)) e.central.versionMadeBy = random.pick([0x031e, 0x0014, 0xff3f]);
    return true;
  }),
  zipMutator("zip.localVsCentral", 3, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    switch (random.int(5)) {
      case 0:
        e.local.name = newName(e.local.name, model, random);
        break;
      case 1:
        e.local.method = e.local.method === 8 ? 0 : 8;
        break;
      case 2:
        e.local.flags ^= 0x8;
        break;
      case 3:
        e.local.size += random.pick([1, -1, 1000]);
        break;
      default:
        e.local.crc = (e.local.crc ^ 0x5a5a) >>> 0;
    }
    return true;
  }),
  zipMutator("zip.comment", 3, (model, random) => {
    model.comment = archiveComment(model, random);
    if (model.comment.byteLength > 65535) model.comment = model.comment.subarray(0, 65535);
    return true;
  }),
  zipMutator("zip.around", 3, (model, random, { others, seeds }) => {
    switch (random.int(7)) {
      case 0:
        model.trailer = random.bytes(random.pick([1, 2, 20, 22, 100]));
        return true;
      case 1:
        model.prefix = random.bytes(random.pick([1, 4, 30, 100]));
        return true;
      case 2: {
        const npys = others.filter((o) => o[0] === 0x93);
        if (npys.length === 0) return false;
        model.prefix = random.pick(npys);
        return true;
      }
      case 3:
        model.comment = new Uint8Array(65535).fill(0x20);
        model.trailer = random.bytes(random.pick([1, 2]));
        return true;
      case 4: {
        // Another archive after this one.
        const written = writeZip(model).bytes;
        return joinBytes(written, seeds.length > 0 ? random.pick(seeds) : written);
      }
      case 5:
        model.beforeDirectory = random.bytes(random.pick([1, 4, 46]));
        return true;
      default:
        model.comment = new Uint8Array(random.pick([65535, 65534, 1000])).fill(0x41);
        return true;
    }
  }),
  {
    // Patches after writing: fields of the end records that no longer match the rest.
    name: "zip.eocd",
    weight: 3,
    apply(bytes, { random }) {
      const parsed = parseZip(bytes);
      if (parsed === undefined) return undefined;
      const layout = writeZip(parsed);
      const out = layout.bytes.slice();
      const view = new DataView(out.buffer);
      const e = layout.eocd;
      switch (random.int(8)) {
        case 0:
          view.setUint16(e + 8, view.getUint16(e + 8, true) + 1, true);
          break;
        case 1:
          view.setUint16(e + 10, (view.getUint16(e + 10, true) + random.pick([1, -1, 0xff])) & 0xffff, true);
          break;
        case 2:
          view.setUint32(e + 12, (view.getUint32(e + 12, true) + random.pick([1, -1, 46])) >>> 0, true);
          break;
        case 3:
          view.setUint32(e + 16, (view.getUint32(e + 16, true) + random.pick([1, -1, -22, 30])) >>> 0, true);
          break;
        case 4:
          view.setUint16(e + 20, (view.getUint16(e + 20, true) + random.pick([1, -1, 2, 65535])) & 0xffff, true);
          break;
        case 5:
          view.setUint16(e + 4, random.pick([1, 0xffff]), true);
          view.setUint16(e + 6, random.pick([0, 1]), true);
          break;
        case 6:
          if (layout.zip64Eocd === undefined) return undefined;
          view.setBigUint64(layout.zip64Eocd + random.pick([24, 32, 40, 48]), BigInt(random.pick([0, 1, 2 ** 32, 2 ** 53])), true);
          break;
        default:
          if (layout.zip64Locator === undefined) return undefined;
          view.setBigUint64(layout.zip64Locator + 8, BigInt(random.pick([0, 1, layout.zip64Locator])), true);
      }
      return out;
    },
  },
  {
    name: "zip.offset",
    weight: 2,
    apply(bytes, { random }) {
      const parsed = parseZip(bytes);
      if (parsed === undefined || parsed.entries.length === 0) return undefined;
      const layout = writeZip(parsed);
      const out = layout.bytes.slice();
      const view = new DataView(out.buffer);
      const i = random.int(layout.central.length);
      const at = layout.central[i]! + 42;
      if (view.getUint32(at, true) === 0xffffffff) return undefined;
      const target = random.chance(0.5) ? layout.local[random.int(layout.local.length)]! : view.getUint32(at, true) + random.pick([1, -1, 30, -30, 4]);
      view.setUint32(at, target >>> 0, true);
      return out;
    },
  },
  zipMutator("zip.extra", 2, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const extra = random.pick([
      { id: 0xcafe, data: random.bytes(random.int(8)) },
      { id: 0x0001, data: random.bytes(random.pick([0, 4, 8, 12])) },
      { id: 0x5455, data: Uint8Array.of(1, 0, 0, 0, 0) },
      { id: 0x7075, data: Uint8Array.of(1, 0, 0, 0, 0, 0x41) },
      { id: 0x000a, data: new Uint8Array(32) },
    ]);
    for (const h of headersOf(random)) e[h].extras.push(extra);
    return true;
  }),
  zipMutator("zip.zip64", 2, (model, random) => {
    const e = pickEntry(model, random);
    switch (random.int(4)) {
      case 0:
        model.zip64 = !model.zip64;
        return true;
      case 1:
        if (e === undefined) return false;
        e.local.zip64 = !e.local.zip64;
        return true;
      case 2:
        if (e === undefined) return false;
        for (const f of ["size", "compressedSize", "offset"] as const)
          if (random.chance(0.5)) e.central.zip64.has(f) ? e.central.zip64.delete(f) : e.central.zip64.add(f);
        return true;
      default:
        model.sentinels.entries = !model.sentinels.entries;
        model.zip64 = true;
        return true;
    }
  }),
  zipMutator("zip.descriptor", 1, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    if (e.descriptor !== undefined && random.chance(0.5)) {
      e.descriptor.signature = !e.descriptor.signature;
      if (random.chance(0.5)) e.descriptor.wide = !e.descriptor.wide;
      return true;
    }
    if (e.descriptor === undefined) {
      e.descriptor = { signature: true, wide: random.chance(0.5), crc: e.central.crc, compressedSize: e.central.compressedSize, size: e.central.size };
      e.local.flags |= 8;
      e.central.flags |= 8;
      if (random.chance(0.5)) e.local.crc = e.local.size = e.local.compressedSize = 0;
    } else {
      e.descriptor = undefined;
      e.local.flags &= ~8;
      e.central.flags &= ~8;
      e.local.crc = e.central.crc;
      e.local.size = e.central.size;
      e.local.compressedSize = e.central.compressedSize;
    }
    return true;
  }),
  zipMutator("zip.members", 3, (model, random, { others }) => {
    const e = pickEntry(model, random);
    switch (random.int(5)) {
      case 0:
        if (e === undefined) return false;
        model.entries.splice(model.entries.indexOf(e), 1);
        return true;
      case 1: {
        if (e === undefined) return false;
        const copy = cloneZip({ ...model, entries: [e] }).entries[0]!;
        model.entries.splice(random.int(model.entries.length + 1), 0, copy);
        return true;
      }
      case 2: {
        if (model.entries.length < 2) return false;
        const i = random.int(model.entries.length - 1);
        [model.entries[i], model.entries[i + 1]] = [model.entries[i + 1]!, model.entries[i]!];
        return true;
      }
      default: {
        const base = e ?? undefined;
        const name = textEncoder.encode(random.pick(["x.txt", "data.pkl", "new.npy", "d/", "new", "arr_0.npy", "x.npy.npy"]));
        const content = random.chance(0.5) ? (others.find((o) => o[0] === 0x93) ?? random.bytes(10)) : random.bytes(random.int(40));
        const template: ZipModelEntry = base
          ? cloneZip({ ...model, entries: [base] }).entries[0]!
          : {
              local: { versionNeeded: 20, flags: 0, method: 0, time: 0, date: 0x21, crc: 0, compressedSize: 0, size: 0, name, extras: [], zip64: false },
              central: {
                versionMadeBy: 20,
                versionNeeded: 20,
                flags: 0,
                method: 0,
                time: 0,
                date: 0x21,
                crc: 0,
                compressedSize: 0,
                size: 0,
                name,
                extras: [],
                comment: new Uint8Array(0),
                disk: 0,
                internalAttributes: 0,
                externalAttributes: 0,
                zip64: new Set(),
              },
              data: new Uint8Array(0),
              gap: new Uint8Array(0),
            };
        template.local.name = name;
        template.central.name = name;
        setMemberContent(template, content);
        model.entries.splice(random.int(model.entries.length + 1), 0, template);
        return true;
      }
    }
  }),
  zipMutator("zip.memberBytes", 2, (model, random) => {
    // The member's content changed and its CRC and sizes updated: the container stays valid.
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const content = memberContent(e);
    if (content === undefined) return false;
    const out = content.slice();
    if (out.byteLength > 0 && random.chance(0.7)) out[random.int(out.byteLength)]! ^= 1 << random.int(8);
    else {
      setMemberContent(e, out.subarray(0, random.int(out.byteLength + 1)));
      return true;
    }
    setMemberContent(e, out);
    return true;
  }),
  ...bytesAt(0.3),
];

/** A mutator that changes one member's content with `inner` (CRC and sizes kept right). */
function memberMutator(name: string, weight: number, select: (entry: ZipModelEntry) => boolean, inner: readonly Mutator[]): Mutator {
  return zipMutator(name, weight, (model, random, context) => {
    const candidates = model.entries.filter(select);
    if (candidates.length === 0) return false;
    const e = random.pick(candidates);
    const content = memberContent(e);
    if (content === undefined) return false;
    const { bytes, steps } = mutate(content, inner, context, 1);
    if (steps.length === 0) return false;
    setMemberContent(e, bytes);
    return true;
  });
}

const nameText = (e: ZipModelEntry): string => textDecoder.decode(e.central.name);

/** Mutators of `.npz` archives: the zip records, and the npy members inside (CRC kept right). */
export const NPZ_MUTATORS: readonly Mutator[] = [...ZIP_MUTATORS, memberMutator("npz.member", 12, (e) => nameText(e).endsWith(".npy"), NPY_MUTATORS)];

// -- msgpack (flax) -------------------------------------------------------------------------

function msgpackMutator(name: string, weight: number, edit: (root: MsgNode, random: Random) => MsgNode | undefined | false): Mutator {
  return {
    name,
    weight,
    apply(bytes, { random }) {
      const decoded = decodeMsgpack(bytes);
      if (decoded === undefined) return undefined;
      const root = cloneNode(decoded.node);
      const result = edit(root, random);
      if (result === false || result === undefined) return undefined;
      return joinBytes(encodeMsgpack(result).bytes, bytes.subarray(decoded.end));
    },
  };
}

const str = (text: string): MsgNode => ({ t: "str", v: utf8(text) });
const int = (v: number | bigint): MsgNode => ({ t: "int", v: BigInt(v) });

function timestamp(random: Random): MsgNode {
  const data = (n: number): Uint8Array => {
    const out = new Uint8Array(n);
    const view = new DataView(out.buffer);
    if (n === 4) view.setUint32(0, random.uint32());
    if (n === 8) {
      const nanos = random.pick([0, 1, 999_999_999, 1_000_000_000, 2 ** 30 - 1]);
      view.setUint32(0, ((nanos << 2) >>> 0) | random.int(4));
      view.setUint32(4, random.uint32());
    }
    if (n === 12) {
      view.setUint32(0, random.pick([0, 999_999_999, 1_000_000_000, 0xffffffff]));
      view.setBigInt64(4, BigInt(random.pick([0, -1, 2 ** 40, -(2 ** 40)])));
    }
    return n === 4 || n === 8 || n === 12 ? out : random.bytes(n);
  };
  return { t: "ext", type: -1, data: data(random.pick([4, 8, 12, 3, 5, 16, 0])) };
}

function complexExt(random: Random): MsgNode {
  const payloads: MsgNode[] = [
    {
      t: "array",
      items: [
        { t: "float", v: 1, bits: 64 },
        { t: "float", v: 2, bits: 64 },
      ],
    },
    { t: "array", items: [int(1), int(2)] },
    { t: "array", items: [{ t: "float", v: 1, bits: 64 }] },
    { t: "array", items: [{ t: "float", v: 1, bits: 64 }, { t: "float", v: 2, bits: 64 }, int(3)] },
    str("ab"),
    { t: "array", items: [str("a"), str("b")] },
  ];
  const data = random.chance(0.8) ? encodeMsgpack(random.pick(payloads)).bytes : random.bytes(random.int(9));
  return { t: "ext", type: 2, data: random.chance(0.2) ? joinBytes(data, Uint8Array.of(0xc0)) : data };
}

const FLAX_DTYPE_NAMES = [
  "float32",
  "float64",
  "float16",
  "bfloat16",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "uint32",
  "int64",
  "uint64",
  "bool",
  "complex64",
  "complex128",
  "float8_e4m3fn",
  "float8_e5m2",
  "float8_e8m0fnu",
  "float8_e4m3fnuz",
  "float8_e5m2fnuz",
  "float8_e4m3",
  "float128",
  "int4",
  "uint4",
  "float4_e2m1fn",
  "<f4",
  "f4",
  "float",
  "V2",
  "void16",
  "str64",
  "bytes40",
  "object",
  "datetime64",
  "",
  "float32 ",
  "Float32",
];

const MSG_SHAPES: number[][] = [[], [0], [1], [2], [3], [2, 3], [0, 0], [2 ** 32, 2 ** 32, 0], [0, 2 ** 32, 2 ** 32], [2 ** 53, 0], [1, 1, 1]];

/** Changes an ndarray payload `[shape, dtype, bytes]`; undefined when it is not one. */
function mutateNdarrayPayload(data: Uint8Array, random: Random): Uint8Array | undefined {
  const decoded = decodeMsgpack(data);
  if (decoded === undefined || decoded.node.t !== "array" || decoded.node.items.length !== 3) return undefined;
  const [shape, dtype, buffer] = decoded.node.items as [MsgNode, MsgNode, MsgNode];
  const items = [shape, dtype, buffer];
  switch (random.int(8)) {
    case 0:
      items[0] = { t: "array", items: random.pick(MSG_SHAPES).map((d) => int(d)) };
      break;
    case 1: {
      if (shape.t !== "array") return undefined;
      const dims = [...shape.items];
      const i = random.int(dims.length + 1);
      if (i === dims.length || random.chance(0.3)) dims.splice(random.int(dims.length + 1), 0, int(random.pick([0, 1, 2])));
      else dims[i] = random.pick([int(-1), int(2 ** 63), { t: "float", v: 2, bits: 64 }, { t: "bool", v: true }, str("2"), { t: "nil" }, int(0)]);
      items[0] = { ...shape, items: dims };
      break;
    }
    case 2:
      items[1] = { t: random.chance(0.8) ? "str" : "bin", v: utf8(random.pick(FLAX_DTYPE_NAMES)) } as MsgNode;
      break;
    case 3:
      if (buffer.t !== "bin" && buffer.t !== "str") return undefined;
      items[2] = {
        ...buffer,
        v: random.chance(0.5)
          ? buffer.v.subarray(0, Math.max(0, buffer.v.byteLength - random.pick([1, 2, 4])))
          : joinBytes(buffer.v, random.bytes(random.pick([1, 2, 4]))),
      };
      break;
    case 4:
      if (buffer.t !== "bin") return undefined;
      items[2] = { t: "str", v: buffer.v };
      break;
    case 5:
      items.push(random.chance(0.5) ? { t: "nil" } : int(1));
      break;
    case 6:
      items.pop();
      break;
    default:
      items[0] = random.pick([{ t: "map", entries: [] }, str("(2,)"), int(2), { t: "nil" }] as MsgNode[]);
  }
  return encodeMsgpack({ t: "array", items }).bytes;
}

const ODD_KEYS: MsgNode[] = [
  int(1),
  int(-1),
  { t: "nil" },
  { t: "bin", v: utf8("a") },
  { t: "float", v: 1.5, bits: 64 },
  str(""),
  str("a.b"),
  { t: "str", v: Uint8Array.of(0xff, 0xfe) },
  { t: "bool", v: true },
  str("__msgpack_chunked_array__"),
  { t: "array", items: [] },
  str("0"),
  str("\u0000"),
  str("😀"),
];

function leafValues(random: Random): MsgNode {
  const boolScalar = (byte: number): MsgNode => ({
    t: "ext",
    type: 3,
    data: encodeMsgpack({ t: "array", items: [{ t: "array", items: [] }, str("bool"), { t: "bin", v: Uint8Array.of(byte) }] }).bytes,
  });
  const deep = (n: number): MsgNode => {
    let node: MsgNode = int(0);
    for (let i = 0; i < n; i++) node = { t: "array", items: [node] };
    return node;
  };
  return random.pick([
    { t: "nil" },
    { t: "bool", v: true },
    int(0),
    int(-1),
    int(2n ** 64n - 1n),
    { t: "float", v: 1.5, bits: 64 },
    { t: "float", v: Number.NaN, bits: 32 },
    str("x"),
    { t: "bin", v: Uint8Array.of(1, 2) },
    { t: "map", entries: [] },
    { t: "array", items: [] },
    boolScalar(0x55),
    boolScalar(0x02),
    boolScalar(0x01),
    {
      t: "ext",
      type: 3,
      data: encodeMsgpack({ t: "array", items: [{ t: "array", items: [int(2)] }, str("float32"), { t: "bin", v: new Uint8Array(8) }] }).bytes,
    },
    {
      t: "ext",
      type: 1,
      data: encodeMsgpack({ t: "array", items: [{ t: "array", items: [int(2), int(0)] }, str("uint8"), { t: "bin", v: new Uint8Array(0) }] }).bytes,
    },
    deep(random.pick([500, 1023, 1024, 1025, 3000])),
    { t: "raw", bytes: Uint8Array.of(0xc1) },
  ] as MsgNode[]);
}

/** Mutators of flax msgpack files. */
export const FLAX_MUTATORS: readonly Mutator[] = [
  {
    name: "msgpack.length",
    weight: 3,
    apply(bytes, { random }) {
      const decoded = decodeMsgpack(bytes);
      if (decoded === undefined) return undefined;
      const { bytes: out, lengths } = encodeMsgpack(decoded.node);
      if (lengths.length === 0) return undefined;
      const f = random.pick(lengths);
      const copy = joinBytes(out, bytes.subarray(decoded.end));
      if (f.size === 0) {
        const mask = (1 << f.bits!) - 1;
        const n = copy[f.at]! & mask;
        copy[f.at] = (copy[f.at]! & ~mask) | ((n + random.pick([1, -1, mask])) & mask);
      } else {
        const view = new DataView(copy.buffer);
        const read = f.size === 1 ? view.getUint8(f.at) : f.size === 2 ? view.getUint16(f.at) : view.getUint32(f.at);
        const max = 2 ** (8 * f.size) - 1;
        const n = Math.min(max, Math.max(0, random.pick([read + 1, read - 1, max, read * 2, 0])));
        if (f.size === 1) view.setUint8(f.at, n);
        else if (f.size === 2) view.setUint16(f.at, n);
        else view.setUint32(f.at, n);
      }
      return copy;
    },
  },
  msgpackMutator("msgpack.extType", 3, (root, random) => {
    const exts = allNodes(root).filter((n) => n.node.t === "ext");
    if (exts.length === 0) return undefined;
    const e = random.pick(exts);
    e.set({ ...(e.node as MsgNode & { t: "ext" }), type: random.pick([-1, -2, -128, 0, 2, 3, 1, 4, 127, 5]) });
    return root;
  }),
  msgpackMutator("msgpack.timestamp", 2, (root, random) => {
    const nodes = allNodes(root).filter((n) => n.parent !== undefined && n.node.t !== "map");
    if (nodes.length === 0) return undefined;
    random.pick(nodes).set(timestamp(random));
    return root;
  }),
  msgpackMutator("msgpack.complex", 1, (root, random) => {
    const nodes = allNodes(root).filter((n) => n.parent !== undefined);
    if (nodes.length === 0) return undefined;
    random.pick(nodes).set(complexExt(random));
    return root;
  }),
  msgpackMutator("msgpack.duplicateKey", 3, (root, random) => {
    const maps = allNodes(root).filter((n) => n.node.t === "map" && n.node.entries.length > 0);
    if (maps.length === 0) return undefined;
    const m = random.pick(maps).node as MsgNode & { t: "map" };
    const entry = random.pick(m.entries);
    if (random.chance(0.5) && m.entries.length > 1) {
      const other = random.pick(m.entries);
      other[0] = cloneNode(entry[0]);
    } else {
      const value = random.chance(0.5)
        ? cloneNode(entry[1])
        : random.pick([{ t: "nil" }, cloneNode(random.pick(m.entries)[1]), { t: "map", entries: [] }] as MsgNode[]);
      m.entries.splice(random.int(m.entries.length + 1), 0, [cloneNode(entry[0]), value]);
    }
    return root;
  }),
  msgpackMutator("msgpack.key", 3, (root, random) => {
    const maps = allNodes(root).filter((n) => n.node.t === "map" && n.node.entries.length > 0);
    if (maps.length === 0) return undefined;
    const m = random.pick(maps).node as MsgNode & { t: "map" };
    const entry = random.pick(m.entries);
    const key = entry[0];
    entry[0] =
      random.chance(0.3) && key.t === "str"
        ? str(`${textDecoder.decode(key.v)}${random.pick([".x", ".", "/x", "\u0000", " "])}`)
        : cloneNode(random.pick(ODD_KEYS));
    return root;
  }),
  msgpackMutator("msgpack.form", 2, (root, random) => {
    const nodes = allNodes(root);
    const n = random.pick(nodes);
    const node = n.node;
    const forms: Record<string, number[]> = {
      str: [0xd9, 0xda, 0xdb],
      map: [0xde, 0xdf],
      array: [0xdc, 0xdd],
      int: [0xcf, 0xd3, 0xce, 0xd2, 0xcc],
      bin: [0xc4, 0xc5, 0xc6],
      ext: [0xc7, 0xc8, 0xc9],
    };
    if (node.t === "float") {
      n.set({ ...node, bits: node.bits === 64 ? 32 : 64 });
      return root;
    }
    if (node.t === "bin" && random.chance(0.4)) {
      n.set({ t: "str", v: node.v });
      return root;
    }
    const options = forms[node.t];
    if (options === undefined) return undefined;
    n.set({ ...node, form: random.pick(options) } as MsgNode);
    return root;
  }),
  msgpackMutator("msgpack.ndarray", 6, (root, random) => {
    const exts = allNodes(root).filter((n) => n.node.t === "ext" && (n.node.type === 1 || n.node.type === 3));
    if (exts.length === 0) return undefined;
    const e = random.pick(exts);
    const node = e.node as MsgNode & { t: "ext" };
    const data = mutateNdarrayPayload(node.data, random);
    if (data === undefined) return undefined;
    e.set({ ...node, data });
    return root;
  }),
  msgpackMutator("msgpack.value", 3, (root, random) => {
    const nodes = allNodes(root).filter((n) => n.parent !== undefined);
    if (nodes.length === 0) return undefined;
    const n = random.pick(nodes);
    n.set(leafValues(random));
    return root;
  }),
  msgpackMutator("msgpack.chunked", 2, (root, random) => {
    const maps = allNodes(root).filter(
      (n) => n.node.t === "map" && n.node.entries.some(([k]) => k.t === "str" && textDecoder.decode(k.v) === "__msgpack_chunked_array__"),
    );
    if (maps.length === 0) {
      // Wrap an array into a chunked-array dict, as flax writes large ones.
      const exts = allNodes(root).filter((n) => n.node.t === "ext" && n.node.type === 1 && n.parent !== undefined);
      if (exts.length === 0) return undefined;
      const e = random.pick(exts);
      const decoded = decodeMsgpack((e.node as MsgNode & { t: "ext" }).data);
      if (decoded === undefined || decoded.node.t !== "array" || decoded.node.items.length !== 3) return undefined;
      const shape = decoded.node.items[0]!;
      const elements = shape.t === "array" ? shape.items.reduce((p, d) => p * (d.t === "int" ? Number(d.v) : 1), 1) : 1;
      const flat = encodeMsgpack({ t: "array", items: [{ t: "array", items: [int(elements)] }, decoded.node.items[1]!, decoded.node.items[2]!] }).bytes;
      const dims = shape.t === "array" ? shape.items : [];
      e.set({
        t: "map",
        entries: [
          [str("__msgpack_chunked_array__"), { t: "bool", v: true }],
          [str("shape"), { t: "map", entries: dims.map((d, i) => [str(String(i)), d] as [MsgNode, MsgNode]) }],
          [str("chunks"), { t: "map", entries: [[str("0"), { t: "ext", type: 1, data: flat }]] }],
        ],
      });
      return root;
    }
    const m = random.pick(maps).node as MsgNode & { t: "map" };
    const entry = random.pick(m.entries);
    entry[1] = random.chance(0.5) ? leafValues(random) : { t: "map", entries: [[str(random.pick(["0", "1", "x"])), int(random.pick([0, 1, 2, 100]))]] };
    return root;
  }),
  {
    name: "msgpack.tail",
    weight: 1,
    apply(bytes, { random }) {
      return random.chance(0.5) ? joinBytes(bytes, random.pick([Uint8Array.of(0xc0), Uint8Array.of(0xc1), random.bytes(3)])) : undefined;
    },
  },
  ...bytesAt(0.4),
];

// -- torch ------------------------------------------------------------------------------------

const STORAGE_CLASSES = [
  "FloatStorage",
  "DoubleStorage",
  "HalfStorage",
  "BFloat16Storage",
  "LongStorage",
  "IntStorage",
  "ShortStorage",
  "CharStorage",
  "ByteStorage",
  "BoolStorage",
  "ComplexFloatStorage",
  "ComplexDoubleStorage",
  "UntypedStorage",
  "QInt8Storage",
  "Float8_e4m3fnStorage",
  "NoSuchStorage",
];
const PICKLE_STRINGS = [
  "storage",
  "cpu",
  "cuda:0",
  "meta",
  "0",
  "1",
  "9",
  "",
  "w",
  "state_dict",
  "_metadata",
  "é",
  "a.b",
  "a\u0000b",
  "torch._utils",
  "_rebuild_tensor_v2",
  "_rebuild_tensor_v3",
  "_rebuild_parameter",
  "collections",
  "OrderedDict",
  "torch",
  "float32",
  "bfloat16",
  "uint16",
  "os",
  "system",
  "builtins",
  "eval",
  "set",
  ...STORAGE_CLASSES,
];
const GLOBALS: [string, string][] = [
  ["torch._utils", "_rebuild_tensor_v2"],
  ["torch._utils", "_rebuild_tensor_v3"],
  ["torch._utils", "_rebuild_tensor"],
  ["torch._utils", "_rebuild_parameter"],
  ["torch._utils", "_rebuild_qtensor"],
  ["torch._utils", "_rebuild_sparse_tensor"],
  ["torch._tensor", "_rebuild_from_type_v2"],
  ["collections", "OrderedDict"],
  ["builtins", "set"],
  ["builtins", "eval"],
  ["os", "system"],
  ["torch", "FloatStorage"],
  ["torch", "BFloat16Storage"],
  ["torch", "ComplexDoubleStorage"],
  ["torch", "float32"],
  ["torch", "bfloat16"],
  ["torch", "Size"],
  ["torch.storage", "UntypedStorage"],
  ["torch.nn.parameter", "Parameter"],
  ["numpy.core.multiarray", "scalar"],
  ["argparse", "Namespace"],
  ["__builtin__", "set"],
];
const PICKLE_INTS = [
  0n,
  1n,
  -1n,
  2n,
  3n,
  255n,
  256n,
  65535n,
  2n ** 31n - 1n,
  -(2n ** 31n),
  2n ** 32n,
  2n ** 53n,
  2n ** 63n - 1n,
  2n ** 63n,
  2n ** 64n,
  -(2n ** 63n),
  1000n,
];

function pickleMutator(name: string, weight: number, edit: (ops: PickleOp[], random: Random) => boolean): Mutator {
  return {
    name,
    weight,
    apply(bytes, { random }) {
      const parsed = parsePickle(bytes);
      if (parsed === undefined) return undefined;
      const ops = parsed.ops.map((op) => ({ ...op }));
      if (!edit(ops, random)) return undefined;
      return joinBytes(writePickle(ops), bytes.subarray(parsed.end));
    },
  };
}

/** Mutators of a pickle stream (torch's `data.pkl`, the pickles of a legacy checkpoint). */
export const PICKLE_MUTATORS: readonly Mutator[] = [
  pickleMutator("pickle.int", 5, (ops, random) => {
    const ints = ops.map((op, i) => [op, i] as const).filter(([op]) => intOf(op) !== undefined);
    if (ints.length === 0) return false;
    const [op, i] = random.pick(ints);
    const v = intOf(op)!;
    ops[i] = intOp(random.chance(0.5) ? v + random.pick([1n, -1n, v, -v]) : random.pick(PICKLE_INTS));
    return true;
  }),
  pickleMutator("pickle.string", 4, (ops, random) => {
    const strs = ops.map((op, i) => [op, i] as const).filter(([op]) => strOf(op) !== undefined);
    if (strs.length === 0) return false;
    const [op, i] = random.pick(strs);
    const others = strs.map(([o]) => strOf(o)!);
    ops[i] = strOp(
      random.chance(0.3) ? random.pick(others) : random.chance(0.2) ? `${strOf(op)}${random.pick(["x", ".", "\u0000"])}` : random.pick(PICKLE_STRINGS),
    );
    return true;
  }),
  pickleMutator("pickle.global", 3, (ops, random) => {
    const globals = ops.map((op, i) => [op, i] as const).filter(([op]) => op.code === "c" || op.code === "\x93");
    if (globals.length === 0) return false;
    const [op, i] = random.pick(globals);
    const [module, name] = random.pick(GLOBALS);
    // STACK_GLOBAL takes the two strings before it: pop them, and name the callable with GLOBAL.
    if (op.code === "c") ops[i] = globalOp(module, name);
    else ops.splice(i, 1, { code: "0", arg: new Uint8Array(0) }, { code: "0", arg: new Uint8Array(0) }, globalOp(module, name));
    return true;
  }),
  pickleMutator("pickle.opcode", 3, (ops, random) => {
    const i = random.int(ops.length);
    switch (random.int(5)) {
      case 0:
        ops[i] = { code: random.pick(NO_ARGUMENT_OPCODES), arg: new Uint8Array(0) };
        break;
      case 1:
        ops.splice(i, 1);
        break;
      case 2:
        ops.splice(i, 0, { ...ops[i]! });
        break;
      case 3:
        ops.splice(i, 0, {
          code: random.pick(["(", "0", "2", "N", ")", "\x85", "}", "]", "\x88", "\x94", "1", "t", "R", "b", "s", "u"]),
          arg: new Uint8Array(0),
        });
        break;
      default:
        if (i + 1 >= ops.length) return false;
        [ops[i], ops[i + 1]] = [ops[i + 1]!, ops[i]!];
    }
    return true;
  }),
  pickleMutator("pickle.memo", 2, (ops, random) => {
    const memo = ops.map((op, i) => [op, i] as const).filter(([op]) => "hqjr".includes(op.code));
    if (memo.length === 0) return false;
    const [op, i] = random.pick(memo);
    const wide = op.code === "j" || op.code === "r";
    const current = wide ? new DataView(op.arg.buffer, op.arg.byteOffset).getUint32(0, true) : op.arg[0]!;
    const v = random.pick([0, current + 1, current - 1, 255, 1000]);
    const arg = wide ? new Uint8Array(4) : new Uint8Array(1);
    if (wide) new DataView(arg.buffer).setUint32(0, v >>> 0, true);
    else arg[0] = v & 0xff;
    ops[i] = { code: op.code, arg };
    return true;
  }),
  pickleMutator("pickle.proto", 1, (ops, random) => {
    const i = ops.findIndex((op) => op.code === "\x80");
    if (i < 0) return false;
    ops[i] = { code: "\x80", arg: Uint8Array.of(random.pick([0, 1, 2, 3, 4, 5, 6, 255])) };
    return true;
  }),
  pickleMutator("pickle.bool", 1, (ops, random) => {
    const bools = ops.map((op, i) => [op, i] as const).filter(([op]) => op.code === "\x88" || op.code === "\x89");
    if (bools.length === 0) return false;
    const [op, i] = random.pick(bools);
    ops[i] = { code: op.code === "\x88" ? "\x89" : "\x88", arg: new Uint8Array(0) };
    return true;
  }),
  pickleMutator("pickle.stop", 1, (ops, random) => {
    if (random.chance(0.5)) ops.pop();
    else ops.push({ code: random.pick(["N", "0", "."]), arg: new Uint8Array(0) });
    return true;
  }),
  ...bytesAt(0.2),
];

/** Records of a torch zip checkpoint, by their name after the root folder. */
const recordName = (e: ZipModelEntry): string => nameText(e).replace(/^[^/]*\//, "");

function legacyParts(bytes: Uint8Array): { pickles: [number, number][]; records: number } | undefined {
  const pickles: [number, number][] = [];
  let at = 0;
  for (let i = 0; i < 5; i++) {
    const parsed = parsePickle(bytes, at);
    if (parsed === undefined) return undefined;
    pickles.push([at, parsed.end]);
    at = parsed.end;
  }
  return { pickles, records: at };
}

/** Mutators of torch checkpoints: the zip records, the pickle inside, the storages; and the legacy stream. */
export const TORCH_MUTATORS: readonly Mutator[] = [
  ...ZIP_MUTATORS.map((m) => ({ ...m, weight: (m.weight ?? 1) * 0.5 })),
  memberMutator("torch.pickle", 12, (e) => recordName(e) === "data.pkl", PICKLE_MUTATORS),
  zipMutator("torch.storage", 4, (model, random) => {
    const storages = model.entries.filter((e) => recordName(e).startsWith("data/"));
    if (storages.length === 0) return false;
    const e = random.pick(storages);
    const content = memberContent(e);
    if (content === undefined) return false;
    const cut = random.pick([1, 2, 4, 8, content.byteLength]);
    setMemberContent(e, random.chance(0.5) ? content.subarray(0, Math.max(0, content.byteLength - cut)) : joinBytes(content, random.bytes(cut)));
    return true;
  }),
  zipMutator("torch.record", 3, (model, random) => {
    const e = pickEntry(model, random);
    if (e === undefined) return false;
    const root = nameText(e).split("/")[0]!;
    switch (random.int(5)) {
      case 0: {
        const storages = model.entries.filter((x) => recordName(x).startsWith("data/"));
        if (storages.length === 0) return false;
        const s = random.pick(storages);
        const name = textEncoder.encode(`${root}/data/${random.pick(["99", "0", "1", "x", "0/"])}`);
        s.local.name = name;
        s.central.name = name;
        return true;
      }
      case 1: {
        const byteorder = model.entries.find((x) => recordName(x) === "byteorder");
        if (byteorder === undefined) return false;
        setMemberContent(byteorder, textEncoder.encode(random.pick(["big", "middle", "", "little\n", "LITTLE"])));
        return true;
      }
      case 2: {
        const meta = model.entries.filter((x) => !recordName(x).startsWith("data/") && recordName(x) !== "data.pkl");
        if (meta.length === 0) return false;
        model.entries.splice(model.entries.indexOf(random.pick(meta)), 1);
        return true;
      }
      case 3: {
        const version = model.entries.find((x) => recordName(x) === "version" || recordName(x) === ".format_version");
        if (version === undefined) return false;
        setMemberContent(version, textEncoder.encode(random.pick(["1", "3", "99", "", "x"])));
        return true;
      }
      default: {
        const name = textEncoder.encode(`${random.pick(["other", "", "a/b"])}/${recordName(e)}`);
        e.local.name = name;
        e.central.name = name;
        return true;
      }
    }
  }),
  {
    name: "torch.legacyPickle",
    weight: 8,
    apply(bytes, context) {
      const parts = legacyParts(bytes);
      if (parts === undefined) return undefined;
      const which = context.random.chance(0.6) ? 3 : context.random.int(5);
      const [start, end] = parts.pickles[which]!;
      const { bytes: pickle, steps } = mutate(bytes.subarray(start, end), PICKLE_MUTATORS, context, 1);
      if (steps.length === 0) return undefined;
      return splice(bytes, start, end, pickle);
    },
  },
  {
    name: "torch.legacyRecord",
    weight: 3,
    apply(bytes, { random }) {
      const parts = legacyParts(bytes);
      if (parts === undefined || parts.records + 8 > bytes.byteLength) return undefined;
      const out = bytes.slice();
      const view = new DataView(out.buffer);
      switch (random.int(3)) {
        case 0: {
          const n = view.getBigUint64(parts.records, true);
          view.setBigUint64(parts.records, BigInt.asUintN(64, n + random.pick([1n, -1n, 2n ** 62n, -n])), true);
          return out;
        }
        case 1:
          return out.subarray(0, out.byteLength - random.pick([1, 2, 4]));
        default:
          return joinBytes(out, random.bytes(random.pick([1, 8])));
      }
    },
  },
  ...bytesAt(0.3),
];

// -- JSON (st-convert's form) ------------------------------------------------------------------

/** Token mutators of st-convert's JSON form (no reference reads it: only our verdict is checked). */
export const JSON_MUTATORS: readonly Mutator[] = [
  ...jsonTokenEdits(2, "json").map(
    ([name, weight, edit]): Mutator => ({
      name,
      weight,
      apply(bytes, context) {
        const text = textDecoder.decode(bytes);
        const tokens = jsonTokens(text);
        if (tokens === undefined || tokens.length === 0) return undefined;
        const out = edit(text, tokens, context);
        return out === undefined ? undefined : utf8(out);
      },
    }),
  ),
  ...bytesAt(0.5),
];

/** The mutators of each format the differential fuzzer runs. */
export const MUTATORS: Readonly<Record<string, readonly Mutator[]>> = {
  safetensors: SAFETENSORS_MUTATORS,
  npy: NPY_MUTATORS,
  npz: NPZ_MUTATORS,
  flax: FLAX_MUTATORS,
  torch: TORCH_MUTATORS,
  json: JSON_MUTATORS,
};

export { Random };
