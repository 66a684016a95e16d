/**
 * Hostile and malformed GGUF files, built field by field and named after the attack, with the code
 * the reader must refuse each with ("ok" for files it must read). `ggml` says what ggml's own loader
 * does with the file, where it differs from our verdict on purpose (see the package README).
 */
import { cat, f32Info, gguf, i32, kv, raw, str, tensorInfo, u8, u32, u64 } from "./ggufBytes.js";

/** `ggml`: ggml's loader's verdict, where it differs from ours on purpose. */
export type HostileCase = readonly [attack: string, bytes: Uint8Array, expected: string, ggml?: "refuses" | "accepts"];

const arch = kv("general.architecture", 8, str("llama"));
/** One F32 tensor of 2 × 4 at offset 0, 32 bytes of data. */
const oneTensor = { kvs: [arch], tensors: [f32Info("w", [4, 2])], dataSize: 32 };

export const hostileCases: readonly HostileCase[] = [
  ["not GGUF at all", raw("PK\x03\x04 not a gguf file"), "BadMagic"],
  ["magic cut short", raw("GG"), "UnexpectedEof"],
  ["version 1 (GGUFv1)", gguf({ version: 1, kvs: [arch] }), "UnsupportedVersion"],
  ["version 0", gguf({ version: 0, kvs: [arch] }), "UnsupportedVersion"],
  ["version 4, from the future", gguf({ version: 4, kvs: [arch] }), "UnsupportedVersion"],
  ["counts cut short", cat(raw("GGUF"), u32(3), u64(0)), "UnexpectedEof"],
  ["negative tensor count", gguf({ kvs: [arch], tensorCount: -1n }), "InvalidCount"],
  ["2^40 key/value pairs declared", gguf({ kvs: [arch], kvCount: 2n ** 40n }), "InvalidCount"],
  ["one pair more than the file holds", gguf({ kvs: [arch], kvCount: 2 }), "UnexpectedEof"],
  ["empty key", gguf({ kvs: [kv("", 4, u32(1))] }), "InvalidKey"],
  ["key given twice", gguf({ kvs: [arch, kv("general.architecture", 8, str("gpt2"))] }), "InvalidKey"],
  ["value type 13", gguf({ kvs: [kv("x", 13, u32(0))] }), "InvalidValueType"],
  ["value type 2^31", gguf({ kvs: [kv("x", 0x80000000, u32(0))] }), "InvalidValueType"],
  ["array of value type 99", gguf({ kvs: [kv("x", 9, cat(u32(99), u64(1), u32(0)))] }), "InvalidValueType"],
  ["string longer than the file", gguf({ kvs: [kv("x", 8, cat(u64(1000), raw("short")))] }), "InvalidLength"],
  ["string of 2^40 bytes", gguf({ kvs: [kv("x", 8, cat(u64(2n ** 40n), raw("x")))] }), "InvalidLength"],
  ["key of 2^63 bytes", gguf({ kvs: [cat(u64(2n ** 63n), raw("k".repeat(20)))] }), "InvalidLength"],
  ["array of 2^31 items", gguf({ kvs: [kv("x", 9, cat(u32(0), u64(2n ** 31n), u8(1)))] }), "InvalidLength"],
  ["array of 10^6 u32 in 40 bytes", gguf({ kvs: [kv("x", 9, cat(u32(4), u64(1_000_000), u32(1), u32(2)))] }), "InvalidLength"],
  ["array of 10^6 strings in 40 bytes", gguf({ kvs: [kv("x", 9, cat(u32(8), u64(1_000_000), str("a")))] }), "InvalidLength"],
  ["array of 3 INT32 in 4 bytes", gguf({ kvs: [kv("x", 9, cat(u32(5), u64(3), i32(1)))] }), "InvalidLength"],
  ["string array cut short", gguf({ kvs: [kv("x", 9, cat(u32(8), u64(2), str("abcdefgh"), [1, 0, 0]))] }), "UnexpectedEof"],
  ["general.alignment as UINT64", gguf({ kvs: [arch, kv("general.alignment", 10, u64(32))] }), "InvalidAlignment"],
  ["general.alignment 0", gguf({ kvs: [arch, kv("general.alignment", 4, u32(0))] }), "InvalidAlignment"],
  ["general.alignment 48, not a power of two", gguf({ kvs: [arch, kv("general.alignment", 4, u32(48))] }), "InvalidAlignment"],
  ["tensor name of 64 bytes", gguf({ ...oneTensor, tensors: [f32Info("n".repeat(64), [4, 2])] }), "InvalidTensorName"],
  ["tensor name not UTF-8", gguf({ ...oneTensor, tensors: [tensorInfo(new Uint8Array([0xff, 0xfe]), [4, 2], 0, 0)] }), "InvalidTensorName", "accepts"],
  ["key not UTF-8", gguf({ kvs: [arch, kv(new Uint8Array([0x80]), 4, u32(1))] }), "InvalidKey", "accepts"],
  ["two tensors of one name", gguf({ kvs: [arch], tensors: [f32Info("w", [8]), f32Info("w", [8], 32)], dataSize: 64 }), "InvalidTensorName"],
  ["two names equal up to a NUL byte", gguf({ kvs: [arch], tensors: [f32Info("w", [8]), f32Info("w\0shadow", [8], 32)], dataSize: 64 }), "InvalidTensorName"],
  ["5 dimensions", gguf({ ...oneTensor, tensors: [f32Info("w", [2, 2, 2, 1, 1])] }), "InvalidShape"],
  ["negative dimension", gguf({ ...oneTensor, tensors: [tensorInfo("w", [4, -2], 0, 0)] }), "InvalidShape"],
  // ggml's element count wraps to 0 in int64 here, which skips its own overflow check, and the
  // byte size wraps to 0 too: it loads a tensor of 2^64 elements in no bytes. Refused on purpose.
  ["2^32 × 2^32 elements", gguf({ ...oneTensor, tensors: [f32Info("w", [2 ** 32, 2 ** 32])] }), "InvalidShape", "accepts"],
  ["2^62 × 2 elements", gguf({ ...oneTensor, tensors: [f32Info("w", [2 ** 31, 2 ** 32])] }), "InvalidShape"],
  ["2^61 F64 elements (2^64 bytes)", gguf({ ...oneTensor, tensors: [tensorInfo("w", [2n ** 61n], 28, 0)] }), "InvalidShape"],
  ["removed ggml type 4 (Q4_2)", gguf({ ...oneTensor, tensors: [tensorInfo("w", [32], 4, 0)] }), "InvalidTensorType"],
  ["ggml type 43, past the table", gguf({ ...oneTensor, tensors: [tensorInfo("w", [32], 43, 0)] }), "InvalidTensorType"],
  ["ggml type -1", gguf({ ...oneTensor, tensors: [tensorInfo("w", [32], -1, 0)] }), "InvalidTensorType"],
  ["Q8_0 rows of 33 elements", gguf({ ...oneTensor, tensors: [tensorInfo("w", [33], 8, 0)], dataSize: 64 }), "InvalidTensorType"],
  ["first tensor at offset 32", gguf({ ...oneTensor, tensors: [f32Info("w", [4, 2], 32)], dataSize: 64 }), "InvalidOffset"],
  ["second tensor overlapping the first", gguf({ kvs: [arch], tensors: [f32Info("a", [8]), f32Info("b", [8], 0)], dataSize: 64 }), "InvalidOffset"],
  ["a gap between two tensors", gguf({ kvs: [arch], tensors: [f32Info("a", [8]), f32Info("b", [8], 64)], dataSize: 96 }), "InvalidOffset"],
  ["second tensor not aligned", gguf({ kvs: [arch], tensors: [f32Info("a", [3]), f32Info("b", [8], 12)], dataSize: 64 }), "InvalidOffset"],
  ["offset of 2^63", gguf({ ...oneTensor, tensors: [f32Info("w", [4, 2], 0), tensorInfo("v", [1], 0, 2n ** 63n)] }), "InvalidOffset"],
  ["data cut short", gguf({ ...oneTensor, dataSize: 16 }), "UnexpectedEof"],
  ["no padding after the last tensor", gguf({ kvs: [arch], tensors: [f32Info("w", [3])], dataSize: 12 }), "UnexpectedEof"],
  ["1 TiB tensor in a small file", gguf({ ...oneTensor, tensors: [f32Info("w", [2 ** 20, 2 ** 18])] }), "UnexpectedEof"],
  ["tensor infos cut short", cat(raw("GGUF"), u32(3), u64(1), u64(1), arch, f32Info("w", [8])).subarray(0, -10), "UnexpectedEof"],
  ["two tensor infos declared, room for one", gguf({ kvs: [arch], tensorCount: 2, tensors: [f32Info("w", [8])] }).subarray(0, 80), "InvalidCount"],
  [
    "split.count 2, but no second file",
    gguf({ kvs: [arch, kv("split.no", 2, cat([0, 0])), kv("split.count", 2, cat([2, 0]))], tensors: [f32Info("w", [8])], dataSize: 32 }),
    "InvalidSplit",
    "accepts",
  ],
  ["a file other than the first of a split set", gguf({ kvs: [kv("split.no", 2, cat([1, 0])), kv("split.count", 2, cat([2, 0]))] }), "InvalidSplit", "accepts"],
  // ggml loads Q8_1 (a type of its compute graphs, in no file gguf-py writes) but nothing defines
  // its dequantization for files: listed, kept as blocks on request, refused when dequantized.
  ["a Q8_1 tensor, dequantized", gguf({ kvs: [arch], tensors: [tensorInfo("w", [32], 9, 0)], dataSize: 64 }), "Unsupported", "accepts"],
  // Accepted.
  ["a 0-d tensor", gguf({ kvs: [arch], tensors: [f32Info("s", [])], dataSize: 32 }), "ok"],
  ["bytes after the data", gguf({ ...oneTensor, dataSize: 100 }), "ok"],
  ["a key holding a NUL byte", gguf({ kvs: [arch, kv("a\0b", 4, u32(1))] }), "ok"],
  ["a tensor name cut by a NUL byte", gguf({ kvs: [arch], tensors: [f32Info("w\0tail", [8])], dataSize: 32 }), "ok"],
  ["an array of arrays", gguf({ kvs: [arch, kv("x", 9, cat(u32(9), u64(1), u32(4), u64(2), u32(1), u32(2)))] }), "ok", "refuses"],
  ["an empty array of strings", gguf({ kvs: [arch, kv("x", 9, cat(u32(8), u64(0)))] }), "ok"],
  [
    "alignment 1",
    gguf({ kvs: [arch, kv("general.alignment", 4, u32(1))], tensors: [f32Info("a", [3]), f32Info("b", [1], 12)], alignment: 1, dataSize: 16 }),
    "ok",
  ],
  ["version 2", gguf({ version: 2, ...oneTensor }), "ok"],
  ["no key at all", gguf({ tensors: [f32Info("w", [8])], dataSize: 32 }), "ok"],
];
