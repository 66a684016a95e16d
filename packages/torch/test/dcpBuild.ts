/**
 * Byte-by-byte builders for hostile distributed checkpoints: a `.metadata` pickle laid out as
 * torch 2.13 lays it out (dataclasses made by NEWOBJ and filled by BUILD, `torch.Size` by REDUCE),
 * and `.distcp` files of bare-tensor `torch.save` records, in a folder on disk.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openFileSource } from "@st-convert/core/node";
import { type DcpCheckpoint, type DcpReadOptions, readDcp } from "@st-convert/torch";
import { Pickle, torchZip } from "./build.js";

const M = "torch.distributed.checkpoint.metadata";

export interface ChunkSpec {
  offsets: number[];
  sizes: number[];
  /** The record's bytes: default a bare float32 tensor of `sizes` holding 0, 1, 2, … */
  record?: Uint8Array;
  /** The file it goes to (default `__0_0.distcp`) and its range there (default where it was written). */
  file?: string;
  offset?: number;
  length?: number;
  /** `transform_descriptors`, when given. */
  transforms?: string[];
  /** No storage_data entry. */
  unlisted?: boolean;
}

export interface TensorSpec {
  name: string;
  dtype?: string;
  /** `torch.Size` of the tensor, as ints (a bigint for one past 2^53). */
  size: (number | bigint)[];
  chunks: ChunkSpec[];
}

/** A bare tensor's `torch.save` record: `_rebuild_tensor_v2` over a storage of `cls` holding `data`. */
export function tensorRecord(size: readonly number[], data: Uint8Array, cls = "FloatStorage", elementSize = 4): Uint8Array {
  const strides = size.map((_, i) => size.slice(i + 1).reduce((n, d) => n * d, 1));
  const numel = size.reduce((n, d) => n * d, 1);
  const pickle = new Pickle()
    .proto()
    .tensor({ cls, key: "0", numel: Math.max(numel, data.byteLength / elementSize), size, stride: strides })
    .stop()
    .bytes();
  return torchZip(pickle, { "0": data });
}

/** Float32 0, 1, 2, … for `count` elements. */
export function iota(count: number, start = 0): Uint8Array {
  return new Uint8Array(Float32Array.from({ length: count }, (_, i) => start + i).buffer);
}

function size(p: Pickle, values: readonly (number | bigint)[]): Pickle {
  p.global("torch", "Size").mark();
  for (const v of values) {
    if (typeof v === "bigint") {
      const bytes = new Uint8Array(8);
      new DataView(bytes.buffer).setBigInt64(0, v, true);
      p.raw(0x8a, 8, ...bytes);
    } else p.int(v);
  }
  return p.tuple().raw(0x85).reduce();
}

/** `cls()` then BUILD with `{key: value}` written by `fields`. */
function dataclass(p: Pickle, module: string, name: string, fields: [string, (p: Pickle) => void][]): Pickle {
  p.global(module, name).raw(0x29, 0x81);
  if (fields.length === 0) return p;
  p.dict().mark();
  for (const [key, write] of fields) {
    p.str(key);
    write(p);
  }
  return p.raw(0x75, 0x62);
}

/** The `.metadata` pickle of `tensors` (chunks located as `located` says), with `extra` items pushed into `state_dict_metadata`. */
export function metadataPickle(
  tensors: readonly TensorSpec[],
  located: Map<ChunkSpec, { file: string; offset: number; length: number }>,
  options: { inject?: (p: Pickle) => void } = {},
): Uint8Array {
  const p = new Pickle().proto();
  dataclass(p, M, "Metadata", [
    [
      "state_dict_metadata",
      (p) => {
        p.dict().mark();
        for (const t of tensors) {
          p.str(t.name);
          dataclass(p, M, "TensorStorageMetadata", [
            [
              "properties",
              (p) => {
                p.global(M, "TensorProperties").raw(0x29, 0x81).mark();
                p.global("torch", t.dtype ?? "float32");
                p.global("torch.serialization", "_get_layout").str("torch.strided").raw(0x85).reduce();
                p.raw(0x89).global(M, "_MEM_FORMAT_ENCODING").int(0).raw(0x85).reduce().raw(0x89).tuple().raw(0x62);
              },
            ],
            ["size", (p) => size(p, t.size)],
            [
              "chunks",
              (p) => {
                p.raw(0x5d).mark();
                for (const c of t.chunks) {
                  dataclass(p, M, "ChunkStorageMetadata", [
                    ["offsets", (p) => size(p, c.offsets)],
                    ["sizes", (p) => size(p, c.sizes)],
                  ]);
                }
                p.raw(0x65);
              },
            ],
          ]);
        }
        options.inject?.(p);
        p.raw(0x75);
      },
    ],
    [
      "storage_data",
      (p) => {
        p.dict().mark();
        for (const t of tensors) {
          t.chunks.forEach((c, i) => {
            if (c.unlisted === true) return;
            const at = located.get(c)!;
            dataclass(p, M, "MetadataIndex", [
              ["fqn", (p) => p.str(t.name)],
              ["offset", (p) => size(p, c.offsets)],
              ["index", (p) => p.int(i)],
            ]);
            dataclass(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo", [
              ["relative_path", (p) => p.str(at.file)],
              ["offset", (p) => p.int(at.offset)],
              ["length", (p) => p.int(at.length)],
              ...(c.transforms === undefined
                ? []
                : [
                    [
                      "transform_descriptors",
                      (p: Pickle) => {
                        p.raw(0x5d).mark();
                        for (const d of c.transforms!) p.str(d);
                        p.raw(0x65);
                      },
                    ] as [string, (p: Pickle) => void],
                  ]),
            ]);
          });
        }
        p.raw(0x75);
      },
    ],
    ["version", (p) => p.str("1.0.0")],
  ]);
  return p.stop().bytes();
}

/**
 * Writes a DCP folder at `dir`: each chunk's record appended to its file, then `.metadata`.
 * Returns the folder.
 */
export function dcpFolder(dir: string, tensors: readonly TensorSpec[], options: { inject?: (p: Pickle) => void } = {}): string {
  mkdirSync(dir, { recursive: true });
  const files = new Map<string, Uint8Array[]>();
  const located = new Map<ChunkSpec, { file: string; offset: number; length: number }>();
  for (const t of tensors) {
    for (const c of t.chunks) {
      const file = c.file ?? "__0_0.distcp";
      const record = c.record ?? tensorRecord(c.sizes, iota(c.sizes.reduce((n, d) => n * d, 1)));
      const parts = files.get(file) ?? [];
      const offset = parts.reduce((n, b) => n + b.byteLength, 0);
      parts.push(record);
      files.set(file, parts);
      located.set(c, { file, offset: c.offset ?? offset, length: c.length ?? record.byteLength });
    }
  }
  for (const [file, parts] of files) {
    if (file.includes("/") || file.startsWith(".")) continue;
    writeFileSync(join(dir, file), Buffer.concat(parts));
  }
  writeFileSync(join(dir, ".metadata"), metadataPickle(tensors, located, options));
  return dir;
}

/** Every file {@link openDcp} opened, closed by {@link closeOpened} (a test file's `afterAll`). */
const opened: { close(): Promise<void> }[] = [];

/** Reads the checkpoint in `dir` through its `.metadata`, each rank file opened from disk as it is named. */
export async function openDcp(dir: string, options: DcpReadOptions = {}): Promise<DcpCheckpoint> {
  const metadata = await openFileSource(join(dir, ".metadata"));
  opened.push(metadata);
  return readDcp(
    metadata,
    async (name) => {
      const file = await openFileSource(join(dir, name));
      opened.push(file);
      return file;
    },
    options,
  );
}

export async function closeOpened(): Promise<void> {
  for (const file of opened.splice(0)) await file.close();
}
