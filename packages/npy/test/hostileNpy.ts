/**
 * Hostile npy files, built byte by byte and named after the attack, with the code st-convert
 * refuses each with. The interop test checks that numpy refuses them too (all but the ones in
 * {@link STRICTER_THAN_NUMPY}).
 */
import { npyFile, smallNpy } from "./build.js";

const header = (fields: string) => `{${fields}}`;
const ok = "'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)";

/** [attack, bytes, code]. */
export const hostileNpy: [string, Uint8Array, string][] = [
  ["an empty file", new Uint8Array(0), "UnexpectedEof"],
  ["the magic alone", Uint8Array.of(0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59), "UnexpectedEof"],
  ["a wrong magic (\\x93NUMPZ)", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x5a, 1, 0, 0, 0]), "BadMagic"],
  ["a zip given as npy", Uint8Array.of(0x50, 0x4b, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0), "BadMagic"],
  ["lower-case magic", Uint8Array.from([0x93, 0x6e, 0x75, 0x6d, 0x70, 0x79, 1, 0, 0, 0]), "BadMagic"],
  ["version 0.0", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0, 0, 0, 0]), "UnsupportedVersion"],
  ["version 1.1", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 1, 0, 0]), "UnsupportedVersion"],
  ["version 4.0", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 4, 0, 0, 0]), "UnsupportedVersion"],
  ["version 255.255", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 255, 255, 0, 0]), "UnsupportedVersion"],
  ["a cut header-length field", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, 5]), "UnexpectedEof"],
  ["a header shorter than declared", npyFile(header(ok)).subarray(0, 40), "UnexpectedEof"],
  ["a v1 header declaring 65,535 bytes", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, 0xff, 0xff, 0x7b]), "HeaderTooLarge"],
  ["a v2 header declaring 4 GiB", Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x7b]), "HeaderTooLarge"],
  ["a v3 header that is not UTF-8", npyFile(`{${ok}}`, 24, [3, 0]).map((b, i) => (i === 12 ? 0xff : b)), "InvalidHeader"],
  ["a header that is a list", npyFile("[1, 2]"), "InvalidHeader"],
  ["a header that is a set", npyFile("{'descr', 'shape', 'fortran_order'}"), "InvalidHeader"],
  ["a header with an extra key", npyFile(header(`${ok}, 'extrakey': 1`), 24), "InvalidHeaderKeys"],
  ["a header without fortran_order", npyFile(header("'descr': '<f4', 'shape': (2, 3)"), 24), "InvalidHeaderKeys"],
  [
    "a header calling __import__",
    npyFile(header("'descr': __import__('os').system('touch /tmp/st-convert-pwned'), 'fortran_order': False, 'shape': (2, 3)"), 24),
    "InvalidHeader",
  ],
  ["a header with a lambda", npyFile(header("'descr': (lambda: '<f4')(), 'fortran_order': False, 'shape': (2, 3)"), 24), "InvalidHeader"],
  ["a header with arithmetic", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (2*3,)"), 24), "InvalidHeader"],
  ["a header with a NUL byte", npyFile(header(`${ok}\0`), 24), "InvalidHeader"],
  ["a header nested 9,000 deep", npyFile(`${"(".repeat(4500)}${")".repeat(4500)}`), "InvalidHeader"],
  ["a shape that is a list", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]"), 24), "InvalidShape"],
  ["a bool dimension", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (True, 3)"), 24), "InvalidShape"],
  ["a negative dimension", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (-1,)"), 24), "InvalidShape"],
  ["a dimension past int64", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (100000000000000000000,)"), 24), "InvalidShape"],
  ["fortran_order 0", npyFile(header("'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)"), 24), "InvalidFortranOrder"],
  ["an unknown descr '<q9'", npyFile(header("'descr': '<q9', 'fortran_order': False, 'shape': (2, 3)"), 24), "InvalidDescr"],
  ["a bytes descr", npyFile(header("'descr': b'<f4', 'fortran_order': False, 'shape': (2, 3)"), 24), "InvalidDescr"],
  ["a structured descr", npyFile(header("'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2, 3)"), 24), "UnsupportedDtype"],
  ["an object array (a pickle)", npyFile(header("'descr': '|O', 'fortran_order': False, 'shape': (1,)"), Uint8Array.of(0x80, 4, 0x95)), "UnsupportedDtype"],
  ["data one byte short", smallNpy().subarray(0, smallNpy().byteLength - 1), "UnexpectedEof"],
  // numpy makes the array before reading data, and refuses one past 2^63 - 1 bytes ("array is too big").
  ["2^62 float64 in 200 bytes", npyFile(header("'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)"), 100), "InvalidShape"],
  ["a shape whose product wraps int64", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)"), 16), "InvalidShape"],
  [
    "an empty (2^32, 2^32, 0) float32: too big for numpy",
    npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0)")),
    "InvalidShape",
  ],
  [
    "an empty (0, 2^32, 2^32) uint8: too big for numpy",
    npyFile(header("'descr': '|u1', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296)")),
    "InvalidShape",
  ],
  [
    "an empty (2^60, 2, 0) float32: 2^63 bytes",
    npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976, 2, 0)")),
    "InvalidShape",
  ],
  ["a subarray descr of 2 per item ('2f4')", npyFile(header("'descr': '2f4', 'fortran_order': False, 'shape': (2,)"), 16), "UnsupportedDtype"],
  ["an empty array with a dimension past 2^53", npyFile(header("'descr': '<f4', 'fortran_order': False, 'shape': (0, 1152921504606846976)")), "Unsupported"],
];

/** Files numpy loads and st-convert refuses, with why (in the order of {@link hostileNpy}). */
export const STRICTER_THAN_NUMPY: Record<string, string> = {
  "a structured descr": "a valid structured array for numpy; safetensors has no structured dtype",
  "an empty array with a dimension past 2^53": "numpy holds int64 dimensions; JavaScript numbers are exact only to 2^53",
};
