/**
 * Interop with Python: our JSON, read the way the README tells a Python user to (`json.load`, the
 * three strings to floats, `np.array(data, dtype).reshape(shape)`, ml_dtypes for bf16/fp8) and
 * saved by the reference safetensors writer, is byte-identical to our own safetensors of the same
 * tensors: numpy reproduces every value bit for bit. And a hand-written JSON converts as documented.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { DTYPES, type Dtype, type TensorEntry, createMetadata, readSafetensors, serializeSafetensors, tensorByteLength } from "@st-convert/core";
import { readTensorJson } from "@st-convert/json";
import { describeInterop, fixturePath, makeTempDir, runPython } from "@st-convert/testing";
import { allPatterns, bytesFor, tensor, toJson } from "./helpers.js";

/** NaNs made canonical (what numpy makes of float("nan")), so that values can carry every element. */
function canonicalNaNs(dtype: Dtype, bytes: Uint8Array): Uint8Array {
  const out = bytes.slice();
  const view = new DataView(out.buffer);
  if (dtype === "F32" || dtype === "C64") {
    for (let i = 0; i < out.length; i += 4) if ((view.getUint32(i, true) & 0x7fffffff) > 0x7f800000) view.setUint32(i, 0x7fc00000, true);
  } else if (dtype === "F64") {
    for (let i = 0; i < out.length; i += 8) {
      const hi = view.getUint32(i + 4, true) & 0x7fffffff;
      if (hi > 0x7ff00000 || (hi === 0x7ff00000 && view.getUint32(i, true) !== 0)) view.setBigUint64(i, 0x7ff8000000000000n, true);
    }
  } else if (dtype === "F16" || dtype === "BF16") {
    const [exp, nan] = dtype === "F16" ? [0x7c00, 0x7e00] : [0x7f80, 0x7fc0];
    for (let i = 0; i < out.length; i += 2) {
      const v = view.getUint16(i, true);
      if ((v & 0x7fff) > exp) view.setUint16(i, nan, true);
    }
  } else if (dtype === "F8_E5M2") {
    for (let i = 0; i < out.length; i++) if ((out[i]! & 0x7f) > 0x7c) out[i] = 0x7e;
  } else if (dtype === "F8_E4M3") {
    for (let i = 0; i < out.length; i++) if (out[i] === 0xff) out[i] = 0x7f;
  } else if (dtype === "BOOL") {
    for (let i = 0; i < out.length; i++) out[i]! &= 1;
  }
  return out;
}

describeInterop("json interop with Python's json, numpy and ml_dtypes", (python) => {
  const { dir, cleanup } = makeTempDir();
  afterAll(cleanup);

  /** Our JSON → Python (README rules) → reference safetensors, against our own safetensors of the same tensors. */
  async function throughPython(tensors: TensorEntry[], base64: boolean, tag: string) {
    const source = { metadata: createMetadata([["format", "pt"]]), tensors };
    const { json } = await toJson(source, { base64 });
    const jsonPath = join(dir, `${tag}.json`);
    const outPath = join(dir, `${tag}.safetensors`);
    writeFileSync(jsonPath, json);
    runPython(python, "reference_json.py", ["load", jsonPath, outPath]);
    return { theirs: readFileSync(outPath), ours: Buffer.from(await serializeSafetensors(source)), json };
  }

  // Every numpy dtype (F4 and F6 have none; F4 goes through base64 below).
  const numpyDtypes = DTYPES.filter((d) => d.numpyName !== undefined).map((d) => d.code);

  it("values: numpy reproduces every value bit for bit, every numpy dtype, every 8/16-bit pattern", async () => {
    const tensors = numpyDtypes.map((dtype, i) => {
      const bits = DTYPES.find((d) => d.code === dtype)!.bits;
      let bytes: Uint8Array;
      if ((bits <= 16 && dtype.startsWith("F")) || dtype === "BF16") bytes = allPatterns(dtype);
      else bytes = bytesFor(1000 + i, tensorByteLength(dtype, [4096]));
      bytes = canonicalNaNs(dtype, bytes);
      const count = bytes.length / tensorByteLength(dtype, [1]);
      return tensor(`t.${dtype.toLowerCase()}`, dtype, [count / 4, 4], bytes);
    });
    const { theirs, ours } = await throughPython(tensors, false, "values");
    const file = await readTensorJson(readFileSync(join(dir, "values.json")));
    expect(file.tensors.every((t) => t.encoding === "values")).toBe(true);
    expect(theirs.equals(ours)).toBe(true);
  });

  it("values: 0-d, empty and extreme tensors", async () => {
    const tensors = [
      tensor("scalar", "F64", [], new Uint8Array(new Float64Array([-0]).buffer)),
      tensor("empty", "F32", [3, 0], new Uint8Array(0)),
      tensor("u64", "U64", [2], new Uint8Array(new BigUint64Array([2n ** 64n - 1n, 2n ** 53n + 1n]).buffer)),
      tensor("i64", "I64", [2], new Uint8Array(new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n]).buffer)),
      tensor("f32", "F32", [4], new Uint8Array(new Uint32Array([0x7f7fffff, 0x00000001, 0x80800000, 0x4b800001]).buffer)),
    ];
    const { theirs, ours } = await throughPython(tensors, false, "edges");
    expect(theirs.equals(ours)).toBe(true);
  });

  it("base64: every dtype the reference writes, NaN payloads included, bit for bit", async () => {
    const tensors = DTYPES.filter((d) => !d.code.startsWith("F6_")).map((d, i) => {
      const shape = d.bits === 4 ? [3, 4] : [5, 3];
      const raw = bytesFor(2000 + i, tensorByteLength(d.code, shape));
      return tensor(`b${i}`, d.code, shape, d.code === "BOOL" ? raw.map((b) => b & 1) : raw);
    });
    const { theirs, ours } = await throughPython(tensors, true, "base64");
    expect(theirs.equals(ours)).toBe(true);
  });

  it("a JSON written by hand per the README converts as documented", async () => {
    const converted = join(dir, "handwritten.safetensors");
    writeFileSync(converted, await serializeSafetensors(await readTensorJson(readFileSync(fixturePath("json", "handwritten.json")))));
    const lines = runPython(python, "reference_safetensors.py", ["read", converted, fixturePath("json", "handwritten.safetensors")])
      .trim()
      .split("\n");
    const [ours, reference] = lines.map((line) => JSON.parse(line) as { ok: boolean; tensors: unknown[] });
    expect(ours!.ok).toBe(true);
    expect(ours).toEqual(reference);
    expect((await readSafetensors(readFileSync(converted))).tensors.length).toBe(13);
  });
});
