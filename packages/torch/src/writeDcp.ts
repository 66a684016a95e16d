/**
 * A distributed checkpoint (`torch.distributed.checkpoint`, DCP) written as one rank saves it:
 * `__0_0.distcp` holding each tensor as a whole `torch.save(tensor)` record one after the other,
 * and `.metadata`, the pickle of `Metadata` that maps each fully qualified name to its one chunk
 * and that chunk to its range of the file. `dcp.load` reads it into a state dict of tensors of the
 * same shapes; `dcp_to_torch_save` consolidates it. This is how a training run (FSDP2,
 * torchtitan) starts from weights held in another format.
 *
 * Spec: torch 2.13 `torch/distributed/checkpoint/metadata.py`, `filesystem.py` (`_StorageInfo`,
 * the `__{rank}_{n}.distcp` names), `default_planner.py`; the layout of torch's own folders
 * (docs/gguf-dcp.md).
 */
import { type ByteSink, StConvertError, type TensorEntry, type TensorSource, hasLoneSurrogate, quoteName } from "@st-convert/core";
import { TORCH_DTYPES } from "./torchSymbols.js";
import { PickleBuilder, writeTorch } from "./writeTorch.js";

/** The one data file a single rank writes (rank 0, its first file). */
export const DCP_DATA_FILE = "__0_0.distcp";
/** The metadata file, read first by every DCP loader. */
export const DCP_METADATA_FILE = ".metadata";

/** Options of {@link writeDcp}. */
export interface DcpWriteOptions {
  /** Receives non-fatal notices (metadata keys that clash with a tensor's name). */
  onWarning?: (message: string) => void;
  /** `"fflate"` forces the portable CRC-32 (browsers); default `node:zlib` when present. */
  codec?: "auto" | "fflate";
}

/** A record written into the data file. */
interface Placed {
  readonly name: string;
  readonly tensor: TensorEntry | undefined;
  readonly offset: number;
  readonly length: number;
}

/** The sink with a count of the bytes given to it, kernel copies included. */
function counted(sink: ByteSink): ByteSink & { readonly written: () => number } {
  let written = 0;
  return {
    name: sink.name,
    written: () => written,
    write(chunk) {
      written += chunk.byteLength;
      return sink.write(chunk);
    },
    copyFrom:
      sink.copyFrom === undefined
        ? undefined
        : (source, offset, length) => {
            const copying = sink.copyFrom!(source, offset, length);
            if (copying !== undefined) written += length;
            return copying;
          },
    copyFromCrc32:
      sink.copyFromCrc32 === undefined
        ? undefined
        : (source, offset, length, previous) => {
            const copying = sink.copyFromCrc32!(source, offset, length, previous);
            if (copying !== undefined) written += length;
            return copying;
          },
    close: () => sink.close(),
    abort: () => sink.abort(),
  };
}

/** torch's name of a safetensors dtype (`BF16` → `bfloat16`). */
function torchDtypeName(tensor: TensorEntry): string {
  for (const [name, dtype] of TORCH_DTYPES) if (dtype.code === tensor.dtype && dtype.torchName === name) return name;
  throw new StConvertError("Unsupported", `${tensor.dtype} has no torch dtype`, { tensor: tensor.name });
}

const METADATA = "torch.distributed.checkpoint.metadata";

/** `torch.Size(values)`. */
function size(p: PickleBuilder, values: readonly number[]): void {
  p.global("torch", "Size");
  p.intTuple(values);
  p.bytes(0x85, 0x52); // TUPLE1, REDUCE
}

/** `cls()` filled by `BUILD` with `fields` (each written by its function), as pickle saves a dataclass. */
function dataclass(p: PickleBuilder, module: string, name: string, fields: readonly [string, () => void][]): void {
  p.global(module, name);
  p.bytes(0x29, 0x81); // EMPTY_TUPLE, NEWOBJ
  if (fields.length === 0) return;
  p.bytes(0x7d, 0x28); // EMPTY_DICT, MARK
  for (const [key, write] of fields) {
    p.memoized(`str ${key}`, () => p.string(key));
    write();
  }
  p.bytes(0x75, 0x62); // SETITEMS, BUILD
}

/** The `.metadata` pickle (protocol 2) for the records placed. */
function metadataPickle(placed: readonly Placed[]): Uint8Array {
  const p = new PickleBuilder();
  p.bytes(0x80, 2);
  const none = () => p.bytes(0x4e);
  const text = (s: string) => () => {
    p.string(s);
    p.put();
  };
  const int = (n: number) => () => p.int(n);
  dataclass(p, METADATA, "Metadata", [
    [
      "state_dict_metadata",
      () => {
        p.bytes(0x7d, 0x28);
        for (const item of placed) {
          text(item.name)();
          const t = item.tensor;
          if (t === undefined) {
            dataclass(p, METADATA, "BytesStorageMetadata", []);
            continue;
          }
          dataclass(p, METADATA, "TensorStorageMetadata", [
            [
              "properties",
              () => {
                // TensorProperties pickles its state as (dtype, layout, requires_grad, memory_format, pin_memory).
                p.global(METADATA, "TensorProperties");
                p.bytes(0x29, 0x81, 0x28);
                p.global("torch", torchDtypeName(t));
                p.global("torch.serialization", "_get_layout");
                p.memoized("str torch.strided", () => p.string("torch.strided"));
                p.bytes(0x85, 0x52, 0x89); // TUPLE1, REDUCE, False
                p.global(METADATA, "_MEM_FORMAT_ENCODING");
                p.int(0);
                p.bytes(0x85, 0x52, 0x89, 0x74, 0x62); // TUPLE1, REDUCE, False, TUPLE, BUILD
              },
            ],
            ["size", () => size(p, t.shape)],
            [
              "chunks",
              () => {
                p.bytes(0x5d);
                dataclass(p, METADATA, "ChunkStorageMetadata", [
                  [
                    "offsets",
                    () =>
                      size(
                        p,
                        t.shape.map(() => 0),
                      ),
                  ],
                  ["sizes", () => size(p, t.shape)],
                ]);
                p.bytes(0x61); // APPEND
              },
            ],
          ]);
        }
        p.bytes(0x75);
      },
    ],
    [
      "planner_data",
      () => {
        p.bytes(0x7d, 0x28);
        for (const item of placed) {
          text(item.name)();
          p.string(item.name);
          p.bytes(0x85);
        }
        p.bytes(0x75);
      },
    ],
    [
      "storage_data",
      () => {
        p.bytes(0x7d, 0x28);
        for (const item of placed) {
          const t = item.tensor;
          dataclass(p, METADATA, "MetadataIndex", [
            ["fqn", text(item.name)],
            [
              "offset",
              t === undefined
                ? none
                : () =>
                    size(
                      p,
                      t.shape.map(() => 0),
                    ),
            ],
            ["index", t === undefined ? none : int(0)],
          ]);
          dataclass(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo", [
            ["relative_path", () => p.memoized(`str ${DCP_DATA_FILE}`, () => p.string(DCP_DATA_FILE))],
            ["offset", int(item.offset)],
            ["length", int(item.length)],
          ]);
        }
        p.bytes(0x75);
      },
    ],
    ["storage_meta", none],
    ["version", text("1.0.0")],
  ]);
  p.bytes(0x2e);
  return p.finish();
}

/**
 * Writes a single-rank distributed checkpoint: every tensor as one chunk (the whole tensor) in
 * `__0_0.distcp`, then `.metadata`. The source's metadata entries become non-tensor items (a str
 * each, under its key), as a DCP of a training run holds its step or its config; a key that is
 * also a tensor's name is dropped with a notice. Files are opened through `open` and closed by
 * the caller.
 * @throws StConvertError `Unsupported` (a dtype torch has not), `DuplicateKey`, `InvalidName`,
 *   and what writing a record throws.
 */
export async function writeDcp(source: TensorSource, open: (name: string) => Promise<ByteSink>, options: DcpWriteOptions = {}): Promise<void> {
  const names = new Set<string>();
  for (const t of source.tensors) {
    if (names.has(t.name)) throw new StConvertError("DuplicateKey", "two tensors have this name", { tensor: t.name });
    if (hasLoneSurrogate(t.name))
      throw new StConvertError("InvalidName", "the name holds a lone UTF-16 surrogate, which a pickle cannot encode", { tensor: t.name });
    torchDtypeName(t);
    names.add(t.name);
  }
  const items: [string, string][] = [];
  const clashing: string[] = [];
  for (const [key, value] of Object.entries(source.metadata ?? {})) {
    if (names.has(key) || hasLoneSurrogate(key) || hasLoneSurrogate(value)) clashing.push(key);
    else items.push([key, value]);
  }
  if (clashing.length > 0) options.onWarning?.(`metadata dropped (a tensor has the same name): ${clashing.map((k) => quoteName(k)).join(", ")}`);

  const data = counted(await open(DCP_DATA_FILE));
  const placed: Placed[] = [];
  const codec = options.codec;
  for (const tensor of source.tensors) {
    const offset = data.written();
    await writeTorch({ metadata: null, tensors: [tensor] }, data, { object: { kind: "tensor" }, codec });
    placed.push({ name: tensor.name, tensor, offset, length: data.written() - offset });
  }
  for (const [key, value] of items) {
    const offset = data.written();
    await writeTorch({ metadata: null, tensors: [] }, data, { object: { kind: "str", text: value }, codec });
    placed.push({ name: key, tensor: undefined, offset, length: data.written() - offset });
  }
  const metadata = await open(DCP_METADATA_FILE);
  await metadata.write(metadataPickle(placed));
}
