/**
 * The header parser reads entries spelled as the reference writer spells them on a path of its own
 * (one loop, for start-up time) and everything else on the general path: both must give the same
 * result, and the first must leave every refusal to the second.
 */
import { describe, expect, it } from "vitest";
import { isStConvertError, parseSafetensorsHeader } from "@st-convert/core";

const parse = (text: string, maxDepth?: number) => parseSafetensorsHeader(new TextEncoder().encode(text), { maxDepth });

/** The code and message of the refusal of `text`, or "ok". */
function verdict(text: string, maxDepth?: number): string {
  try {
    parse(text, maxDepth);
    return "ok";
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    return `${error.code}: ${error.message}`;
  }
}

/** Whitespace after every `{`, `[`, `,` and `:`: the same header, read by the general path only. */
const spaced = (text: string) => text.replace(/([{[,:])/g, "$1 ");

const entry = (dtype: string, shape: string, offsets: string) => `{"dtype":"${dtype}","shape":[${shape}],"data_offsets":[${offsets}]}`;

describe("entries spelled as the reference writer spells them", () => {
  // Plain ASCII headers are read as text, the others as bytes: both ways are checked.
  it.each([
    ["plain ASCII names", ["a", "model.layers.0.weight", "unicode", "tab-there", "quote-d"], "quote-d4"],
    ["names with escapes", ["a", "model.layers.0.weight", "unicode", "tab\\there", 'quote\\"d'], 'quote"d4'],
    ["names beyond ASCII", ["a", "model.layers.0.weight", "ünïcode", "tab-there", "quote-d"], "quote-d4"],
  ])("with %s, read to the same tensors as the same header with whitespace", (_case, names, fifth) => {
    const dtypes = ["F32", "BF16", "F8_E4M3", "I64", "BOOL", "F32", "U8"];
    const shapes = ["", "0", "4,4", "1,2,3", "999999999999999", "7", "4,4"];
    const parts: string[] = [];
    let at = 0;
    for (let i = 0; i < 40; i++) {
      const length = (i * 37) % 1000;
      parts.push(`"${names[i % names.length]}${i}":${entry(dtypes[i % dtypes.length]!, shapes[i % shapes.length]!, `${at},${at + length}`)}`);
      at += length;
    }
    const text = `{"__metadata__":{"format":"pt","k":"v"},${parts.join(",")}}`;
    const fast = parse(text);
    expect(fast).toEqual(parse(spaced(text)));
    expect(fast.tensors).toHaveLength(40);
    expect(fast.tensors[2]).toEqual({ name: `${names[2]}2`, dtype: "F8_E4M3", shape: [4n, 4n], begin: 37n, end: 111n });
    expect(fast.tensors[4]!.name).toBe(fifth);
    expect(fast.tensors[4]!.shape).toEqual([999999999999999n]);
    expect(fast.metadata).toEqual({ format: "pt", k: "v" });
  });

  it("keeps names apart from one another (slices of the header text)", () => {
    const text = `{"x":${entry("U8", "1", "0,1")},"xy":${entry("U8", "1", "1,2")},"y":${entry("U8", "2", "2,4")}}`;
    expect(parse(text).tensors.map((t) => [t.name, t.shape, t.begin, t.end])).toEqual([
      ["x", [1n], 0n, 1n],
      ["xy", [1n], 1n, 2n],
      ["y", [2n], 2n, 4n],
    ]);
  });

  it("reads numbers past 15 digits and past 2^53 exactly", () => {
    const text = `{"a":${entry("U8", "9007199254740993,0", "18446744073709551615,18446744073709551615")}}`;
    expect(parse(text).tensors[0]).toEqual({
      name: "a",
      dtype: "U8",
      shape: [9007199254740993n, 0n],
      begin: 18446744073709551615n,
      end: 18446744073709551615n,
    });
    // 16 digits in a dim beside small offsets: the writer's path must leave it to the exact one.
    expect(parse(`{"a":${entry("U8", "9007199254740993", "0,1")}}`).tensors[0]!.shape).toEqual([9007199254740993n]);
    expect(parse(`{"ü":${entry("U8", "9007199254740993", "0,1")}}`).tensors[0]!.shape).toEqual([9007199254740993n]);
  });

  it("reads fields in another order, unknown fields and the sequence form like the writer's order", () => {
    const expected = parse(`{"a":${entry("I32", "2,3", "0,24")}}`);
    expect(parse(`{"a":{"shape":[2,3],"data_offsets":[0,24],"dtype":"I32"}}`)).toEqual(expected);
    expect(parse(`{"a":{"dtype":"I32","shape":[2,3],"data_offsets":[0,24],"extra":[1,{"b":null}]}}`)).toEqual(expected);
    expect(parse(`{"a":{"dtype":"I\\u0033\\u0032","shape":[2,3],"data_offsets":[0,24]}}`)).toEqual(expected);
    expect(parse(`{"a":{"dtype":{"I32":null},"shape":[2,3],"data_offsets":[0,24]}}`)).toEqual(expected);
    expect(parse(`{"a":["I32",[2,3],[0,24]]}`)).toEqual(expected);
  });

  // Each is one byte away from the writer's spelling; the refusal is the general path's, with its position.
  it.each([
    ["leading zero in a dim", entry("F32", "04", "0,16"), /invalid number at line 1 column 31/],
    ["leading zero in an offset", entry("F32", "4", "00,16"), /invalid number/],
    ["negative dim", entry("F32", "-4", "0,16"), /invalid value: integer `-4`, expected usize/],
    ["minus zero", entry("F32", "-0", "0,16"), /invalid type: floating point `-0.0`, expected usize/],
    ["float dim", entry("F32", "4.0", "0,16"), /invalid type: floating point `4.0`, expected usize/],
    ["exponent dim", entry("F32", "4e0", "0,16"), /invalid type: floating point/],
    ["trailing comma in the shape", entry("F32", "4,", "0,16"), /trailing comma/],
    ["one offset", entry("F32", "4", "0"), /invalid length 1, expected a tuple of size 2/],
    ["three offsets", entry("F32", "4", "0,16,16"), /invalid length 3, expected 2 elements/],
    ["unknown dtype", entry("F33", "4", "0,16"), /unknown variant "F33"/],
    ["lower-case dtype", entry("f32", "4", "0,16"), /unknown variant "f32"/],
    ["duplicate dtype after the offsets", `{"dtype":"F32","shape":[4],"data_offsets":[0,16],"dtype":"F32"}`, /duplicate field `dtype`/],
    ["unclosed entry", `{"dtype":"F32","shape":[4],"data_offsets":[0,16]`, /EOF while parsing an object/],
    ["number out of range after the entry", `{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1e400}`, /number out of range/],
  ])("%s is refused as the general path refuses it", (_case, value, message) => {
    expect(verdict(`{"t":${value}}`)).toMatch(message);
    // The same after a name beyond ASCII, where the header is read as bytes (the column moves by one).
    const bytes = verdict(`{"ü":${value}}`);
    expect(bytes.replace(/column (\d+)/, (_, n) => `column ${Number(n) - 1}`)).toMatch(message);
  });

  it("keeps the depth limit: an entry at depth 3 is refused when the limit is 2", () => {
    const text = `{"t":${entry("F32", "4", "0,16")}}`;
    expect(verdict(text, 3)).toBe("ok");
    expect(verdict(text, 2)).toMatch(/recursion limit exceeded/);
    expect(verdict(`{"t":${entry("F32", "", "0,4")}}`, 2)).toMatch(/recursion limit exceeded/);
    expect(verdict(`{"ü":${entry("F32", "4", "0,16")}}`, 3)).toBe("ok");
    expect(verdict(`{"ü":${entry("F32", "4", "0,16")}}`, 2)).toMatch(/recursion limit exceeded/);
  });

  it("refuses a duplicate name whatever the spelling of its entry", () => {
    const text = `{"t":${entry("F32", "4", "0,16")},"t":${entry("F32", "4", "16,32")}}`;
    expect(verdict(text)).toMatch(/^DuplicateKey: duplicate tensor name "t"/);
  });

  it("refuses invalid UTF-8 in a name, after an entry read by the writer's path", () => {
    const bytes = new TextEncoder().encode(`{"a":${entry("U8", "1", "0,1")},"b?":${entry("U8", "1", "1,2")}}`);
    bytes[bytes.indexOf(0x3f)] = 0xff;
    expect(() => parseSafetensorsHeader(bytes)).toThrow(expect.objectContaining({ code: "InvalidHeader", message: expect.stringMatching(/invalid UTF-8/) }));
  });
});
