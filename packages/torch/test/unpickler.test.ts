/**
 * The unpickler against CPython's pickler: plain values pickled with every protocol, 0 to 5
 * (fixtures/torch/pickles.json, made by gen_torch.py), decode to the values Python pickled.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type PickleValue, unpickle } from "@st-convert/torch";
import { fixturePath, fromHex } from "@st-convert/testing";

const cases = JSON.parse(readFileSync(fixturePath("torch", "pickles.json"), "utf8")) as { protocol: number; hex: string; value: unknown }[];

/** Our value in the JSON form gen_torch.py's `plain` gives Python's. */
function plain(value: PickleValue): unknown {
  if (value === null || typeof value === "boolean" || typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint") return { int: String(value) };
  switch (value.kind) {
    case "float":
      return { float: value.value === Number.POSITIVE_INFINITY ? "inf" : reprFloat(value.value) };
    case "bytes":
      return { bytes: Buffer.from(value.bytes).toString("hex") };
    case "tuple":
      return { tuple: value.items.map(plain) };
    case "list":
      return { list: value.items.map(plain) };
    case "dict":
      return { dict: [...value.entries.values()].map((e) => [plain(e.key), plain(e.value)]) };
    default:
      return { other: value.kind };
  }
}

/** Python's float repr for the values in the fixture. */
function reprFloat(x: number): string {
  if (Number.isInteger(x) && Math.abs(x) < 1e16) return `${x}.0`;
  return String(x).replace("e+", "e+");
}

describe("CPython's pickles decode to the values it pickled", () => {
  it("has every protocol", () => expect(cases.map((c) => c.protocol)).toEqual([0, 1, 2, 3, 4, 5]));
  for (const c of cases) {
    it(`protocol ${c.protocol}`, () => {
      const bytes = fromHex(c.hex);
      const { value, end } = unpickle(bytes, { persistentLoad: () => null });
      expect(end).toBe(bytes.byteLength);
      expect(plain(value)).toEqual(c.value);
    });
  }

  it("memoized values are shared, not copied", () => {
    const { value } = unpickle(fromHex(cases[2]!.hex), { persistentLoad: () => null });
    if (value === null || typeof value !== "object" || value.kind !== "dict") throw new Error("not a dict");
    const shared = value.entries.get("sshared")!.value as { kind: "list"; items: PickleValue[] };
    expect(shared.items[0]).toBe(shared.items[1]);
  });

  it("a 200,000-deep TUPLE1 nest stops at the nesting limit inside the unpickler", () => {
    const bytes = Uint8Array.from([0x80, 2, 0x29, ...new Array(200_000).fill(0x85), 0x2e]);
    expect(() => unpickle(bytes, { persistentLoad: () => null })).toThrow(/nest deeper than 1000 levels/);
    expect(() => unpickle(bytes.subarray(0, 500).slice(), { persistentLoad: () => null }, { partial: true })).toThrow(/goes on past/);
  });
});
