/**
 * `--cast`: dtypes changed on the way through, as torch's `Tensor.to` does (the kernels are tested
 * bit by bit in core; here the command: rules, records, refusals, and whole files against torch).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { describeInterop, fixturePath, makeTempDir, pseudoRandomBytes, runCli, runPython, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const sample = fixturePath("npy", "sample_model.npz"); // F32, F16 and I64 tensors, written by numpy

function info(path: string): { metadata: Record<string, string> | null; tensors: { name: string; dtype: string; bytes: number }[] } {
  const run = runCli(["info", path, "--json"]);
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout);
}

describe("--cast", () => {
  it("casts every float with a bare target, keeps integers, and records the rules in the metadata", () => {
    const out = join(dir, "bf16.safetensors");
    expect(runCli([sample, out, "--cast", "BF16"]).status).toBe(0);
    const report = info(out);
    expect(report.metadata).toEqual({ "st_convert.cast": "BF16" });
    for (const t of report.tensors) expect(t.dtype, t.name).toBe(["position_ids", "step"].includes(t.name) ? "I64" : "BF16");
    expect(runCli([sample, join(dir, "quiet.safetensors"), "--cast", "BF16", "--no-record"]).status).toBe(0);
    expect(info(join(dir, "quiet.safetensors")).metadata).toBeNull();
  });

  it("the last applicable rule decides, matched on the names as read", () => {
    const out = join(dir, "mixed.safetensors");
    expect(runCli([sample, out, "--cast", "F32=F16", "--cast", "lm_head:F32=F32", "--rename", "^lm_head=head"]).status).toBe(0);
    const dtypes = Object.fromEntries(info(out).tensors.map((t) => [t.name, t.dtype]));
    expect(dtypes["head.weight"]).toBe("F32");
    expect(dtypes["model.embed_tokens.weight"]).toBe("F16");
  });

  it("BF16=F32 into npz gives arrays plain numpy reads (no void dtype to declare)", () => {
    const bf16 = join(dir, "bf16.safetensors");
    expect(runCli([sample, bf16, "--cast", "F32=BF16"]).status).toBe(0);
    const npz = join(dir, "plain.npz");
    const run = runCli([bf16, npz, "--cast", "BF16=F32"]);
    expect(run.status, run.stderr).toBe(0);
    // The temporary folder's random name may hold "V2" itself: only what the command says is judged.
    expect(run.stderr.replaceAll(dir, "<dir>")).not.toMatch(/V2|void/);
    expect(info(npz).tensors.filter((t) => t.dtype === "BF16")).toEqual([]);
  });

  it("refuses a malformed rule as a usage error, and an integer that does not fit as a refused input naming the element", () => {
    expect(runCli([sample, join(dir, "x.safetensors"), "--cast", "F32=INT"])).toMatchObject({
      status: 2,
      stderr: expect.stringMatching(/--cast "F32=INT": unknown dtype/),
    });
    expect(runCli([sample, join(dir, "x.safetensors"), "--cast", "F32=I32"]).status).toBe(2); // float to integer: refused
    const big = join(dir, "big.safetensors");
    writeFileSync(
      big,
      safetensorsFile(
        '{"v":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}}',
        Buffer.from([1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
      ),
    );
    const run = runCli([big, join(dir, "small.safetensors"), "--cast", "I64=I8"]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/big\.safetensors: tensor "v": cannot cast I64 to I8: element 2 is 256.*\[CastOutOfRange\]/);
  });
});

describeInterop("--cast against torch on whole files", (python) => {
  it.each([
    ["F32", "BF16"],
    ["F32", "F16"],
    ["F32", "F8_E4M3"],
    ["F16", "F32"],
  ])("%s=%s gives the bytes of safetensors.torch.save_file after Tensor.to", (from, to) => {
    const input = join(dir, "in.safetensors");
    // Random bit patterns: every class of value (NaNs with payloads, subnormals, huge values) turns up.
    const width = from === "F32" ? 4 : 2;
    const bytes = pseudoRandomBytes(7, 4096 * width);
    writeFileSync(
      input,
      safetensorsFile(`{"__metadata__":{"format":"pt"},"w":{"dtype":"${from}","shape":[64,64],"data_offsets":[0,${bytes.byteLength}]}}`, bytes),
    );
    const ours = join(dir, "ours.safetensors");
    expect(runCli([input, ours, "--cast", `${from}=${to}`, "--no-record"]).status).toBe(0);
    const theirs = join(dir, "theirs.safetensors");
    // To BF16 through torch's scalar kernel, which reference_casts.py picks (its vectorised one
    // writes 0xFFFF for a NaN; st-convert follows the scalar kernel's 0x7FC0: core README, Casts).
    runPython(python, "reference_casts.py", ["cast", input, theirs, from, to]);
    expect(readFileSync(ours).equals(readFileSync(theirs))).toBe(true);
  });
});
