/**
 * GGUF's typed key/value pairs in st-convert's string → string metadata, and back: each key
 * `KEY` becomes `gguf.KEY` with its type and value as JSON (`{"type":"UINT32","value":32}`, an
 * array `{"type":"ARRAY","itemType":"STRING","value":[…]}`), so that GGUF → safetensors (or .bin,
 * .npz, JSON) → GGUF restores every key with its type, in its order. The value forms are those of
 * {@link GgufValue}; the package README documents them.
 */
import { type Metadata, StConvertError, createMetadata, quoteName } from "@st-convert/core";
import type { GgufKv, GgufValue } from "./parseGguf.js";
import { VALUE_TYPES, type ValueTypeName } from "./ggufTypes.js";

/** Prefix of the metadata keys that hold GGUF key/value pairs. */
export const KV_PREFIX = "gguf.";
/**
 * The metadata key of st-convert's record of a GGUF's layout, as JSON: `keys`, the order of its
 * key/value pairs; `tensors`, the order of its tensors; `types`, the ggml type of each tensor kept
 * as its quantized blocks (`--keep-quantized`). Formats that sort metadata or tensors (safetensors
 * sorts both) lose the order; the GGUF writer restores it from here.
 */
export const RECORD_KEY = "st_convert.gguf";

/** What {@link RECORD_KEY} holds. */
export interface GgufRecord {
  readonly keys: readonly string[];
  readonly tensors: readonly string[];
  readonly types?: Readonly<Record<string, string>>;
}

/** The key/value pairs as metadata entries, in their order, then the record of the layout. */
export function kvsToMetadata(kvs: readonly GgufKv[], tensors: readonly string[], keptTypes: ReadonlyMap<string, string>): Metadata {
  const metadata = createMetadata(kvs.map((kv) => [KV_PREFIX + kv.key, encodeValue(kv)]));
  const record: GgufRecord = { keys: kvs.map((kv) => kv.key), tensors, ...(keptTypes.size > 0 ? { types: Object.fromEntries(keptTypes) } : {}) };
  metadata[RECORD_KEY] = JSON.stringify(record);
  return metadata;
}

/** One value as its metadata text. */
export function encodeValue(value: GgufValue): string {
  return JSON.stringify(value.type === "ARRAY" ? { type: value.type, itemType: value.itemType, value: value.value } : { type: value.type, value: value.value });
}

/**
 * The key/value pairs a metadata map asks for: `gguf.KEY` entries decoded to their types, other
 * entries (but the record) as STRING pairs; a plain key that repeats a typed one replaces its value
 * in place (`--metadata general.name=…` over a GGUF's own). The keys the record lists come first,
 * in its order, then the others in the metadata's.
 * @throws StConvertError `InvalidMetadata` naming the key whose text is not a value of the encoding.
 */
export function metadataToKvs(metadata: Metadata | null, record: GgufRecord | undefined = readRecord(metadata)): GgufKv[] {
  const kvs = new Map<string, GgufKv | undefined>();
  for (const key of record?.keys ?? []) kvs.set(key, undefined);
  const plain = new Set<string>();
  // In the metadata's order, each key where it first appears; a plain key beside a typed one of the
  // same name was added by --metadata and wins, in whatever order the two came (safetensors sorts them).
  for (const [entry, text] of Object.entries(metadata ?? {})) {
    if (entry === RECORD_KEY) continue;
    // `format: pt`, which the PyTorch reader adds (safetensors' mark of weights from torch), is no
    // key of the GGUF a record describes: GGUF → .bin → GGUF gives the file back.
    if (entry === "format" && text === "pt" && record !== undefined && !record.keys.includes("format")) continue;
    if (!entry.startsWith(KV_PREFIX)) {
      plain.add(entry);
      kvs.set(entry, { key: entry, type: "STRING", value: text });
      continue;
    }
    const key = entry.slice(KV_PREFIX.length);
    const value = decodeValue(entry, text);
    if (!plain.has(key)) kvs.set(key, { key, ...value });
  }
  return [...kvs.values()].filter((kv): kv is GgufKv => kv !== undefined);
}

/**
 * The record of a GGUF's layout in `metadata`, if any.
 * @throws StConvertError `InvalidMetadata` when it is not one.
 */
export function readRecord(metadata: Metadata | null): GgufRecord | undefined {
  const text = metadata?.[RECORD_KEY];
  if (text === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const strings = (value: unknown) => Array.isArray(value) && value.every((v) => typeof v === "string");
  const record = parsed as Partial<GgufRecord> | undefined;
  if (
    typeof record !== "object" ||
    record === null ||
    !strings(record.keys) ||
    !strings(record.tensors) ||
    (record.types !== undefined &&
      (typeof record.types !== "object" || record.types === null || !Object.values(record.types).every((v) => typeof v === "string")))
  ) {
    throw new StConvertError(
      "InvalidMetadata",
      `metadata ${quoteName(RECORD_KEY)} is not st-convert's record of a GGUF layout ({"keys": […], "tensors": […], "types": {…}})`,
    );
  }
  return record as GgufRecord;
}

function invalid(entry: string, why: string): StConvertError {
  return new StConvertError(
    "InvalidMetadata",
    `metadata ${quoteName(entry)}: ${why} (a GGUF value is JSON such as {"type":"UINT32","value":32}; see the gguf package README)`,
  );
}

/** A `gguf.KEY` entry's text as a value, checked item by item. */
export function decodeValue(entry: string, text: string): GgufValue {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalid(entry, "not JSON");
  }
  if (typeof parsed !== "object" || parsed === null) throw invalid(entry, "not a JSON object");
  const { type, itemType, value } = parsed as Record<string, unknown>;
  if (!isTypeName(type)) throw invalid(entry, `type ${JSON.stringify(type)} is not one of ${VALUE_TYPES.join(", ")}`);
  if (type !== "ARRAY") {
    checkItem(entry, type, value);
    return { type, value };
  }
  return { type, ...checkArray(entry, itemType, value) };
}

function isTypeName(value: unknown): value is ValueTypeName {
  return typeof value === "string" && (VALUE_TYPES as readonly string[]).includes(value);
}

function checkArray(entry: string, itemType: unknown, value: unknown): { itemType: ValueTypeName; value: unknown[] } {
  if (!isTypeName(itemType)) throw invalid(entry, `itemType ${JSON.stringify(itemType)} is not one of ${VALUE_TYPES.join(", ")}`);
  if (!Array.isArray(value)) throw invalid(entry, "an ARRAY's value is not a JSON array");
  for (const item of value) {
    if (itemType === "ARRAY") {
      if (typeof item !== "object" || item === null) throw invalid(entry, "an array of arrays holds {itemType, value} objects");
      const inner = item as Record<string, unknown>;
      checkArray(entry, inner.itemType, inner.value);
    } else {
      checkItem(entry, itemType, item);
    }
  }
  return { itemType, value };
}

const INT_RANGES: Partial<Record<ValueTypeName, readonly [bigint, bigint]>> = {
  UINT8: [0n, 255n],
  INT8: [-128n, 127n],
  UINT16: [0n, 65535n],
  INT16: [-32768n, 32767n],
  UINT32: [0n, 4294967295n],
  INT32: [-2147483648n, 2147483647n],
  UINT64: [0n, (1n << 64n) - 1n],
  INT64: [-(1n << 63n), (1n << 63n) - 1n],
};

/** Checks one scalar against its type's form. */
function checkItem(entry: string, type: ValueTypeName, value: unknown): void {
  const range = INT_RANGES[type];
  if (range !== undefined) {
    const wide = type === "UINT64" || type === "INT64";
    const ok = wide ? typeof value === "string" && /^-?\d+$/.test(value) : typeof value === "number" && Number.isInteger(value);
    if (!ok) throw invalid(entry, `${type} ${JSON.stringify(value)} is not ${wide ? "a decimal string" : "an integer"}`);
    const n = BigInt(value as string | number);
    if (n < range[0] || n > range[1]) throw invalid(entry, `${JSON.stringify(value)} is out of ${type}'s range`);
    return;
  }
  if (type === "FLOAT32" || type === "FLOAT64") {
    const digits = type === "FLOAT32" ? 8 : 16;
    const ok = (typeof value === "number" && Number.isFinite(value)) || (typeof value === "string" && new RegExp(`^0x[0-9a-f]{${digits}}$`).test(value));
    if (!ok) throw invalid(entry, `${type} ${JSON.stringify(value)} is neither a finite number nor the hex of its bits ("0x${"0".repeat(digits)}")`);
    return;
  }
  if (type === "BOOL") {
    if (typeof value !== "boolean") throw invalid(entry, `BOOL ${JSON.stringify(value)} is not true or false`);
    return;
  }
  if (type === "STRING") {
    const hex = typeof value === "object" && value !== null ? (value as Record<string, unknown>).hex : undefined;
    if (typeof value !== "string" && !(typeof hex === "string" && /^([0-9a-f]{2})*$/.test(hex))) {
      throw invalid(entry, `STRING ${JSON.stringify(value)} is neither a string nor {"hex": …}`);
    }
    return;
  }
  throw invalid(entry, `${type} cannot be an item here`);
}
