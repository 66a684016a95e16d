import { describe, expect, it } from "vitest";
import { DTYPES, dtypeInfo, isDtype, tensorByteLength } from "@st-convert/core";

describe("dtype table", () => {
  it("has the 22 safetensors dtypes with their bit sizes", () => {
    expect(Object.fromEntries(DTYPES.map((d) => [d.code, d.bits]))).toEqual({
      BOOL: 8,
      F4: 4,
      F6_E2M3: 6,
      F6_E3M2: 6,
      U8: 8,
      I8: 8,
      F8_E5M2: 8,
      F8_E4M3: 8,
      F8_E8M0: 8,
      F8_E4M3FNUZ: 8,
      F8_E5M2FNUZ: 8,
      I16: 16,
      U16: 16,
      F16: 16,
      BF16: 16,
      I32: 32,
      U32: 32,
      F32: 32,
      C64: 64,
      F64: 64,
      I64: 64,
      U64: 64,
    });
  });

  it("ranks dtypes so that descending rank is the reference writer's observed order", () => {
    const observed = "U64 I64 F64 C64 F32 U32 I32 BF16 F16 U16 I16 F8_E5M2FNUZ F8_E4M3FNUZ F8_E8M0 F8_E4M3 F8_E5M2 I8 U8 F6_E3M2 F6_E2M3 F4 BOOL";
    expect(
      [...DTYPES]
        .sort((a, b) => b.rank - a.rank)
        .map((d) => d.code)
        .join(" "),
    ).toBe(observed);
  });

  it("matches dtype codes case-sensitively, like the reference", () => {
    expect(isDtype("F32")).toBe(true);
    expect(isDtype("f32")).toBe(false);
    expect(() => dtypeInfo("F128")).toThrow(expect.objectContaining({ code: "UnknownDtype" }));
  });

  it("sizes sub-byte tensors in bits and refuses those that do not end on a byte boundary", () => {
    expect(tensorByteLength("F4", [1, 2])).toBe(1);
    expect(tensorByteLength("F6_E2M3", [4])).toBe(3);
    expect(() => tensorByteLength("F4", [3])).toThrow(expect.objectContaining({ code: "MisalignedSlice" }));
    expect(() => tensorByteLength("F6_E3M2", [2])).toThrow(expect.objectContaining({ code: "MisalignedSlice" }));
    expect(tensorByteLength("C64", [])).toBe(8);
    expect(tensorByteLength("F32", [0, 7])).toBe(0);
  });
});

describe("numpy names", () => {
  it("maps every byte-compatible dtype to the name numpy and ml_dtypes give it, and back", async () => {
    const { dtypeFromNumpyName } = await import("@st-convert/core");
    const names = Object.fromEntries(DTYPES.filter((d) => d.numpyName !== undefined).map((d) => [d.code, d.numpyName]));
    // The names the reference's TensorSpec table uses (lib.rs), see fixtures/gen_safetensors.py.
    expect(names).toEqual({
      BOOL: "bool",
      U8: "uint8",
      I8: "int8",
      F8_E5M2: "float8_e5m2",
      F8_E4M3: "float8_e4m3fn",
      F8_E8M0: "float8_e8m0fnu",
      F8_E4M3FNUZ: "float8_e4m3fnuz",
      F8_E5M2FNUZ: "float8_e5m2fnuz",
      I16: "int16",
      U16: "uint16",
      F16: "float16",
      BF16: "bfloat16",
      I32: "int32",
      U32: "uint32",
      F32: "float32",
      C64: "complex64",
      F64: "float64",
      I64: "int64",
      U64: "uint64",
    });
    for (const [code, name] of Object.entries(names)) expect(dtypeFromNumpyName(name!)?.code).toBe(code);
    expect(dtypeFromNumpyName("complex128")).toBeUndefined();
  });
});
