/**
 * The header's Python-literal parser against `ast.literal_eval` (fixtures/npy/literals.json
 * records what Python 3.11 makes of each text): same values, same refusals.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MAX_LITERAL_DEPTH, type PyValue, parsePythonLiteral } from "@st-convert/npy";
import { fixturePath } from "@st-convert/testing";

interface Case {
  text: string;
  ok: boolean;
  error?: string;
  value?: unknown;
}

const cases = JSON.parse(readFileSync(fixturePath("npy", "literals.json"), "utf8")) as Case[];

/** The same tagged form gen_npy.py's `tag()` gives Python values. */
function tag(value: PyValue): unknown {
  switch (value.kind) {
    case "bool":
      return { bool: value.value };
    case "none":
      return { none: true };
    case "ellipsis":
      return { ellipsis: true };
    case "int":
      return { int: value.value.toString() };
    case "float":
      return { float: true };
    case "complex":
      return { complex: true };
    case "str":
      return { str: [...value.value].map((c) => c.codePointAt(0)) };
    case "bytes":
      return { bytes: [...value.value].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("") };
    case "tuple":
      return { tuple: value.items.map(tag) };
    case "list":
      return { list: value.items.map(tag) };
    case "set": {
      // Python sorts nothing; the fixture sorts items by their JSON, and so do we.
      const items = value.items.map(tag).sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
      return { set: items.filter((x, i) => i === 0 || JSON.stringify(x) !== JSON.stringify(items[i - 1])) };
    }
    case "dict": {
      // Python dicts keep the first position of a key and the last value.
      const entries = new Map<string, [unknown, unknown]>();
      for (const [k, v] of value.entries) {
        const key = JSON.stringify(tag(k));
        entries.set(key, [entries.get(key)?.[0] ?? tag(k), tag(v)]);
      }
      return { dict: [...entries.values()] };
    }
  }
}

describe("parsePythonLiteral agrees with ast.literal_eval", () => {
  it.each(cases.filter((c) => c.ok))("accepts %j", (c) => {
    expect(tag(parsePythonLiteral(c.text))).toEqual(c.value);
  });

  it.each(cases.filter((c) => !c.ok))("refuses %j", (c) => {
    expect(() => parsePythonLiteral(c.text)).toThrow(expect.objectContaining({ code: "InvalidHeader" }));
  });
});

describe("parsePythonLiteral", () => {
  it("never evaluates: names, calls and attribute access are refused by name", () => {
    expect(() => parsePythonLiteral("{'descr': __import__('os').system('rm -rf /')}")).toThrow(/"__import__" is not a literal/);
    expect(() => parsePythonLiteral("{'descr': eval('1')}")).toThrow(/"eval" is not a literal/);
  });

  it(`refuses nesting past ${MAX_LITERAL_DEPTH} without overflowing the stack`, () => {
    const ok = `${"(".repeat(MAX_LITERAL_DEPTH)}1${")".repeat(MAX_LITERAL_DEPTH)}`;
    expect(parsePythonLiteral(ok)).toEqual({ kind: "int", value: 1n });
    for (const deep of ["(".repeat(100_000), "[".repeat(100_000), `${"-".repeat(100_000)}1`, "{1:".repeat(100_000)]) {
      expect(() => parsePythonLiteral(deep)).toThrow(expect.objectContaining({ code: "InvalidHeader" }));
    }
  });

  it("drops Python 2 L suffixes only when asked, and only right after a number", () => {
    expect(() => parsePythonLiteral("(2L, 3L)")).toThrow();
    const dims = (text: string) => (parsePythonLiteral(text, { allowLongSuffix: true }) as unknown as { items: { value: bigint }[] }).items.map((d) => d.value);
    expect(dims("(2L, 3L)")).toEqual([2n, 3n]);
    expect(dims("(2 L,)")).toEqual([2n]);
    expect(dims("(0x10L,)")).toEqual([16n]);
    expect(dims("(2L L,)")).toEqual([2n]);
    expect(() => parsePythonLiteral("(2#c\nL,)", { allowLongSuffix: true })).toThrow();
    expect(() => parsePythonLiteral("(L,)", { allowLongSuffix: true })).toThrow();
    expect(() => parsePythonLiteral("(2l,)", { allowLongSuffix: true })).toThrow();
  });

  it("reads \\N{…} escapes naming ASCII characters, µ and μ, in any case and by alias, as Python does", () => {
    const str = (text: string) => parsePythonLiteral(text) as { kind: "str"; value: string };
    expect(str("'\\N{LESS-THAN SIGN}f\\N{digit four}'").value).toBe("<f4");
    expect(str("'\\N{NUL}\\N{TAB}\\N{LINE FEED}\\N{DEL}'").value).toBe("\0\t\n\x7f");
    expect(str("'\\N{GREEK SMALL LETTER MU}\\N{MICRO SIGN}'").value).toBe("\u03bc\u00b5");
    // Not escapes in bytes and raw strings.
    expect(parsePythonLiteral("b'\\N{NUL}'")).toEqual({ kind: "bytes", value: "\\N{NUL}" });
    expect(str("r'\\N{NUL}'").value).toBe("\\N{NUL}");
  });

  it.each([
    ["'\\N{NO SUCH CHARACTER}'", /not the name of an ASCII character/],
    ["'\\N{}'", /malformed/],
    ["'\\N'", /malformed/],
    ["'\\Nx'", /malformed/],
    ["'\\N{DIGIT FOUR'", /malformed/],
    ["'\\N{DIGIT  FOUR}'", /not the name/],
  ])("refuses %s as Python does", (text, message) => {
    expect(() => parsePythonLiteral(text)).toThrow(message);
  });

  it("refuses \\N{…} naming a character outside ASCII (Python reads it; no header key or dtype string holds one)", () => {
    expect(() => parsePythonLiteral("'\\N{BULLET}'")).toThrow(/not the name of an ASCII character/);
  });

  it("keeps integers of any size exactly", () => {
    expect(parsePythonLiteral("(99999999999999999999999999999999,)")).toEqual({
      kind: "tuple",
      items: [{ kind: "int", value: 99999999999999999999999999999999n }],
    });
  });
});
