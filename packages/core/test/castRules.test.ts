/**
 * `--cast` rules: what parses and how, what is refused, which rule decides for a tensor, and the
 * text recorded in metadata.
 */
import { describe, expect, it } from "vitest";
import { type Dtype, castTarget, castTensors, formatCastRules, parseCastRule, tensorFromBytes } from "@st-convert/core";

describe("parseCastRule", () => {
  it.each([
    ["F32=BF16", { pattern: undefined, from: "F32", to: "BF16", text: "F32=BF16" }],
    ["bf16", { pattern: undefined, from: undefined, to: "BF16", text: "BF16" }],
    ["f64=f8_e4m3", { pattern: undefined, from: "F64", to: "F8_E4M3", text: "F64=F8_E4M3" }],
    ["I64=I32", { pattern: undefined, from: "I64", to: "I32", text: "I64=I32" }],
    ["U8=BOOL", { pattern: undefined, from: "U8", to: "BOOL", text: "U8=BOOL" }],
    ["norm:F32=F32", { from: "F32", to: "F32", text: "norm:F32=F32" }],
    // The last colon separates: the expression may hold colons and equals signs.
    ["(?:a|b)=c:F16", { from: undefined, to: "F16", text: "(?:a|b)=c:F16" }],
  ])("%s", (text, expected) => {
    const rule = parseCastRule(text);
    expect(rule).toMatchObject(expected);
    expect(parseCastRule(rule.text)).toEqual(rule);
  });

  it("compiles the name pattern with the u flag, unanchored", () => {
    const rule = parseCastRule("layers\\.\\d+\\.mlp:F32=F16");
    expect(rule.pattern?.flags).toBe("u");
    expect(rule.pattern?.test("model.layers.3.mlp.up_proj.weight")).toBe(true);
  });

  it.each([
    ["", "expected [NAME_REGEX:]FROM=TO"],
    ["=", "expected [NAME_REGEX:]FROM=TO"],
    ["F32=", "expected [NAME_REGEX:]FROM=TO"],
    ["=BF16", "expected [NAME_REGEX:]FROM=TO"],
    ["F32=BF16=F16", "expected [NAME_REGEX:]FROM=TO"],
    ["F32=BF17", 'unknown dtype "BF17"'],
    ["float32=bfloat16", 'unknown dtype "bfloat16"'],
    ["C64=F32", "does not cast C64"],
    ["F4", "does not cast F4"],
    ["F6_E2M3=F16", "does not cast F6_E2M3"],
    ["F32=I32", "does not cast between float and integer dtypes (F32 to I32)"],
    ["I8=F16", "does not cast between float and integer dtypes (I8 to F16)"],
    ["BOOL=F32", "does not cast between float and integer dtypes"],
    ["BOOL", "name the dtype to cast to BOOL from"],
    [":F32=BF16", 'the name pattern before ":" is empty'],
    ["a(:F32=BF16", "Invalid regular expression"],
  ])("refuses %j", (text, message) => {
    expect(() => parseCastRule(text)).toThrow(expect.objectContaining({ code: "InvalidOption", message: expect.stringContaining(message) }));
    expect(() => parseCastRule(text)).toThrow(`--cast ${JSON.stringify(text)}`);
  });
});

describe("castTarget", () => {
  const rules = (...texts: string[]) => texts.map(parseCastRule);

  it("a FROM=TO rule casts that dtype only", () => {
    const r = rules("F32=BF16");
    expect(castTarget(r, "w", "F32")).toBe("BF16");
    expect(castTarget(r, "w", "F64")).toBeUndefined();
    expect(castTarget(r, "w", "BF16")).toBeUndefined();
  });

  it("a rule naming only TO casts every float dtype to a float, every integer dtype but BOOL to an integer", () => {
    const toBf16 = rules("BF16");
    for (const dtype of ["F64", "F32", "F16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"] as Dtype[])
      expect(castTarget(toBf16, "w", dtype)).toBe("BF16");
    for (const dtype of ["BF16", "I64", "U8", "BOOL", "C64", "F4", "F6_E3M2"] as Dtype[]) expect(castTarget(toBf16, "w", dtype), dtype).toBeUndefined();
    const toI32 = rules("I32");
    for (const dtype of ["I64", "U64", "I8", "U16", "U32"] as Dtype[]) expect(castTarget(toI32, "w", dtype)).toBe("I32");
    for (const dtype of ["I32", "BOOL", "F32"] as Dtype[]) expect(castTarget(toI32, "w", dtype), dtype).toBeUndefined();
  });

  it("the last rule that applies decides: a later exemption keeps a tensor, an earlier one is overridden", () => {
    const exempt = rules("F32=BF16", "norm:F32=F32");
    expect(castTarget(exempt, "model.norm.weight", "F32")).toBeUndefined();
    expect(castTarget(exempt, "model.embed.weight", "F32")).toBe("BF16");
    const overridden = rules("norm:F32=F32", "F32=BF16");
    expect(castTarget(overridden, "model.norm.weight", "F32")).toBe("BF16");
    // A rule that does not apply (another dtype) does not hide an earlier one that does.
    expect(castTarget(rules("F32=F16", "F64=F32"), "w", "F32")).toBe("F16");
  });

  it("name patterns search the name, like --include", () => {
    const r = rules("^lm_head\\.:F32=F16");
    expect(castTarget(r, "lm_head.weight", "F32")).toBe("F16");
    expect(castTarget(r, "model.lm_head.weight", "F32")).toBeUndefined();
  });

  it("castTensors casts the tensors a rule picks and passes the rest through untouched", () => {
    const a = tensorFromBytes({ name: "a", dtype: "F32", shape: [1] }, new Uint8Array(4));
    const b = tensorFromBytes({ name: "b", dtype: "I64", shape: [1] }, new Uint8Array(8));
    const [ca, cb] = castTensors([a, b], rules("BF16"));
    expect(ca).toMatchObject({ name: "a", dtype: "BF16", byteLength: 2 });
    expect(cb).toBe(b);
  });
});

describe("formatCastRules", () => {
  it("gives the canonical rules in order, as the metadata value st_convert.cast", () => {
    const r = ["f32=bf16", "norm:F32=F32", "f16"].map(parseCastRule);
    expect(formatCastRules(r)).toBe("F32=BF16 norm:F32=F32 F16");
    expect(formatCastRules([parseCastRule("F32=BF16")])).toBe("F32=BF16");
  });
});
