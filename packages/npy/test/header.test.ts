/**
 * The npy header writer against numpy's files (byte for byte), and the header reader's checks.
 */
import { readFileSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MAX_NPY_HEADER_SIZE, type NpyVersion, encodeNpyHeader, parseNpyHeader, readNpyHeader } from "@st-convert/npy";
import { fixturePath, toHex } from "@st-convert/testing";

const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, { expect: { error?: string } }>;

/** Files np.save or write_array wrote (not laid out by hand), whose header numpy's writer made. */
const written = readdirSync(fixturePath("npy")).filter(
  (f) => f.endsWith(".npy") && !(f.startsWith("header_") && f !== "header_padlen_64.npy") && f !== "trailing_bytes.npy" && f !== "refuse_structured.npy",
);

describe("encodeNpyHeader reproduces numpy's header bytes", () => {
  it.each(written)("%s", async (name) => {
    const bytes = readFileSync(fixturePath("npy", name));
    const { version, header, dataOffset } = await readNpyHeader(async (n) => bytes.subarray(0, n));
    const ours = encodeNpyHeader(header, name.startsWith("version_") ? { version } : {});
    expect(toHex(ours)).toBe(toHex(bytes.subarray(0, dataOffset)));
    expect(dataOffset % 64).toBe(0);
  });

  it("pads an already aligned header with 64 spaces, never 0", () => {
    const header = encodeNpyHeader({ descr: "|u1", shape: [2, ...new Array<number>(12).fill(1), 100] });
    expect(header.byteLength).toBe(192);
    expect(new TextDecoder().decode(header.subarray(-65))).toBe(`${" ".repeat(64)}\n`);
  });

  it("uses the last dimension for the growth padding of a Fortran-order header", () => {
    const c = new TextDecoder().decode(encodeNpyHeader({ descr: "<f4", shape: [123456, 7] }));
    const f = new TextDecoder().decode(encodeNpyHeader({ descr: "<f4", fortranOrder: true, shape: [123456, 7] }));
    expect(c.trimEnd().endsWith("(123456, 7), }")).toBe(true);
    expect(f).toContain("'fortran_order': True");
    // 21 − 6 spaces after the C header's text, 21 − 1 after the Fortran one's (then alignment).
    expect(c.indexOf("}") + 1 + 15).toBeLessThanOrEqual(c.length);
    expect(c.length).toBe(128);
    expect(f.length).toBe(128);
  });

  it("moves to version 2.0 only when the header outgrows a 16-bit length", () => {
    expect(encodeNpyHeader({ descr: "<f4", shape: new Array<number>(10_000).fill(1) })[6]).toBe(1);
    const big = encodeNpyHeader({ descr: "<f4", shape: new Array<number>(30_000).fill(1) });
    expect([big[6], big[7]]).toEqual([2, 0]);
    expect(big.byteLength % 64).toBe(0);
    expect(() => encodeNpyHeader({ descr: "<f4", shape: new Array<number>(30_000).fill(1) }, { version: [1, 0] })).toThrow(/too long/);
  });

  it("writes versions 2.0 and 3.0 when asked, as write_array(version=…) does", () => {
    for (const v of [2, 3] as const) {
      const bytes = readFileSync(fixturePath("npy", `version_${v}.npy`));
      const ours = encodeNpyHeader({ descr: "<f4", shape: [2, 3] }, { version: [v, 0] as NpyVersion });
      expect(toHex(ours)).toBe(toHex(bytes.subarray(0, ours.byteLength)));
    }
  });

  it("refuses what it cannot write", () => {
    expect(() => encodeNpyHeader({ descr: "<f4", shape: [-1] })).toThrow(/not a non-negative integer/);
    expect(() => encodeNpyHeader({ descr: "<f4", shape: [1.5] })).toThrow(/not a non-negative integer/);
    expect(() => encodeNpyHeader({ descr: "π", shape: [1] })).toThrow(/printable ASCII/);
  });

  it("quotes a descr as Python's repr does", () => {
    const text = new TextDecoder().decode(encodeNpyHeader({ descr: "it's", shape: [] }));
    expect(text).toContain(`{'descr': "it's", `);
  });
});

describe("parseNpyHeader", () => {
  const ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

  it("returns the three fields", () => {
    expect(parseNpyHeader(ok)).toEqual({ descr: "<f4", fortranOrder: false, shape: [2n, 3n] });
  });

  it("header-last-line-indent: padding that ends in a newline and then blanks is refused, as np.load refuses it (unexpected indent)", () => {
    const indent = expect.objectContaining({ code: "InvalidHeader", message: expect.stringMatching(/unexpected indent/) });
    expect(parseNpyHeader(`${ok}      \n`).descr).toBe("<f4");
    expect(parseNpyHeader(`${ok}   \r   \n`).descr).toBe("<f4");
    // Versions 1.0 and 2.0 get numpy's Python 2 clean-up, which drops blanks after the last "\n" but not after a lone "\r".
    for (const padding of ["\n  ", "\r\n\t"]) {
      expect(parseNpyHeader(ok + padding, [1, 0]).descr).toBe("<f4");
      expect(() => parseNpyHeader(ok + padding, [3, 0])).toThrow(indent);
    }
    for (const version of [
      [1, 0],
      [2, 0],
      [3, 0],
    ] as const)
      expect(() => parseNpyHeader(`${ok}   \r      `, version)).toThrow(indent);
  });

  it(`counts the limit in characters, ${MAX_NPY_HEADER_SIZE} by default, inclusive`, () => {
    const at = (n: number) => ok + " ".repeat(n - ok.length);
    expect(parseNpyHeader(at(MAX_NPY_HEADER_SIZE)).descr).toBe("<f4");
    expect(() => parseNpyHeader(at(MAX_NPY_HEADER_SIZE + 1))).toThrow(expect.objectContaining({ code: "HeaderTooLarge" }));
    expect(parseNpyHeader(at(20_000), [1, 0], { maxHeaderSize: 20_000 }).descr).toBe("<f4");
    // Code points, as Python counts: a 4-byte UTF-8 character is one.
    expect(parseNpyHeader(`${ok}#${"😀".repeat(100)}`, [3, 0], { maxHeaderSize: ok.length + 101 }).descr).toBe("<f4");
  });

  it.each([
    ["[1, 2]", "InvalidHeader", /not a dictionary but a list/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", "InvalidHeaderKeys", /"x"/],
    ["{'descr': '<f4', 'shape': (2,)}", "InvalidHeaderKeys", /found "descr", "shape"/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 1: 2}", "InvalidHeaderKeys", /not strings/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "InvalidShape", /\[2\]/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (True, 2)}", "InvalidShape", /\(True, 2\)/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", "InvalidShape", /tuple of integers/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "InvalidShape", /negative dimensions/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000000000000,)}", "InvalidShape", /int64/],
    ["{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "InvalidFortranOrder", /not a valid bool: 0/],
    ["{'descr': b'<f4', 'fortran_order': False, 'shape': (2,)}", "InvalidDescr", /b'…'/],
    ["{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,)}", "UnsupportedDtype", /structured/],
    ["{'descr': __import__('os').system('touch pwned'), 'fortran_order': False, 'shape': (2,)}", "InvalidHeader", /"__import__" is not a literal/],
    ["{'descr': str('<i4'), 'fortran_order': False, 'shape': (2,)}", "InvalidHeader", /"str" is not a literal/],
    ["{'descr': '<f4', 'fortran_order': False, 'shape': (2**70,)}", "InvalidHeader", /found '\*'/],
  ])("refuses %s", (text, code, message) => {
    expect(() => parseNpyHeader(text)).toThrow(expect.objectContaining({ code, message: expect.stringMatching(message) }));
  });

  it("keeps a (base, shape) tuple descr for the array reader, which numpy's descr_to_dtype reads", () => {
    const header = parseNpyHeader("{'descr': ('<i4', (2,)), 'fortran_order': False, 'shape': (2,)}");
    expect(header.descr).toBe("('<i4', (2,))");
    expect(header.descrTuple).toMatchObject({ kind: "tuple", items: [{ kind: "str", value: "<i4" }, { kind: "tuple" }] });
  });

  it("keeps the last of duplicate keys, as a Python dict does", () => {
    expect(parseNpyHeader("{'descr': '<f4', 'descr': '<i4', 'fortran_order': False, 'shape': ()}").descr).toBe("<i4");
  });

  it("retries without L suffixes only for versions 1.0 and 2.0", () => {
    const py2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }";
    const warnings: string[] = [];
    expect(parseNpyHeader(py2, [1, 0], { onWarning: (m) => warnings.push(m) }).shape).toEqual([2n, 3n]);
    expect(parseNpyHeader(py2, [2, 0]).shape).toEqual([2n, 3n]);
    expect(warnings).toHaveLength(1);
    expect(() => parseNpyHeader(py2, [3, 0])).toThrow(expect.objectContaining({ code: "InvalidHeader" }));
  });

  it("every refusal in the manifest that happens in the header has a code the header reader uses", () => {
    expect(manifest["header_10001_chars.npy"]!.expect.error).toBe("HeaderTooLarge");
  });
});
