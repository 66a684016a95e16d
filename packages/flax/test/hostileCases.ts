/**
 * Hostile and malformed flax files, built byte by byte and named after the attack, shared by the
 * unit tests and the interop test that checks the reference's verdict on each.
 */
import { type FlaxReadOptions, MAX_DEPTH } from "@st-convert/flax";
import { type Part, arr, bin, cat, ext, f32, map, ndarray, payload, str, uint } from "./msgpackBytes.js";

export const ok = cat(map(1), str("w"), ndarray([2], "float32", f32(1, 2)));
export const chunkDict = (shape: Uint8Array, chunks: Uint8Array, marker = cat(str("__msgpack_chunked_array__"), [0xc3])) =>
  cat(map(1), str("w"), map(3), marker, str("shape"), shape, str("chunks"), chunks);
export const dims = (...values: number[]) => cat(map(values.length), ...values.flatMap((d, i) => [str(String(i)), uint(d)]));
export const pieces = (...arrays: Uint8Array[]) => cat(map(arrays.length), ...arrays.flatMap((a, i) => [str(String(i)), a]));
/** An ext value of `type` around `payload`, in the ext8 form. */
const extValue = (type: number, payloadBytes: Part) => {
  const p = cat(payloadBytes);
  return cat([0xc7, p.byteLength, type & 0xff], p);
};
/** `{"a": ext}`: an ext value of `type` around `payload`, in the ext8 form. */
export const extLeaf = (type: number, payloadBytes: Part) => cat(map(1), str("a"), extValue(type, payloadBytes));
/** `{"w": ext}`: an ndarray (or numpy scalar) payload whose shape is `shape`, encoded as given. */
const shapedAs = (shape: Part, type = 1) => cat(map(1), str("w"), extValue(type, cat(arr(3), shape, str("uint8"), [0xc4, 2, 1, 2])));
const be64 = (value: bigint) => Array.from({ length: 8 }, (_, i) => Number((value >> BigInt(8 * (7 - i))) & 0xffn));
const be32 = (value: number) => [value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff];
/** A uint64 (0xcf) msgpack int. */
const u64 = (value: bigint) => [0xcf, ...be64(value)];
/** `{"w": ndarray}` of a zero-element `dtype` array with these dims (uint64 each). */
const emptyArray = (dtype: string, ...dims: bigint[]) => {
  const p = cat(arr(3), arr(dims.length), ...dims.map(u64), str(dtype), [0xc4, 0]);
  return cat(map(1), str("w"), [0xc7, p.byteLength, 0x01], p);
};
export const nest = (depth: number, kind: "map" | "array") =>
  cat(...Array.from({ length: depth - 1 }, () => (kind === "map" ? cat(map(1), str("a")) : arr(1))), kind === "map" ? map(0) : arr(0));

/**
 * Each case: the attack, the file, our code, and what flax's `msgpack_restore` does with it
 * (checked by the interop test): "refuses", "accepts" where st-convert is stricter or the file
 * holds what safetensors cannot (each such case says why in its name or in the README), or null
 * where only our overridden limit is tested.
 */
export const hostileCases: [attack: string, bytes: Uint8Array, code: string, reference: "refuses" | "accepts" | null, options?: FlaxReadOptions][] = [
  ["empty file", new Uint8Array(0), "UnexpectedEof", "refuses"],
  ["truncated map16 count", cat([0xde, 0x00]), "UnexpectedEof", "refuses"],
  ["truncated inside a key", ok.subarray(0, 2), "UnexpectedEof", "refuses"],
  ["truncated inside the array bytes", ok.subarray(0, ok.byteLength - 1), "UnexpectedEof", "refuses"],
  ["a trailing byte after the top-level map", cat(ok, [0x00]), "ExtraData", "refuses"],
  ["a second top-level value", cat(ok, ok), "ExtraData", "refuses"],
  ["the reserved byte 0xc1 as a value", cat(map(1), str("a"), [0xc1]), "FormatError", "refuses"],
  ["the reserved byte 0xc1 as a key", cat(map(1), [0xc1], [0x00]), "FormatError", "refuses"],
  ["maps nested 1025 deep", nest(MAX_DEPTH + 1, "map"), "LimitExceeded", "refuses"],
  ["arrays nested 1025 deep", nest(MAX_DEPTH + 1, "array"), "LimitExceeded", "refuses"],
  ["nesting past an overridden depth", nest(4, "map"), "LimitExceeded", null, { maxDepth: 3 }],
  ["map32 declaring 2^32 - 1 entries in a 10-byte file", cat([0xdf, 0xff, 0xff, 0xff, 0xff], str("a"), [1, 2, 3]), "UnexpectedEof", "refuses"],
  ["array32 declaring 2^32 - 1 items", cat(map(1), str("a"), [0xdd, 0xff, 0xff, 0xff, 0xff], [0]), "UnexpectedEof", "refuses"],
  ["str32 key declaring 4 GiB", cat(map(1), [0xdb, 0xff, 0xff, 0xff, 0xff], "00"), "UnexpectedEof", "refuses"],
  ["a 1 MiB key, past the name limit", cat(map(1), [0xdb, 0x00, 0x10, 0x00, 0x00], new Uint8Array(2 ** 20).fill(0x61), [0x01]), "LimitExceeded", "accepts"],
  ["str32 leaf declaring 4 GiB", cat(map(1), str("a"), [0xdb, 0xff, 0xff, 0xff, 0xff], "00"), "UnexpectedEof", "refuses"],
  ["bin32 leaf declaring 4 GiB", cat(map(1), str("a"), bin(0xffffffff), "00"), "UnexpectedEof", "refuses"],
  ["ext32 declaring 4 GiB past the end", cat(map(1), str("a"), ext(1, 0xfffffff0), payload([1], "uint8", [7])), "UnexpectedEof", "refuses"],
  [
    "ndarray bin declaring more than its ext holds",
    cat(map(1), str("a"), ext(1, 20), arr(3), arr(1), [1], str("uint8"), bin(1000), new Uint8Array(1000)),
    "InvalidArray",
    "refuses",
  ],
  ["bytes after the array data inside the payload", cat(map(1), str("a"), ext(1, 17), payload([1], "uint8", [7]), [0, 0]), "InvalidArray", "refuses"],
  ["payload bytes not matching shape × itemsize", cat(map(1), str("w"), ndarray([2, 2], "float32", f32(1, 2, 3))), "ByteLengthMismatch", "refuses"],
  ["payload bytes not a multiple of itemsize", cat(map(1), str("w"), ndarray([1], "float32", [0, 0, 0])), "ByteLengthMismatch", "refuses"],
  ["a numpy scalar (ext 3) with too few bytes", cat(map(1), str("w"), ndarray([], "int64", [1, 2, 3, 4], 3)), "ByteLengthMismatch", "refuses"],
  ["an unknown dtype name", cat(map(1), str("w"), ndarray([1], "float33", [0, 0, 0, 0])), "UnknownDtype", "refuses"],
  ["the str64 name flax writes for <U2 arrays", cat(map(1), str("w"), ndarray([1], "str64", new Uint8Array(8))), "UnknownDtype", "refuses"],
  ["complex128, which safetensors cannot hold", cat(map(1), str("w"), ndarray([1], "complex128", new Uint8Array(16))), "UnknownDtype", "accepts"],
  ["int4, kept one value per byte by ml_dtypes", cat(map(1), str("w"), ndarray([2], "int4", [1, 2])), "UnknownDtype", "accepts"],
  ["a numpy spelling flax never writes ('>i4')", cat(map(1), str("w"), ndarray([1], ">i4", [0, 0, 0, 1])), "UnknownDtype", "accepts"],
  [
    "a 1000-byte dtype name",
    cat(map(1), str("w"), ext(1, 1011), arr(3), arr(0), [0xda, 0x03, 0xe8], new Uint8Array(1000).fill(0x61), bin(1), [0]),
    "UnknownDtype",
    "refuses",
  ],
  ["a negative dimension", cat(map(1), str("w"), ext(1, 15), arr(3), arr(1), [0xff], str("uint8"), bin(1), [0]), "InvalidArray", "accepts"],
  ["65 dimensions", cat(map(1), str("w"), ndarray(new Array(65).fill(1), "uint8", [0])), "InvalidArray", "refuses"],
  [
    "a dimension past 2^53 (beside a zero)",
    cat(map(1), str("w"), ext(1, 23), arr(3), arr(2), [0], [0xcf, 0, 0x40, 0, 0, 0, 0, 0, 0], str("uint8"), bin(0)),
    "Unsupported",
    "accepts",
  ],
  ["a payload that is not an array of three", cat(map(1), str("w"), ext(1, 5), arr(2), arr(0), str("i8")), "InvalidArray", "refuses"],
  ["an empty ext 1 payload", cat(map(1), str("w"), ext(1, 0)), "InvalidArray", "refuses"],
  ["a one-byte ext 1 payload (fixext1)", cat(map(1), str("w"), [0xd4, 0x01, 0x93]), "InvalidArray", "refuses"],
  ["a dtype name that is an int", cat(map(1), str("w"), ext(1, 9), arr(3), arr(0), [5], bin(1), [0]), "InvalidArray", "refuses"],
  ["array bytes as a str, not a bin", cat(map(1), str("w"), ext(1, 11), arr(3), arr(1), [1], str("uint8"), [0xa1, 0x41]), "InvalidArray", "accepts"],
  ["a shape that is a map", cat(map(1), str("w"), ext(1, 14), arr(3), map(0), str("uint8"), bin(1), [0]), "InvalidArray", "refuses"],
  ["chunks that do not add up to the shape", chunkDict(dims(2, 3), pieces(ndarray([4], "float32", f32(1, 2, 3, 4)))), "InvalidChunkedArray", "refuses"],
  ["chunks with more elements than the shape", chunkDict(dims(1), pieces(ndarray([2], "float32", f32(1, 2)))), "InvalidChunkedArray", "refuses"],
  [
    "a chunk dict without chunks",
    cat(map(1), str("w"), map(2), str("__msgpack_chunked_array__"), [0xc3], str("shape"), dims(1)),
    "InvalidChunkedArray",
    "refuses",
  ],
  [
    "a chunk dict without shape",
    cat(map(1), str("w"), map(2), str("__msgpack_chunked_array__"), [0xc3], str("chunks"), pieces(ndarray([1], "uint8", [1]))),
    "InvalidChunkedArray",
    "refuses",
  ],
  ["a chunk dict whose shape is a list", chunkDict(cat(arr(1), [1]), pieces(ndarray([1], "uint8", [1]))), "InvalidChunkedArray", "refuses"],
  ["a chunk dict with a negative dimension", chunkDict(cat(map(1), str("0"), [0xff]), pieces(ndarray([1], "uint8", [1]))), "InvalidChunkedArray", "accepts"],
  [
    "chunk keys 0 and 2, not 0 and 1",
    chunkDict(dims(2), cat(map(2), str("0"), ndarray([1], "uint8", [1]), str("2"), ndarray([1], "uint8", [2]))),
    "InvalidChunkedArray",
    "refuses",
  ],
  ["chunks with integer keys", chunkDict(dims(1), cat(map(1), [0], ndarray([1], "uint8", [1]))), "InvalidChunkedArray", "refuses"],
  [
    "chunks of two dtypes (the reference promotes, we refuse)",
    chunkDict(dims(2), pieces(ndarray([1], "uint8", [1]), ndarray([1], "float32", f32(2)))),
    "InvalidChunkedArray",
    "accepts",
  ],
  ["a 2-d chunk", chunkDict(dims(2, 2), pieces(ndarray([2, 2], "uint8", [1, 2, 3, 4]))), "InvalidChunkedArray", "accepts"],
  ["a chunk that is not an array", chunkDict(dims(1), cat(map(1), str("0"), [0x01])), "InvalidChunkedArray", "refuses"],
  ["a chunk dict with no chunks", chunkDict(dims(0), cat(map(0))), "InvalidChunkedArray", "refuses"],
  ["an integer key above an array", cat(map(1), [0x05], map(1), str("w"), ndarray([1], "uint8", [1])), "InvalidName", "accepts"],
  ["a None key holding an array", cat(map(1), [0xc0], ndarray([1], "uint8", [1])), "InvalidName", "accepts"],
  ["a dict as a key (unhashable in Python)", cat(map(1), map(0), [0x01]), "FormatError", "refuses"],
  ["a list as a key", cat(map(1), arr(0), [0x01]), "FormatError", "refuses"],
  ["invalid UTF-8 in a key", cat(map(1), [0xa2, 0xc3, 0x28], [0x01]), "FormatError", "refuses"],
  ["invalid UTF-8 in a string leaf", cat(map(1), str("s"), [0xa2, 0xff, 0xfe]), "FormatError", "refuses"],
  [
    "a repeated key (the reference keeps the last, we refuse)",
    cat(map(2), str("w"), ndarray([1], "uint8", [1]), str("w"), ndarray([1], "uint8", [2])),
    "DuplicateKey",
    "accepts",
  ],
  [
    "a key holding the separator beside the same path nested",
    cat(map(2), str("a.b"), ndarray([1], "uint8", [1]), str("a"), map(1), str("b"), ndarray([1], "uint8", [2])),
    "DuplicateKey",
    "accepts",
  ],
  // Ext values msgpack_restore cannot decode (its Timestamp, ExtType and flax's complex decoder raise).
  ["a timestamp ext of 5 bytes", extLeaf(-1, [0, 0, 0, 0, 1]), "InvalidExt", "refuses"],
  ["a timestamp ext of 1 byte (fixext1)", cat(map(1), str("a"), [0xd4, 0xff, 0x00]), "InvalidExt", "refuses"],
  ["a timestamp ext of 16 bytes (fixext16)", cat(map(1), str("a"), [0xd8, 0xff], new Uint8Array(16)), "InvalidExt", "refuses"],
  ["an empty timestamp ext", extLeaf(-1, []), "InvalidExt", "refuses"],
  ["a 64-bit timestamp with 1,000,000,000 nanoseconds", cat(map(1), str("a"), [0xd7, 0xff], be64((1_000_000_000n << 34n) | 5n)), "InvalidExt", "refuses"],
  ["a 96-bit timestamp with 1,000,000,000 nanoseconds", extLeaf(-1, cat(be32(1_000_000_000), be64(5n))), "InvalidExt", "refuses"],
  ["a 96-bit timestamp with 999,999,999 nanoseconds and negative seconds", extLeaf(-1, cat(be32(999_999_999), be64(2n ** 64n - 5n))), "ok", "accepts"],
  ["a 32-bit timestamp", cat(map(1), str("a"), [0xd6, 0xff, 0, 0, 0, 1]), "ok", "accepts"],
  ["an ext of type -2", cat(map(1), str("a"), [0xd4, 0xfe, 0x00]), "InvalidExt", "refuses"],
  ["an ext of type -128", extLeaf(-128, [1, 2, 3]), "InvalidExt", "refuses"],
  ["an ext of type 127 and an empty ext of type 0", cat(map(2), str("a"), [0xd4, 0x7f, 0x00], str("b"), [0xc7, 0x00, 0x00]), "ok", "accepts"],
  ["a complex payload that is not msgpack (0xc1)", extLeaf(2, [0xc1]), "InvalidExt", "refuses"],
  ["an empty complex payload", extLeaf(2, []), "InvalidExt", "refuses"],
  ["a complex payload cut inside its list", extLeaf(2, [0x92, 0x01]), "InvalidExt", "refuses"],
  ["a complex payload with bytes after its value", extLeaf(2, [0x92, 0x01, 0x02, 0x00]), "InvalidExt", "refuses"],
  ["a complex of one number", extLeaf(2, [0x91, 0x01]), "InvalidExt", "refuses"],
  ["a complex whose payload is an int", extLeaf(2, [0x01]), "InvalidExt", "refuses"],
  ["a complex whose real part is None", extLeaf(2, [0x92, 0xc0, 0x01]), "InvalidExt", "refuses"],
  ["a complex of two strings", extLeaf(2, cat([0x92], str("1"), str("2"))), "InvalidExt", "refuses"],
  ["a complex whose real part is an ext value", extLeaf(2, [0x92, 0xd4, 0x07, 0x00, 0x01]), "InvalidExt", "refuses"],
  ["a complex whose third item has invalid UTF-8", extLeaf(2, [0x93, 0x01, 0x02, 0xa1, 0xff]), "InvalidExt", "refuses"],
  ["a complex whose third item is a map with an int key (strict_map_key)", extLeaf(2, [0x93, 0x01, 0x02, 0x81, 0x01, 0x02]), "InvalidExt", "refuses"],
  ["a complex whose third item holds a 5-byte timestamp", extLeaf(2, [0x93, 0x01, 0x02, 0xc7, 0x05, 0xff, 0, 0, 0, 0, 0]), "InvalidExt", "refuses"],
  ["a complex whose third item holds an ext of type -2", extLeaf(2, [0x93, 0x01, 0x02, 0xd4, 0xfe, 0x00]), "InvalidExt", "refuses"],
  [
    "a complex whose third item nests 1024 lists (1025 levels)",
    cat(map(1), str("a"), ext(2, 1027), [0x93, 0x01, 0x02], new Uint8Array(1023).fill(0x91), [0x90]),
    "InvalidExt",
    "refuses",
  ],
  [
    "a complex whose third item nests 1023 lists (1024 levels)",
    cat(map(1), str("a"), ext(2, 1026), [0x93, 0x01, 0x02], new Uint8Array(1022).fill(0x91), [0x90]),
    "ok",
    "accepts",
  ],
  ["a complex of three numbers, an int, a bool and a float32", extLeaf(2, [0x93, 0x01, 0xc3, 0xca, 0x3f, 0x80, 0, 0]), "ok", "accepts"],
  ["a complex given as two bytes (complex(b[0], b[1]))", extLeaf(2, [0xc4, 0x02, 0x01, 0x02]), "ok", "accepts"],
  [
    "a complex of a uint64 past 2^53 and a map with bytes keys",
    extLeaf(2, cat([0x93], u64(2n ** 64n - 1n), [0x02, 0x81, 0xc4, 0x01, 0x61, 0x00])),
    "ok",
    "accepts",
  ],
  // Repeated keys: msgpack_restore keeps the last value, so the array before it is not in its tree.
  ["a repeated key: an array, then None", cat(map(2), str("w"), ndarray([1], "uint8", [1]), str("w"), [0xc0]), "DuplicateKey", "accepts"],
  [
    "a repeated key holding two dicts",
    cat(map(2), str("p"), map(1), str("x"), ndarray([1], "uint8", [1]), str("p"), map(1), str("y"), ndarray([1], "uint8", [2])),
    "DuplicateKey",
    "accepts",
  ],
  ["a key repeated after keys out of order (b, a, b)", cat(map(3), str("b"), [0xc0], str("a"), [0xc0], str("b"), [0xc0]), "DuplicateKey", "accepts"],
  [
    "a key repeated after keys in order (a, b, c, a)",
    cat(map(4), str("a"), [0x01], str("b"), [0x02], str("c"), [0x03], str("a"), [0x04]),
    "DuplicateKey",
    "accepts",
  ],
  ["keys 1 and True, one key in a Python dict", cat(map(2), [0x01], [0xc0], [0xc3], [0xc0]), "DuplicateKey", "accepts"],
  ["keys 0 and 0.0, one key in a Python dict", cat(map(2), [0x00], [0xc0], [0xcb, 0, 0, 0, 0, 0, 0, 0, 0], [0xc0]), "DuplicateKey", "accepts"],
  ["a repeated key in a list's dict", cat(map(1), str("l"), arr(1), map(2), str("a"), [0x01], str("a"), [0x02]), "DuplicateKey", "accepts"],
  // flax-ext-map-keys: msgpack_restore takes any key Python can hash. A key that is not a string
  // names no tensor (InvalidName below it); one Python compares equal to another key repeats it.
  ["flax-ext-map-keys: an ndarray (ext 1) as a key, unhashable", cat(map(1), ndarray([1], "uint8", [1]), [0x01]), "FormatError", "refuses"],
  ["flax-ext-map-keys: a 0-d ndarray (ext 1) as a key, unhashable", cat(map(1), ndarray([], "uint8", [1]), [0x01]), "FormatError", "refuses"],
  [
    "flax-ext-map-keys: a numpy scalar (ext 3) as a key, refused: numpy's equality decides which keys repeat",
    cat(map(1), ndarray([], "int16", [1, 0], 3), [0x01]),
    "InvalidName",
    "accepts",
  ],
  [
    "flax-ext-map-keys: np.str_('w') beside 'w', one key in Python",
    cat(map(2), ndarray([], "<U1", [0x77, 0, 0, 0], 3), [0xc0], str("w"), ndarray([1], "uint8", [1])),
    "InvalidName",
    "accepts",
  ],
  ["flax-ext-map-keys: a timestamp key holding an array", cat(map(1), [0xd6, 0xff, 0, 0, 0, 0], ndarray([1], "uint8", [1])), "InvalidName", "accepts"],
  ["flax-ext-map-keys: an ext 7 key above an array", cat(map(1), [0xd4, 0x07, 0x00], map(1), str("w"), ndarray([1], "uint8", [1])), "InvalidName", "accepts"],
  [
    "flax-ext-map-keys: a timestamp key, a complex key and ext 0 and 127 keys holding values",
    cat(
      map(5),
      [0xd6, 0xff, 0, 0, 0, 1],
      [0x01],
      extValue(2, [0x92, 0x01, 0x02]),
      [0x02],
      [0xd4, 0x7f, 0x00],
      [0xc0],
      [0xc7, 0x00, 0x00],
      str("x"),
      str("w"),
      ndarray([1], "uint8", [1]),
    ),
    "ok",
    "accepts",
  ],
  [
    "flax-ext-map-keys: keys 1 and complex(1, 0), one key in Python",
    cat(map(2), [0x01], [0xc0], extValue(2, [0x92, 0x01, 0x00]), [0xc0]),
    "DuplicateKey",
    "accepts",
  ],
  [
    "flax-ext-map-keys: one time as a 32-bit and a 64-bit timestamp key, one key in Python",
    cat(map(2), [0xd6, 0xff, 0, 0, 0, 9], [0xc0], [0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 9], [0xc0]),
    "DuplicateKey",
    "accepts",
  ],
  ["flax-ext-map-keys: an ext key 7 given twice", cat(map(2), [0xd4, 0x07, 0x01], [0xc0], [0xd4, 0x07, 0x01], [0xc0]), "DuplicateKey", "accepts"],
  [
    "flax-ext-map-keys: complex keys with NaN parts, never equal in Python",
    cat(map(2), ...[0, 1].map(() => cat(extValue(2, [0x92, 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0, 0x01]), [0xc0]))),
    "ok",
    "accepts",
  ],
  ["flax-ext-map-keys: a key of ext type -2", cat(map(1), [0xd4, 0xfe, 0x00], [0x01]), "InvalidExt", "refuses"],
  ["flax-ext-map-keys: a timestamp key of 5 bytes", cat(map(1), [0xc7, 0x05, 0xff, 0, 0, 0, 0, 0], [0x01]), "InvalidExt", "refuses"],
  ["flax-ext-map-keys: a complex key that is not msgpack", cat(map(1), [0xd4, 0x02, 0xc1], [0x01]), "InvalidExt", "refuses"],
  // flax-shape-not-a-list: flax hands the shape to numpy's reshape, which takes an int, None or a
  // string's bytes as well as a list; flax writes a list, and so must a file with one meaning.
  ["flax-shape-not-a-list: a bare int shape (reshape(2))", shapedAs([0x02]), "InvalidArray", "accepts"],
  ["flax-shape-not-a-list: a nil shape (reshape(None))", shapedAs([0xc0]), "InvalidArray", "accepts"],
  ["flax-shape-not-a-list: a str shape (its bytes as dimensions)", shapedAs([0xa1, 0x02]), "InvalidArray", "accepts"],
  ["flax-shape-not-a-list: a bare int shape on a numpy scalar (ext 3)", shapedAs([0x02], 3), "InvalidArray", "accepts"],
  ["flax-shape-not-a-list: a float shape", shapedAs([0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0]), "InvalidArray", "refuses"],
  // Zero-element arrays whose shapes numpy cannot make (reshape overflows, or "array is too big").
  ["a zero-element shape (2^32, 2^32, 0) that overflows", emptyArray("uint8", 2n ** 32n, 2n ** 32n, 0n), "InvalidArray", "refuses"],
  ["a zero-element float32 shape (0, 2^31, 2^30): 2^63 bytes", emptyArray("float32", 0n, 2n ** 31n, 2n ** 30n), "InvalidArray", "refuses"],
  ["a zero-element float32 shape (0, 2^31, 2^29): 2^62 bytes, which numpy makes", emptyArray("float32", 0n, 2n ** 31n, 2n ** 29n), "ok", "accepts"],
  ["a zero-element uint8 shape (0, 2^32, 2^31 - 1)", emptyArray("uint8", 0n, 2n ** 32n, 2n ** 31n - 1n), "ok", "accepts"],
  [
    "a chunked array whose zero-element shape overflows",
    chunkDict(cat(map(3), str("0"), u64(2n ** 32n), str("1"), u64(2n ** 32n), str("2"), [0]), pieces(ndarray([0], "uint8", []))),
    "InvalidChunkedArray",
    "refuses",
  ],
  ["a name past an overridden length limit", cat(map(1), str("x".repeat(20)), ndarray([1], "uint8", [1])), "LimitExceeded", null, { maxNameLength: 10 }],
  [
    "more arrays than an overridden limit",
    cat(map(3), ...["a", "b", "c"].flatMap((k) => [str(k), ndarray([1], "uint8", [1])])),
    "LimitExceeded",
    null,
    { maxArrays: 2 },
  ],
  ["a map past an overridden entry limit", cat(map(3), ...["a", "b", "c"].flatMap((k) => [str(k), [0xc0]])), "LimitExceeded", null, { maxMapEntries: 2 }],
  ["an empty separator", ok, "InvalidArgument", null, { sep: "" }],
];
