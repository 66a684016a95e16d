/**
 * The `.metadata` file of a distributed checkpoint (`torch.distributed.checkpoint`, DCP): a pickle
 * of `torch.distributed.checkpoint.metadata.Metadata`, decoded by the pickle reader that runs
 * nothing, with an allow-list of exactly the symbols DCP writes there (its dataclasses,
 * `torch.Size`, dtypes, layouts, memory formats, `pathlib` paths). Every other callable is refused
 * by name; nothing is imported or called.
 *
 * Spec: torch 2.13 `torch/distributed/checkpoint/metadata.py` (`Metadata`, `TensorStorageMetadata`,
 * `TensorProperties`, `ChunkStorageMetadata`, `BytesStorageMetadata`, `MetadataIndex`,
 * `StorageMeta`) and `filesystem.py` (`_StorageInfo`); the facts measured on torch's own folders
 * are in the repository's `docs/gguf-dcp.md`.
 */
import { StConvertError } from "@st-convert/core";
import { TORCH_DTYPES, type TorchDtype } from "./torchSymbols.js";
import {
  type PickleValue,
  type PyGlobal,
  type PyOpaque,
  type PyTuple,
  type UnpickleOptions,
  type UnpicklerHooks,
  describeValue,
  unpickle,
} from "./Unpickler.js";

const METADATA = "torch.distributed.checkpoint.metadata";
const FILESYSTEM = "torch.distributed.checkpoint.filesystem";

/** DCP's dataclasses, made by `NEWOBJ` with no arguments and filled by `BUILD`. */
const DATACLASSES = new Set([
  `${METADATA}.Metadata`,
  `${METADATA}.TensorStorageMetadata`,
  `${METADATA}.TensorProperties`,
  `${METADATA}.ChunkStorageMetadata`,
  `${METADATA}.BytesStorageMetadata`,
  `${METADATA}.MetadataIndex`,
  `${METADATA}.StorageMeta`,
  `${FILESYSTEM}._StorageInfo`,
]);

/** The other callables a `.metadata` pickle holds: sizes, layouts, memory formats, the checkpoint's path. */
const CALLABLES = new Set([
  "torch.Size",
  "torch.serialization._get_layout",
  `${METADATA}._MEM_FORMAT_ENCODING`,
  "pathlib.PosixPath",
  "pathlib.WindowsPath",
  "pathlib.PurePosixPath",
  "pathlib.PureWindowsPath",
  "pathlib.Path",
]);

/** Where a chunk's (or a non-tensor item's) bytes are: a whole `torch.save` record in a file of the folder. */
export interface DcpStorage {
  /** The file, relative to the folder, as the metadata names it (`__0_0.distcp`). */
  readonly relativePath: string;
  readonly offset: number;
  readonly length: number;
}

/** One piece of a tensor as one rank saved it. */
export interface DcpChunk {
  readonly offsets: readonly number[];
  readonly sizes: readonly number[];
  readonly storage: DcpStorage;
}

export interface DcpTensorItem {
  readonly kind: "tensor";
  /** The fully qualified name (`model.layers.0.attn.q_proj.weight`, `optim.state.….exp_avg`). */
  readonly name: string;
  readonly dtype: TorchDtype;
  readonly size: readonly number[];
  readonly chunks: readonly DcpChunk[];
}

/** A non-tensor item (`BytesStorageMetadata`): a `torch.save` of any object. */
export interface DcpBytesItem {
  readonly kind: "bytes";
  readonly name: string;
  readonly storage: DcpStorage;
}

export type DcpItem = DcpTensorItem | DcpBytesItem;

/** A decoded `.metadata`: the items in the order DCP lists them. */
export interface DcpMetadata {
  readonly items: readonly DcpItem[];
  /** `Metadata.version` (`1.0.0` in torch 2.13), when recorded. */
  readonly version: string | undefined;
}

function invalid(rule: string, tensor?: string): never {
  throw new StConvertError("InvalidDcpMetadata", rule, { tensor });
}

function symbol(value: PyGlobal): string {
  return `${value.module}.${value.name}`;
}

/** The hooks: the allow-listed symbols become opaque values read below; anything else is refused when called. */
const DCP_HOOKS: UnpicklerHooks = {
  persistentLoad() {
    throw new StConvertError("UnpicklingError", "a persistent id in DCP metadata: torch writes none there");
  },
  reduce(callee) {
    const name = symbol(callee);
    if (DATACLASSES.has(name) || CALLABLES.has(name)) return undefined;
    throw new StConvertError("UnsupportedGlobal", `DCP metadata calls ${name}, which is not one of the classes DCP writes there (refused, never run)`);
  },
  newObject(cls) {
    const name = symbol(cls);
    if (DATACLASSES.has(name) || CALLABLES.has(name)) return undefined;
    throw new StConvertError("UnsupportedGlobal", `DCP metadata makes a ${name}, which is not one of the classes DCP writes there (refused, never run)`);
  },
};

function isOpaque(value: PickleValue, callee: string): value is PyOpaque {
  return value !== null && typeof value === "object" && value.kind === "opaque" && value.callee === callee;
}

/**
 * A dataclass's fields: `NEWOBJ(cls, ())` then `BUILD` with a dict of its fields (a `(dict,
 * slots)` pair too), or no `BUILD` for one without fields.
 */
function fields(value: PickleValue, callee: string, what: string, tensor?: string): Map<string, PickleValue> {
  if (!isOpaque(value, `${METADATA}.${callee}`) && !isOpaque(value, `${FILESYSTEM}.${callee}`))
    invalid(`${what} is ${describeValue(value)}, not a ${callee}`, tensor);
  const given = value.given;
  const args = given[0];
  if (args === undefined || args === null || typeof args !== "object" || args.kind !== "tuple" || args.items.length > 0)
    invalid(`${what} (${callee}) is made with arguments; DCP makes it empty and sets its fields`, tensor);
  const out = new Map<string, PickleValue>();
  for (let state of given.slice(1)) {
    if (state !== null && typeof state === "object" && state.kind === "tuple" && state.items.length === 2) state = state.items[0]!;
    if (state === null) continue;
    if (typeof state !== "object" || state.kind !== "dict")
      invalid(`${what} (${callee}) has ${describeValue(state)} as its state, not a dict of fields`, tensor);
    for (const { key, value: field } of state.entries.values()) {
      if (typeof key !== "string") invalid(`${what} (${callee}) names a field by ${describeValue(key)}`, tensor);
      out.set(key, field);
    }
  }
  return out;
}

/** A `torch.Size` (or a tuple) of non-negative integers below 2^53. */
function sizeOf(value: PickleValue | undefined, what: string, tensor?: string): number[] {
  let items: readonly PickleValue[] | undefined;
  if (value !== undefined && isOpaque(value, "torch.Size")) {
    const args = value.given[0];
    const inner = args !== undefined && args !== null && typeof args === "object" && args.kind === "tuple" ? args.items[0] : undefined;
    if (inner !== undefined && inner !== null && typeof inner === "object" && (inner.kind === "tuple" || inner.kind === "list")) items = inner.items;
  } else if (value !== undefined && value !== null && typeof value === "object" && value.kind === "tuple") items = value.items;
  if (items === undefined) return invalid(`${what} is ${value === undefined ? "missing" : describeValue(value)}, not a torch.Size`, tensor);
  if (items.length > 64) invalid(`${what} has ${items.length} dimensions, more than 64`, tensor);
  return items.map((item, i) => {
    if (typeof item === "bigint") throw new StConvertError("ValidationOverflow", `${what}[${i}] is ${item}, past 2^53 - 1`, { tensor });
    if (typeof item !== "number" || !Number.isSafeInteger(item) || item < 0)
      return invalid(`${what}[${i}] is ${describeValue(item)}, not a non-negative integer`, tensor);
    return item;
  });
}

function integer(value: PickleValue | undefined, what: string, tensor?: string): number {
  if (typeof value === "bigint") throw new StConvertError("ValidationOverflow", `${what} is ${value}, past 2^53 - 1`, { tensor });
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0)
    return invalid(`${what} is ${value === undefined ? "missing" : describeValue(value)}, not a non-negative integer`, tensor);
  return value;
}

/** The storage a `MetadataIndex` key names: its fqn and the chunk's offsets (None for a non-tensor item). */
function indexKey(fqn: string, offsets: readonly number[] | undefined): string {
  return offsets === undefined ? `${fqn}\0` : `${fqn}\0${offsets.join(",")}`;
}

/**
 * A `_StorageInfo`: the file, the range, and no transform (a compression or other encoding that
 * `transform_descriptors` names: refused by name, as st-convert implements none).
 */
function storageOf(value: PickleValue, tensor: string): DcpStorage {
  const f = fields(value, "_StorageInfo", "a storage entry", tensor);
  const relativePath = f.get("relative_path");
  if (typeof relativePath !== "string") invalid(`its storage's relative_path is ${describeValue(relativePath ?? null)}, not a str`, tensor);
  const transforms = f.get("transform_descriptors");
  if (transforms !== undefined && transforms !== null) {
    const list = typeof transforms === "object" && (transforms.kind === "list" || transforms.kind === "tuple") ? transforms.items : undefined;
    if (list === undefined) invalid(`its storage's transform_descriptors is ${describeValue(transforms)}, not a list`, tensor);
    if (list.length > 0) {
      const names = list.map((t) => (typeof t === "string" ? JSON.stringify(t) : describeValue(t)));
      throw new StConvertError("UnsupportedTransform", `its bytes are stored through transforms st-convert does not implement: ${names.join(", ")}`, {
        tensor,
      });
    }
  }
  return {
    relativePath,
    offset: integer(f.get("offset"), "its storage offset", tensor),
    length: integer(f.get("length"), "its storage length", tensor),
  };
}

/**
 * Decodes a `.metadata` pickle into its items: tensors with their dtype, size and chunks (each
 * located through `storage_data`), and non-tensor items. Only the structure is checked here; how
 * the chunks tile their tensor is the reader's (`readDcp`).
 * @throws StConvertError `InvalidDcpMetadata` (not DCP's structure, a chunk with no storage),
 *   `UnsupportedGlobal` (a callable outside the allow-list), `UnsupportedDtype`,
 *   `UnsupportedTransform`, `ValidationOverflow`, and the pickle reader's codes.
 */
export function decodeDcpMetadata(bytes: Uint8Array, options: UnpickleOptions = {}): DcpMetadata {
  const { value } = unpickle(bytes, DCP_HOOKS, options);
  const root = fields(value, "Metadata", "the pickle");
  const sdm = root.get("state_dict_metadata");
  if (sdm === undefined || sdm === null || typeof sdm !== "object" || sdm.kind !== "dict")
    invalid(`state_dict_metadata is ${describeValue(sdm ?? null)}, not a dict`);
  const storageData = root.get("storage_data");
  const storages = new Map<string, DcpStorage>();
  if (storageData !== undefined && storageData !== null) {
    if (typeof storageData !== "object" || storageData.kind !== "dict") invalid(`storage_data is ${describeValue(storageData)}, not a dict`);
    for (const { key, value: info } of storageData.entries.values()) {
      const index = fields(key, "MetadataIndex", "a storage_data key");
      const fqn = index.get("fqn");
      if (typeof fqn !== "string") invalid(`a storage_data key's fqn is ${describeValue(fqn ?? null)}, not a str`);
      const offset = index.get("offset");
      const offsets = offset === undefined || offset === null ? undefined : sizeOf(offset, "a storage_data key's offset", fqn);
      const key2 = indexKey(fqn, offsets);
      if (storages.has(key2)) invalid(`storage_data names the chunk at [${offsets?.join(", ") ?? ""}] twice`, fqn);
      storages.set(key2, storageOf(info, fqn));
    }
  }
  const items: DcpItem[] = [];
  for (const { key, value: entry } of sdm.entries.values()) {
    if (typeof key !== "string") invalid(`state_dict_metadata has a ${describeValue(key)} key, not a str`);
    const name = key;
    if (isOpaque(entry, `${METADATA}.BytesStorageMetadata`)) {
      fields(entry, "BytesStorageMetadata", "its metadata", name);
      const storage = storages.get(indexKey(name, undefined));
      if (storage === undefined) invalid("storage_data has no entry for this item", name);
      items.push({ kind: "bytes", name, storage });
      continue;
    }
    const f = fields(entry, "TensorStorageMetadata", "its metadata", name);
    const size = sizeOf(f.get("size"), "its size", name);
    const properties = f.get("properties");
    if (!isOpaque(properties ?? null, `${METADATA}.TensorProperties`))
      invalid(`its properties are ${describeValue(properties ?? null)}, not TensorProperties`, name);
    const dtype = propertiesDtype(properties as PyOpaque, name);
    const list = f.get("chunks");
    if (list === undefined || list === null || typeof list !== "object" || list.kind !== "list")
      invalid(`its chunks are ${describeValue(list ?? null)}, not a list`, name);
    const chunks = list.items.map((chunk, i): DcpChunk => {
      const c = fields(chunk, "ChunkStorageMetadata", `chunk #${i}`, name);
      const offsets = sizeOf(c.get("offsets"), `chunk #${i}'s offsets`, name);
      const sizes = sizeOf(c.get("sizes"), `chunk #${i}'s sizes`, name);
      const storage = storages.get(indexKey(name, offsets));
      if (storage === undefined) invalid(`storage_data has no entry for the chunk at [${offsets.join(", ")}]`, name);
      return { offsets, sizes, storage };
    });
    items.push({ kind: "tensor", name, dtype, size, chunks });
  }
  const version = root.get("version");
  return { items, version: typeof version === "string" ? version : undefined };
}

/**
 * The dtype of a `TensorProperties`: its state is the tuple `(dtype, layout, requires_grad,
 * memory_format, pin_memory)` (its `__getstate__`), or a dict of those fields. Only strided
 * tensors are DCP's dense tensors: another layout is refused.
 */
function propertiesDtype(properties: PyOpaque, name: string): TorchDtype {
  const state = properties.given[1];
  let dtype: PickleValue | undefined;
  let layout: PickleValue | undefined;
  if (state !== undefined && state !== null && typeof state === "object" && state.kind === "tuple") {
    [dtype, layout] = (state as PyTuple).items;
  } else if (state !== undefined && state !== null && typeof state === "object" && state.kind === "dict") {
    dtype = state.entries.get("sdtype")?.value;
    layout = state.entries.get("slayout")?.value;
  } else invalid(`its TensorProperties hold ${describeValue(state ?? null)}, not (dtype, layout, …)`, name);
  if (dtype === undefined || dtype === null || typeof dtype !== "object" || dtype.kind !== "global" || dtype.module !== "torch")
    invalid(`its dtype is ${describeValue(dtype ?? null)}, not a torch dtype`, name);
  const known = TORCH_DTYPES.get(dtype.name);
  if (known === undefined) invalid(`its dtype torch.${dtype.name} is not a torch dtype`, name);
  if (known.code === undefined) throw new StConvertError("UnsupportedDtype", `torch.${known.torchName} has no safetensors dtype`, { tensor: name });
  if (layout !== undefined && layout !== null) {
    const strided = isOpaque(layout, "torch.serialization._get_layout") && (layout.given[0] as PyTuple | undefined)?.items?.[0] === "torch.strided";
    if (!strided) throw new StConvertError("Unsupported", `a ${describeValue(layout)} layout: only dense (strided) tensors are read`, { tensor: name });
  }
  return known;
}
