/**
 * Hostile and broken documents: each one is refused with one StConvertError whose code names the
 * rule and whose message names the path; never another exception, a hang or a large allocation.
 */
import { describe, expect, it } from "vitest";
import { readTensorBytes } from "@st-convert/core";
import { MAX_JSON_DEPTH, readTensorJson } from "@st-convert/json";
import { recordHostileCases } from "@st-convert/testing";
import { failure, readAll, utf8 } from "./helpers.js";

const t = (body: string, name = "w") => `{"${name}": ${body}}`;

/** [attack, document, code, text the message contains] */
const cases: [string, string | Uint8Array, string, string][] = [
  // Not JSON
  [
    "dims that overflow u64 before their 0 (a safetensors header cannot hold them)",
    t('{"dtype": "U8", "shape": [4294967296, 4294967296, 0], "data": []}'),
    "ValidationOverflow",
    "pass 2^64 − 1 (a later 0 does not help)",
  ],
  ["empty input", "", "InvalidJson", "no JSON object"],
  ["an array at the top", "[1, 2]", "InvalidJson", "expected '{'"],
  ["truncated document", '{"w": {"dtype": "F32", "shape": [1], "data": [1', "InvalidJson", "unexpected end of input inside data"],
  ["unterminated key", '{"w', "InvalidJson", "unterminated string"],
  ["trailing garbage", `${t('{"dtype": "U8", "shape": [], "data": 1}')} x`, "InvalidJson", "content after the document's object"],
  ["two documents", `${t('{"dtype": "U8", "shape": [], "data": 1}')}{}`, "InvalidJson", "content after"],
  ["missing comma between tensors", '{"a": {"dtype": "U8", "shape": [], "data": 1} "b": {}}', "InvalidJson", "expected ',' or '}'"],
  ["trailing comma in data", t('{"dtype": "U8", "shape": [2], "data": [1, 2,]}'), "InvalidJson", "w.data[1]: a ']' right after ','"],
  ["double comma in data", t('{"dtype": "U8", "shape": [2], "data": [1,, 2]}'), "InvalidJson", "unexpected ','"],
  ["missing comma in data", t('{"dtype": "U8", "shape": [2], "data": [1 2]}'), "InvalidJson", "expected ',' or ']'"],
  ["leading zero", t('{"dtype": "U8", "shape": [2], "data": [1, 01]}'), "InvalidJson", "a leading zero"],
  ["lone minus", t('{"dtype": "I8", "shape": [1], "data": [-]}'), "InvalidJson", "a '-' not followed by a digit"],
  ["bare NaN", t('{"dtype": "F32", "shape": [1], "data": [NaN]}'), "InvalidJson", 'bare NaN is not JSON; write the string "NaN"'],
  ["bare -Infinity", t('{"dtype": "F32", "shape": [1], "data": [-Infinity]}'), "InvalidJson", 'write the string "-Infinity"'],
  ["dot without digits", t('{"dtype": "F32", "shape": [1], "data": [1.]}'), "InvalidJson", "no digit after '.'"],
  ["exponent without digits", t('{"dtype": "F32", "shape": [1], "data": [1e]}'), "InvalidJson", "no digit in the exponent"],
  // The same faults after a run of plain numbers (the scan's loop for them hands over to the general one).
  [
    "a leading zero after plain numbers",
    t('{"dtype": "F32", "shape": [4], "data": [1.5, -2, 3e-7, 01]}'),
    "InvalidJson",
    "w.data[3]: invalid number (a leading zero)",
  ],
  [
    "a dot without digits after plain numbers",
    t('{"dtype": "F32", "shape": [3], "data": [1, 2, 1.]}'),
    "InvalidJson",
    "w.data[2]: invalid number (no digit after '.')",
  ],
  ["an exponent without digits after plain numbers", t('{"dtype": "F32", "shape": [3], "data": [1, 2, 1e+]}'), "InvalidJson", "no digit in the exponent"],
  ["a letter inside a number after plain numbers", t('{"dtype": "F32", "shape": [3], "data": [1, 2, 3x]}'), "InvalidJson", "'x' inside a number"],
  [
    "a nested array longer than the first, in plain numbers",
    t('{"dtype": "U8", "shape": [2, 2], "data": [[1, 2], [3, 4, 5]]}'),
    "ShapeMismatch",
    "w.data[1][2]: arrays at this level hold 2 elements, this one holds more",
  ],
  [
    "a negative after plain integers, for U8",
    t('{"dtype": "U8", "shape": [3], "data": [1, 2, -3]}'),
    "ValueOutOfRange",
    "w.data[2]: a negative value is out of range for U8",
  ],
  ["a fraction after plain integers, for I32", t('{"dtype": "I32", "shape": [3], "data": [1, 2, 2.5]}'), "InvalidValue", "w.data[2]: not an integer"],
  ["raw control character in a key", '{"a\nb": {}}', "InvalidJson", "raw control character"],
  ["invalid escape", '{"a\\qb": {}}', "InvalidJson", "an invalid escape \\q"],
  ["lone high surrogate escape", '{"\\ud800": {}}', "InvalidJson", "lone surrogate"],
  ["lone low surrogate escape", '{"\\udc00x": {}}', "InvalidJson", "lone surrogate"],
  ["invalid UTF-8 in a name", Uint8Array.of(0x7b, 0x22, 0xff, 0x22, 0x3a, 0x7b, 0x7d, 0x7d), "InvalidJson", "invalid UTF-8"],
  [
    "overlong UTF-8 in metadata",
    Uint8Array.from([...utf8.encode('{"__metadata__": {"k": "'), 0xc0, 0xaf, ...utf8.encode('"}}')]),
    "InvalidJson",
    "invalid UTF-8",
  ],
  // Duplicate keys, at every level
  [
    "duplicate tensor name",
    '{"w": {"dtype": "U8", "shape": [], "data": 1}, "w": {"dtype": "U8", "shape": [], "data": 2}}',
    "DuplicateKey",
    "w: the tensor name appears twice",
  ],
  ["duplicate __metadata__", '{"__metadata__": {}, "__metadata__": {}}', "DuplicateKey", "__metadata__ appears twice"],
  ["duplicate metadata key", '{"__metadata__": {"a": "1", "a": "2"}}', "DuplicateKey", "__metadata__.a: the metadata key appears twice"],
  ["duplicate dtype field", t('{"dtype": "U8", "dtype": "I8", "shape": [], "data": 1}'), "DuplicateKey", 'w: the field "dtype" appears twice'],
  ["duplicate data field", t('{"dtype": "U8", "shape": [], "data": 1, "data": 2}'), "DuplicateKey", 'the field "data" appears twice'],
  // Metadata
  ["metadata value a number", '{"__metadata__": {"step": 3}}', "InvalidMetadata", "__metadata__.step: the value is a number, not a string"],
  ["metadata an array", '{"__metadata__": ["a"]}', "InvalidMetadata", "must be an object mapping strings to strings"],
  ["metadata value null", '{"__metadata__": {"a": null}}', "InvalidMetadata", "the value is null, not a string"],
  // Tensor entries
  ["tensor not an object", t("[1, 2]"), "InvalidTensor", "w: a tensor is an object"],
  ["no dtype", t('{"shape": [1], "data": [1]}'), "InvalidTensor", 'w: no "dtype"'],
  ["no shape", t('{"dtype": "U8", "data": [1]}'), "InvalidTensor", 'w: no "shape"'],
  ["no data", t('{"dtype": "U8", "shape": [1]}'), "InvalidTensor", 'w: no "data" or "data_base64"'],
  ["data and data_base64", t('{"dtype": "U8", "shape": [1], "data": [1], "data_base64": "AQ=="}'), "InvalidTensor", "both"],
  ["unknown field", t('{"dtype": "U8", "shape": [1], "data": [1], "extra": 1}'), "InvalidTensor", 'unknown field "extra"'],
  ["a safetensors header", t('{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'), "InvalidTensor", "belong to a safetensors header"],
  ["a sharded checkpoint index", '{"metadata": {"total_size": 4}, "weight_map": {"w": "a.safetensors"}}', "InvalidTensor", "sharded checkpoint index"],
  ["dtype not a string", t('{"dtype": 8, "shape": [1], "data": [1]}'), "InvalidTensor", "w.dtype: must be a string"],
  ["unknown dtype", t('{"dtype": "F128", "shape": [1], "data": [1]}'), "UnknownDtype", 'w.dtype: unknown dtype "F128"'],
  ["lowercase dtype", t('{"dtype": "f32", "shape": [1], "data": [1]}'), "UnknownDtype", 'unknown dtype "f32"'],
  ["negative dimension", t('{"dtype": "U8", "shape": [-1], "data": []}'), "InvalidTensor", "w.shape[0]: must be a non-negative integer, found -1"],
  ["float dimension", t('{"dtype": "U8", "shape": [2.0], "data": [1, 2]}'), "InvalidTensor", "w.shape[0]: must be a non-negative integer, found 2.0"],
  ["nested shape", t('{"dtype": "U8", "shape": [[2]], "data": [1, 2]}'), "InvalidTensor", "w.shape[0]: must be a non-negative integer, found an array"],
  ["dimension past 2^53", t('{"dtype": "U8", "shape": [9007199254740992, 0], "data": []}'), "Unsupported", "w.shape[0]: 9007199254740992 is past 2^53 - 1"],
  ["u64-max dimension", t('{"dtype": "U8", "shape": [0, 18446744073709551615], "data": []}'), "Unsupported", "w.shape[1]"],
  ["byte count past 2^53", t('{"dtype": "F64", "shape": [9007199254740991, 2], "data": []}'), "Unsupported", "past 2^53"],
  ["odd F4 count", t('{"dtype": "F4", "shape": [3], "data_base64": "AA=="}'), "MisalignedSlice", "byte boundary"],
  ["F4 as values", t('{"dtype": "F4", "shape": [2], "data": [0.5, 1]}'), "Unsupported", "w.data: F4 has no values form"],
  // Shapes and counts
  [
    "too few values",
    t('{"dtype": "F32", "shape": [2, 2], "data": [1, 2, 3]}'),
    "ShapeMismatch",
    "w.data: 3 values (arrays of dims [3]), but F32 shape [2, 2] needs 4 values",
  ],
  ["too many values", t('{"dtype": "U8", "shape": [2], "data": [1, 2, 3]}'), "ShapeMismatch", "needs 2 values"],
  [
    "nesting transposed",
    t('{"dtype": "U8", "shape": [2, 3], "data": [[1, 2], [3, 4], [5, 6]]}'),
    "ShapeMismatch",
    "arrays of dims [3, 2] match neither shape [2, 3] nor a flat list of 6 values",
  ],
  [
    "ragged rows",
    t('{"dtype": "U8", "shape": [2, 2], "data": [[1, 2], [3]]}'),
    "ShapeMismatch",
    "w.data[1]: arrays at this level hold 2 elements, this one holds 1",
  ],
  [
    "ragged, longer",
    t('{"dtype": "U8", "shape": [2, 2], "data": [[1, 2], [3, 4, 5]]}'),
    "ShapeMismatch",
    "w.data[1][2]: arrays at this level hold 2 elements, this one holds more",
  ],
  [
    "value beside arrays",
    t('{"dtype": "U8", "shape": [2, 1], "data": [[1], 2]}'),
    "ShapeMismatch",
    "w.data[1]: a value where the other elements at this level are arrays",
  ],
  [
    "array beside values",
    t('{"dtype": "U8", "shape": [2], "data": [1, [2]]}'),
    "ShapeMismatch",
    "w.data[1]: an array where the other elements at this level are values",
  ],
  ["a bare value for a 1-d tensor", t('{"dtype": "U8", "shape": [1], "data": 1}'), "ShapeMismatch", "a bare value"],
  [
    "C64 without pairs",
    t('{"dtype": "C64", "shape": [2], "data": [1, 2]}'),
    "ShapeMismatch",
    "w.data: 1 [re, im] pairs (arrays of dims [2]), but C64 shape [2] needs 2 [re, im] pairs",
  ],
  ["C64 triples", t('{"dtype": "C64", "shape": [2], "data": [[1, 2, 3], [4, 5, 6]]}'), "ShapeMismatch", "needs 2 [re, im] pairs"],
  // Kinds of values
  ["a float for an integer dtype", t('{"dtype": "I32", "shape": [3], "data": [1, 2, 2.5]}'), "InvalidValue", "w.data[2]: not an integer"],
  ["1.0 for an integer dtype", t('{"dtype": "U8", "shape": [1], "data": [1.0]}'), "InvalidValue", "w.data[0]: not an integer"],
  ["a boolean for F32", t('{"dtype": "F32", "shape": [2, 2], "data": [[1, 2], [true, 4]]}'), "InvalidValue", "w.data[1][0]: true is not a F32 value"],
  ["a number for BOOL", t('{"dtype": "BOOL", "shape": [2], "data": [true, 1]}'), "InvalidValue", "w.data[1]: a number is not a BOOL value"],
  ["NaN for an integer dtype", t('{"dtype": "I64", "shape": [1], "data": ["NaN"]}'), "InvalidValue", 'w.data[0]: "NaN" is not a I64 value'],
  ["another string", t('{"dtype": "F32", "shape": [1], "data": ["1.5"]}'), "InvalidValue", 'w.data[0]: the string "1.5" is not a value'],
  ["lowercase nan", t('{"dtype": "F32", "shape": [1], "data": ["nan"]}'), "InvalidValue", 'strings in data are "NaN", "Infinity" and "-Infinity" only'],
  ["null in data", t('{"dtype": "F32", "shape": [2], "data": [1, null]}'), "InvalidValue", "w.data[1]: null is not a value"],
  ["an object in data", t('{"dtype": "F32", "shape": [1], "data": [{}]}'), "InvalidValue", "w.data[0]: an object is not a value"],
  // Ranges
  ["negative into U8", t('{"dtype": "U8", "shape": [2], "data": [1, -1]}'), "ValueOutOfRange", "w.data[1]: a negative value is out of range for U8"],
  [
    "Infinity into F8_E4M3",
    t('{"dtype": "F8_E4M3", "shape": [1], "data": ["Infinity"]}'),
    "ValueOutOfRange",
    'w.data[0]: "Infinity" is out of range for F8_E4M3, which has no infinity',
  ],
  ["-Infinity into F8_E5M2FNUZ", t('{"dtype": "F8_E5M2FNUZ", "shape": [1], "data": ["-Infinity"]}'), "ValueOutOfRange", "which has no infinity"],
  ["negative into F8_E8M0", t('{"dtype": "F8_E8M0", "shape": [1], "data": [-2]}'), "ValueOutOfRange", "F8_E8M0, which holds positive powers of two"],
  // base64
  [
    "base64 with a space",
    t('{"dtype": "U8", "shape": [3], "data_base64": "AQI D"}'),
    "InvalidBase64",
    "w.data_base64: byte 0x20, which is not base64, at character 3",
  ],
  [
    "base64 with a bad character",
    t('{"dtype": "U8", "shape": [3], "data_base64": "AQ-D"}'),
    "InvalidBase64",
    "w.data_base64: '-', which is not base64, at character 2",
  ],
  ["base64 URL alphabet", t('{"dtype": "U8", "shape": [3], "data_base64": "AQ_D"}'), "InvalidBase64", "'_', which is not base64"],
  ["base64 unpadded", t('{"dtype": "U8", "shape": [1], "data_base64": "AQ"}'), "InvalidBase64", "2 characters, not a multiple of 4"],
  ["base64 data after padding", t('{"dtype": "U8", "shape": [2], "data_base64": "AQ==AQ=="}'), "InvalidBase64", "a character after '=' padding"],
  ["base64 triple padding", t('{"dtype": "U8", "shape": [1], "data_base64": "A==="}'), "InvalidBase64", "a third '='"],
  [
    "base64 too short",
    t('{"dtype": "F32", "shape": [2], "data_base64": "AAAAAA=="}'),
    "ByteLengthMismatch",
    "w.data_base64: decodes to 4 bytes, F32 [2] needs 8",
  ],
  ["base64 too long", t('{"dtype": "U8", "shape": [1], "data_base64": "AAAA"}'), "ByteLengthMismatch", "decodes to 3 bytes"],
  ["base64 not a string", t('{"dtype": "U8", "shape": [1], "data_base64": [1]}'), "InvalidTensor", "w.data_base64: must be a string"],
  [
    "base64 escape of a non-base64 character",
    t('{"dtype": "U8", "shape": [3], "data_base64": "AQ\\nD"}'),
    "InvalidBase64",
    "an escape that is not a base64 character",
  ],
  // Limits
  [
    "number longer than the limit",
    t(`{"dtype": "F64", "shape": [1], "data": [1${"0".repeat(5000)}]}`),
    "LimitExceeded",
    "a number longer than 4096 characters",
  ],
  [
    "nesting past the depth limit",
    t(`{"dtype": "U8", "shape": [${Array(200).fill(1).join(", ")}], "data": ${"[".repeat(200)}1${"]".repeat(200)}}`),
    "LimitExceeded",
    `nesting deeper than ${MAX_JSON_DEPTH} levels`,
  ],
];

recordHostileCases(
  "json",
  ".json",
  cases.map(([attack, doc, code]) => [attack, typeof doc === "string" ? utf8.encode(doc) : doc, code] as const),
);

describe("refusals", () => {
  it.each(cases)("%s", async (_attack, doc, code, message) => {
    const bytes = typeof doc === "string" ? utf8.encode(doc) : doc;
    const error = await failure(readAll(bytes));
    expect(error.code).toBe(code);
    expect(error.message).toContain(message);
    // A refusal inside a tensor names it.
    if (/^w[.:]/.test(message)) expect(error.tensor).toBe("w");
  });

  it("reports the file name", async () => {
    const bytes = utf8.encode("[");
    const source = { size: bytes.length, name: "bad.json", read: async (o: number, n: number) => bytes.subarray(o, o + n) };
    await expect(readTensorJson(source)).rejects.toThrow(/^bad\.json: expected '\{'/);
  });
});

describe("values out of their dtype's range, refused when the tensor is read", () => {
  const range: [string, string, string][] = [
    ["U8", "300", "w.data[1]: 300 is out of range for U8 (0 to 255)"],
    ["I8", "-129", "w.data[1]: -129 is out of range for I8 (-128 to 127)"],
    ["U16", "65536", "out of range for U16"],
    ["I32", "2147483648", "out of range for I32 (-2147483648 to 2147483647)"],
    ["U32", "99999999999999999999999", "out of range for U32"],
    ["U64", "18446744073709551616", "w.data[1]: 18446744073709551616 is out of range for U64 (0 to 18446744073709551615)"],
    ["I64", "-9223372036854775809", "out of range for I64"],
    ["I64", "9223372036854775808", "out of range for I64"],
    ["F16", "65520", "w.data[1]: 65520 overflows F16 (largest finite 65500)"],
    ["F16", "-1e5", "-1e5 overflows F16"],
    ["BF16", "3.4e39", "overflows BF16"],
    ["F32", "3.5e38", "w.data[1]: 3.5e38 overflows F32"],
    ["F64", "1e309", "w.data[1]: 1e309 overflows F64"],
    ["C64", "[1, 1e39]", "w.data[1][1]: 1e39 overflows C64"],
    ["F8_E4M3", "480", "480 overflows F8_E4M3 (largest finite 450)"],
    ["F8_E5M2", "61440", "overflows F8_E5M2"],
    ["F8_E4M3FNUZ", "248", "overflows F8_E4M3FNUZ"],
    ["F8_E8M0", "0", "w.data[1]: 0 is not representable in F8_E8M0"],
    ["F8_E8M0", "1e39", "overflows F8_E8M0"],
  ];
  it.each(range)("%s %s", async (dtype, value, message) => {
    const first = dtype === "C64" ? "[0, 0]" : "1";
    const file = await readTensorJson(utf8.encode(t(`{"dtype": "${dtype}", "shape": [2], "data": [${first}, ${value}]}`)));
    const error = await failure(readTensorBytes(file.tensors[0]!));
    expect(error).toMatchObject({ code: "ValueOutOfRange", tensor: "w" });
    expect(error.message).toContain(message);
  });

  it("names the position in nested data", async () => {
    const file = await readTensorJson(utf8.encode(t('{"dtype": "U8", "shape": [2, 3], "data": [[1, 2, 3], [4, 256, 6]]}')));
    await expect(readTensorBytes(file.tensors[0]!)).rejects.toThrow('tensor "w": w.data[1][1]: 256 is out of range for U8 (0 to 255)');
  });

  it("quotes names that are not plain in paths", async () => {
    const error = await failure(readAll(t('{"dtype": "U8", "shape": [1], "data": [1.5]}', 'a b\\"c')));
    expect(error.message).toContain('"a b\\"c".data[0]: not an integer');
    expect(error.tensor).toBe('a b"c');
  });
});

describe("limits", () => {
  it("refuses a document whose names and metadata pass maxHeaderSize, before keeping them", async () => {
    const doc = utf8.encode(`{"__metadata__": {"k": "${"x".repeat(5000)}"}}`);
    expect((await failure(readAll(doc, { maxHeaderSize: 1000 }))).code).toBe("LimitExceeded");
    expect((await failure(readAll(utf8.encode(`${" ".repeat(2000)}{}`), { maxHeaderSize: 1000 }))).code).toBe("LimitExceeded");
    // Tensor data does not count.
    const big = t(`{"dtype": "U8", "shape": [2000], "data": [${Array(2000).fill(7).join(",")}]}`);
    expect((await readAll(big, { maxHeaderSize: 1000 })).tensors[0]!.bytes.length).toBe(2000);
  });

  it("accepts nesting up to maxDepth and refuses one level more", async () => {
    const nested = (rank: number) => t(`{"dtype": "U8", "shape": [${Array(rank).fill(1).join(", ")}], "data": ${"[".repeat(rank)}5${"]".repeat(rank)}}`);
    expect((await readAll(nested(MAX_JSON_DEPTH - 2))).tensors[0]!.bytes).toEqual(Uint8Array.of(5));
    expect((await failure(readAll(nested(MAX_JSON_DEPTH - 1)))).code).toBe("LimitExceeded");
    expect((await failure(readAll(nested(4), { maxDepth: 5 }))).code).toBe("LimitExceeded");
  });

  it("scans a million nested levels without recursion and refuses them", async () => {
    const deep = utf8.encode(`{"w": {"dtype": "U8", "shape": [1], "data": ${"[".repeat(1_000_000)}`);
    expect((await failure(readAll(deep))).code).toBe("LimitExceeded");
  });

  it("does not allocate what a shape claims: a huge shape with little data is a count mismatch", async () => {
    const error = await failure(readAll(t('{"dtype": "F64", "shape": [1000000000000], "data": [1]}')));
    expect(error.code).toBe("ShapeMismatch");
  });
});
