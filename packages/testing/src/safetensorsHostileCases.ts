/**
 * Hostile and malformed safetensors files, each built byte by byte and named after its attack.
 * The expected outcome is the reference reader's (safetensors 0.8.0, probed; the interop test
 * re-checks every case against the installed reference), except where a case says st-convert is
 * stricter.
 */
import { safetensorsFile } from "./safetensorsFile.js";

/** One tensor entry of a header, as text. */
export const t = (name: string, dtype: string, shape: string, offsets: string) =>
  `"${name}":{"dtype":"${dtype}","shape":[${shape}],"data_offsets":[${offsets}]}`;
/** A header object from entries. */
export const header = (...entries: string[]) => `{${entries.join(",")}}`;

/** A valid header with `value` in a tensor field the reference ignores. */
const ignoredField = (value: string) => `{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":${value}}}`;

/** [attack, file, expected error code or "ok"] */
export const hostileCases: [string, Uint8Array, string][] = [
  // §1.2 steps 1–3: lengths
  ["empty file (test_header_too_small)", new Uint8Array(0), "HeaderTooSmall"],
  ["7-byte file", new Uint8Array(7), "HeaderTooSmall"],
  ["header length FF..FF bytes 3C 00 00 00 00 FF FF FF (test_header_too_large)", Uint8Array.from([0x3c, 0, 0, 0, 0, 0xff, 0xff, 0xff]), "HeaderTooLarge"],
  ["N = 100,000,001 in a 10-byte file: too large wins over the file length", safetensorsFile("{}", 0, 100_000_001n), "HeaderTooLarge"],
  ["N = 2^63 in a 16-byte file", safetensorsFile("{}      ", 0, 1n << 63n), "HeaderTooLarge"],
  ["N = u64 max", safetensorsFile("{}", 0, (1n << 64n) - 1n), "HeaderTooLarge"],
  ["N = 60 with an 8-byte file (test_invalid_header_length)", safetensorsFile("", 0, 60n), "InvalidHeaderLength"],
  ["N = 1000 in a tiny file (attack 1)", safetensorsFile("{}", 0, 1000n), "InvalidHeaderLength"],
  ["N one past the end", safetensorsFile("{}", 0, 3n), "InvalidHeaderLength"],
  // step 4: UTF-8
  ["header byte FF (test_invalid_header_non_utf8)", safetensorsFile(Uint8Array.from([0xff])), "InvalidHeader"],
  ["overlong UTF-8 encoding of '{'", safetensorsFile(Uint8Array.from([0xc1, 0xbb, 0x7d])), "InvalidHeader"],
  ["UTF-8-encoded surrogate", safetensorsFile(Uint8Array.from([0x7b, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x3a, 0x31, 0x7d])), "InvalidHeader"],
  // step 5: JSON and schema
  ["N = 0, empty header", safetensorsFile(""), "InvalidHeaderDeserialization"],
  ["lone '{' (test_invalid_header_not_json)", safetensorsFile("{"), "InvalidHeaderDeserialization"],
  ["NUL padding after the header", safetensorsFile("{}\0\0\0\0\0\0"), "InvalidHeaderDeserialization"],
  ["form feed padding", safetensorsFile("{}\f"), "InvalidHeaderDeserialization"],
  ["byte-order mark", safetensorsFile("\ufeff{}"), "InvalidHeaderDeserialization"],
  ["a JSON array", safetensorsFile("[]"), "InvalidHeaderDeserialization"],
  // A key of data_offsets' length that differs only in its first byte is another key (found by the differential fuzzer).
  ["tata_offsets instead of data_offsets", safetensorsFile('{"t":{"dtype":"U8","shape":[1],"tata_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  [
    "Data_offsets beside data_offsets: an ignored field",
    safetensorsFile('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"Data_offsets":[0,1]}}', 1),
    "ok",
  ],
  ["a JSON string", safetensorsFile('"x"'), "InvalidHeaderDeserialization"],
  ["trailing comma", safetensorsFile('{"a":1,}'), "InvalidHeaderDeserialization"],
  ["two top-level objects", safetensorsFile("{}{}"), "InvalidHeaderDeserialization"],
  ["integer metadata value", safetensorsFile('{"__metadata__":{"a":1}}'), "InvalidHeaderDeserialization"],
  ["null metadata value", safetensorsFile('{"__metadata__":{"a":null}}'), "InvalidHeaderDeserialization"],
  ["metadata as a string", safetensorsFile('{"__metadata__":"x"}'), "InvalidHeaderDeserialization"],
  ["metadata as an array", safetensorsFile('{"__metadata__":[]}'), "InvalidHeaderDeserialization"],
  ["duplicate __metadata__", safetensorsFile('{"__metadata__":{},"__metadata__":{}}'), "InvalidHeaderDeserialization"],
  ["unknown dtype F128", safetensorsFile(header(t("t", "F128", "1", "0,16")), 16), "InvalidHeaderDeserialization"],
  ["lower-case dtype f32", safetensorsFile(header(t("t", "f32", "1", "0,4")), 4), "InvalidHeaderDeserialization"],
  ["dtype as an integer", safetensorsFile('{"t":{"dtype":5,"shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["dtype as a map with a list value", safetensorsFile('{"t":{"dtype":{"U8":[]},"shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  [
    "dtype as a map with two keys",
    safetensorsFile('{"t":{"dtype":{"U8":null,"I8":null},"shape":[1],"data_offsets":[0,1]}}', 1),
    "InvalidHeaderDeserialization",
  ],
  ["missing shape", safetensorsFile('{"t":{"dtype":"U8","data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["missing dtype", safetensorsFile('{"t":{"shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["missing data_offsets", safetensorsFile('{"t":{"dtype":"U8","shape":[1]}}', 1), "InvalidHeaderDeserialization"],
  ["negative dim", safetensorsFile(header(t("t", "U8", "-1", "0,1")), 1), "InvalidHeaderDeserialization"],
  ["float dim 4.0", safetensorsFile(header(t("t", "U8", "4.0", "0,4")), 4), "InvalidHeaderDeserialization"],
  ["exponent dim 1e0", safetensorsFile(header(t("t", "U8", "1e0", "0,1")), 1), "InvalidHeaderDeserialization"],
  ["negative zero dim", safetensorsFile(header(t("t", "U8", "-0", "0,0"))), "InvalidHeaderDeserialization"],
  ["leading-zero dim 01", safetensorsFile(header(t("t", "U8", "01", "0,1")), 1), "InvalidHeaderDeserialization"],
  ["dim u64 max + 1", safetensorsFile(header(t("t", "U8", "0,18446744073709551616", "0,0"))), "InvalidHeaderDeserialization"],
  ["boolean dim", safetensorsFile(header(t("t", "U8", "true", "0,1")), 1), "InvalidHeaderDeserialization"],
  ["shape null", safetensorsFile('{"t":{"dtype":"U8","shape":null,"data_offsets":[0,0]}}'), "InvalidHeaderDeserialization"],
  ["three data_offsets", safetensorsFile(header(t("t", "U8", "16", "0,16,16")), 16), "InvalidHeaderDeserialization"],
  ["one data_offset", safetensorsFile(header(t("t", "U8", "1", "0")), 1), "InvalidHeaderDeserialization"],
  ["data_offsets as a map", safetensorsFile('{"t":{"dtype":"U8","shape":[1],"data_offsets":{"0":0,"1":1}}}', 1), "InvalidHeaderDeserialization"],
  ["data_offsets as strings", safetensorsFile('{"t":{"dtype":"U8","shape":[1],"data_offsets":["0","1"]}}', 1), "InvalidHeaderDeserialization"],
  ["tensor info as an integer", safetensorsFile('{"t":5}'), "InvalidHeaderDeserialization"],
  ["tensor info null", safetensorsFile('{"t":null}'), "InvalidHeaderDeserialization"],
  ["tensor info array of two", safetensorsFile('{"t":["U8",[1]]}', 1), "InvalidHeaderDeserialization"],
  ["tensor info array of four", safetensorsFile('{"t":["U8",[1],[0,1],5]}', 1), "InvalidHeaderDeserialization"],
  ["duplicate dtype field", safetensorsFile('{"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["lone low surrogate escape in a name", safetensorsFile('{"\\udc00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["lone high surrogate escape in a name", safetensorsFile('{"\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["invalid escape \\x", safetensorsFile('{"\\x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["raw control character in a name", safetensorsFile('{"a\u0001":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  ["unterminated string", safetensorsFile('{"abc'), "InvalidHeaderDeserialization"],
  ["unknown field holding invalid JSON", safetensorsFile('{"t":{"x":[1,],"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "InvalidHeaderDeserialization"],
  [
    "nesting 128 deep inside an ignored field",
    safetensorsFile(`{"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"foo":${"[".repeat(126)}${"]".repeat(126)}}}`),
    "InvalidHeaderDeserialization",
  ],
  ["nesting 100,000 deep (stack exhaustion attempt)", safetensorsFile("[".repeat(100_000)), "InvalidHeaderDeserialization"],
  // steps 6–11: layout
  [
    "ten tensors at the same offsets (test_json_attack)",
    safetensorsFile(header(...Array.from({ length: 10 }, (_, i) => t(`t${i}`, "F32", "2,2", "0,16"))), 16),
    "InvalidOffset",
  ],
  ["reversed offsets", safetensorsFile(header(t("t", "U8", "1", "1,0")), 1), "InvalidOffset"],
  ["a hole before the first tensor", safetensorsFile(header(t("t", "U8", "1", "1,2")), 2), "InvalidOffset"],
  ["a hole between tensors", safetensorsFile(header(t("a", "U8", "1", "0,1"), t("b", "U8", "1", "2,3")), 3), "InvalidOffset"],
  ["overlapping tensors", safetensorsFile(header(t("a", "U8", "2", "0,2"), t("b", "U8", "2", "1,3")), 3), "InvalidOffset"],
  ["zero-size tensor at a wrong offset", safetensorsFile(header(t("a", "I32", "1", "0,4"), t("b", "U8", "0", "5,5")), 4), "InvalidOffset"],
  ["offsets past the end of the file", safetensorsFile(header(t("t", "U8", "8", "0,8")), 4), "MetadataIncompleteBuffer"],
  ["offsets near u64 max", safetensorsFile(header(t("t", "U8", "1", "0,18446744073709551615")), 1), "TensorInvalidInfo"],
  ["shape [4294967296,4294967296,0]: overflow before the zero", safetensorsFile(header(t("t", "U8", "4294967296,4294967296,0", "0,0"))), "ValidationOverflow"],
  ["shape [2, 2^64-2] (test_validation_overflow)", safetensorsFile(header(t("t", "U8", "2,18446744073709551614", "0,0"))), "ValidationOverflow"],
  ["shape [2, 2^63-1] F32 (test_validation_overflow)", safetensorsFile(header(t("t", "F32", "2,9223372036854775807", "0,0"))), "ValidationOverflow"],
  ["U8 with 2^61 elements: the bit count overflows", safetensorsFile(header(t("t", "U8", "2305843009213693952", "0,0"))), "ValidationOverflow"],
  ["U8 with 2^61-1 elements: bits fit, bytes do not match", safetensorsFile(header(t("t", "U8", "2305843009213693951", "0,0"))), "TensorInvalidInfo"],
  ["F4 with 3 elements", safetensorsFile(header(t("t", "F4", "3", "0,2")), 2), "MisalignedSlice"],
  ["F6_E3M2 with 2 elements", safetensorsFile(header(t("t", "F6_E3M2", "2", "0,2")), 2), "MisalignedSlice"],
  ["I32 [2,2] in 4 bytes (test_invalid_info)", safetensorsFile(header(t("t", "I32", "2,2", "0,4")), 4), "TensorInvalidInfo"],
  ["F32 [1024,1024] claiming 4 MiB backed by 1 byte", safetensorsFile(header(t("t", "F32", "1024,1024", "0,4194304")), 1), "MetadataIncompleteBuffer"],
  ["one trailing byte (polyglot)", safetensorsFile(header(t("t", "U8", "1", "0,1")), 2), "MetadataIncompleteBuffer"],
  ["two missing bytes", safetensorsFile(header(t("t", "U8", "4", "0,4")), 2), "MetadataIncompleteBuffer"],
  ["trailing bytes after an empty header", safetensorsFile("{}", 3), "MetadataIncompleteBuffer"],
  // Numbers serde_json cannot hold as an f64 ("number out of range"): refused wherever they stand,
  // even in a field the reference ignores, since it parses every value of the header.
  ["1e400 in an ignored field", safetensorsFile(ignoredField("1e400")), "InvalidHeaderDeserialization"],
  ["-1e400 in an ignored field", safetensorsFile(ignoredField("-1e400")), "InvalidHeaderDeserialization"],
  ["2e308 in an ignored field", safetensorsFile(ignoredField("2e308")), "InvalidHeaderDeserialization"],
  ["1.8e308 in an ignored field", safetensorsFile(ignoredField("1.8e308")), "InvalidHeaderDeserialization"],
  [
    "1.7976931348623158e308 in an ignored field (rounds to the largest double, but serde's u64 × 10^292 overflows)",
    safetensorsFile(ignoredField("1.7976931348623158e308")),
    "InvalidHeaderDeserialization",
  ],
  ["100e307 in an ignored field (10^309)", safetensorsFile(ignoredField("100e307")), "InvalidHeaderDeserialization"],
  ["0.1e310 in an ignored field (10^309)", safetensorsFile(ignoredField("0.1e310")), "InvalidHeaderDeserialization"],
  ["a 400-digit integer in an ignored field", safetensorsFile(ignoredField(`1${"0".repeat(399)}`)), "InvalidHeaderDeserialization"],
  ["a negative 400-digit integer in an ignored field", safetensorsFile(ignoredField(`-1${"0".repeat(399)}`)), "InvalidHeaderDeserialization"],
  ["exponent past i32 max, 1e2147483648, in an ignored field", safetensorsFile(ignoredField("1e2147483648")), "InvalidHeaderDeserialization"],
  ["1e400 in an ignored field nested in arrays", safetensorsFile(ignoredField('[[1, {"y": [1e400]}]]')), "InvalidHeaderDeserialization"],
  ["1e400 as a dim", safetensorsFile(header(t("t", "U8", "1e400", "0,0"))), "InvalidHeaderDeserialization"],
  ["1e400 as a data offset", safetensorsFile(header(t("t", "U8", "0", "0,1e400"))), "InvalidHeaderDeserialization"],
  ["1e308 in an ignored field", safetensorsFile(ignoredField("1e308")), "ok"],
  ["1.7976931348623157e308 (the largest double) in an ignored field", safetensorsFile(ignoredField("1.7976931348623157e308")), "ok"],
  ["10e307 in an ignored field", safetensorsFile(ignoredField("10e307")), "ok"],
  ["0.00001e313 in an ignored field (10^308)", safetensorsFile(ignoredField("0.00001e313")), "ok"],
  ["a 309-digit integer, 10^308, in an ignored field", safetensorsFile(ignoredField(`1${"0".repeat(308)}`)), "ok"],
  ["u64 max + 1 in an ignored field (a float to serde)", safetensorsFile(ignoredField("18446744073709551616")), "ok"],
  ["1e-400 in an ignored field (underflows to 0)", safetensorsFile(ignoredField("1e-400")), "ok"],
  ["-1e-400 in an ignored field (underflows to -0)", safetensorsFile(ignoredField("-1e-400")), "ok"],
  ["0e2147483648 in an ignored field (a zero significand never overflows)", safetensorsFile(ignoredField("0e2147483648")), "ok"],
  ["1e-2147483649 in an ignored field", safetensorsFile(ignoredField("1e-2147483649")), "ok"],
  // Stricter than the reference, as the format's README is.
  ["duplicate tensor name (reference: last wins)", safetensorsFile(`{${t("t", "U8", "2,2", "0,4")},${t("t", "U8", "4", "0,4")}}`, 4), "DuplicateKey"],
  ["duplicate metadata key (reference: last wins)", safetensorsFile('{"__metadata__":{"a":"1","a":"2"}}'), "DuplicateKey"],
  // Accepted, as the reference accepts them.
  ["leading and trailing whitespace (test_whitespace_leading_padded_header)", safetensorsFile("\t\n{}\r "), "ok"],
  ["trailing whitespace (test_whitespace_padded_header)", safetensorsFile("{}\r \t\n"), "ok"],
  [
    "nesting 127 deep inside an ignored field",
    safetensorsFile(`{"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"foo":${"[".repeat(125)}${"]".repeat(125)}}}`),
    "ok",
  ],
  ["shape [0,4294967296,4294967296]: the zero comes first", safetensorsFile(header(t("t", "U8", "0,4294967296,4294967296", "0,0"))), "ok"],
  ["F6_E2M3 with 4 elements in 3 bytes", safetensorsFile(header(t("t", "F6_E2M3", "4", "0,3")), 3), "ok"],
  ["tensor info as an array (a serde form)", safetensorsFile('{"t":["U8",[1],[0,1]]}', 1), "ok"],
  ["dtype as a single-key map (a serde form)", safetensorsFile('{"t":{"dtype":{"U8":null},"shape":[1],"data_offsets":[0,1]}}', 1), "ok"],
  ["unknown extra field", safetensorsFile('{"t":{"foo":{"deep":[1,{"x":null}]},"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1), "ok"],
  ["metadata null (means absent)", safetensorsFile('{"__metadata__":null}'), "ok"],
  ["two zero-size tensors at one offset", safetensorsFile(header(t("a", "U8", "0", "0,0"), t("b", "F32", "0,3", "0,0"))), "ok"],
  ["keys in reverse offset order", safetensorsFile(header(t("b", "U8", "1", "1,2"), t("a", "U8", "1", "0,1")), 2), "ok"],
  ["escaped NUL and a surrogate pair in names", safetensorsFile(header(t("\\u0000", "U8", "1", "0,1"), t("\\ud83d\\ude00", "U8", "1", "1,2")), 2), "ok"],
  ["the empty name", safetensorsFile(header(t("", "U8", "1", "0,1")), 1), "ok"],
  ["a 0-d tensor (test_empty_shapes_allowed)", safetensorsFile(header(t("t", "I32", "", "0,4")), 4), "ok"],
];

/** Cases where st-convert refuses what the reference accepts, and why. */
export const STRICTER_THAN_REFERENCE: Record<string, string> = {
  "duplicate tensor name (reference: last wins)": "the format's README forbids duplicate keys",
  "duplicate metadata key (reference: last wins)": "the format's README forbids duplicate keys",
};
