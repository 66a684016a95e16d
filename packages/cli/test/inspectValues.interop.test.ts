/**
 * `hash`, `stats` and `diff` against the reference computations (fixtures/reference_inspect.py):
 * hashlib over torch's tensors, numpy's nan-functions in float64 (ml_dtypes for bf16 and f8),
 * torch.testing.assert_close. The inputs are written by torch, safetensors and numpy in the test.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, expect, it } from "vitest";
import { describeInterop, makeTempDir, runCli, runPython } from "@st-convert/testing";

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);

let made = false;
/** The reference files, made once for both blocks (torch takes seconds to start). */
function makeFiles(python: string): void {
  if (!made) runPython(python, "reference_inspect.py", ["make", dir]);
  made = true;
}

interface HashReport {
  digest: string;
  tensors: { name: string; dtype: string; shape: number[]; sha256: string }[];
}

function cliJson<T>(args: readonly string[], status = 0): T {
  const run = runCli([...args, "--json"]);
  expect(run.status, run.stderr).toBe(status);
  return JSON.parse(run.stdout) as T;
}

/** The README's Python lines that recompute the checkpoint digest, from the block after the marker. */
function readmeDigestSnippet(): string {
  const readme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
  const block = /recompute the checkpoint digest[\s\S]*?```python\n([\s\S]*?)```/.exec(readme)?.[1];
  if (block === undefined) throw new Error("README.md has no Python block recomputing the checkpoint digest");
  return block;
}

describeInterop("hash, stats and diff against hashlib, numpy and torch", (python) => {
  beforeAll(() => {
    makeFiles(python);
  });

  it("hash: each tensor's SHA-256 is hashlib's over torch's bytes, in safetensors, torch and npz files", () => {
    for (const file of ["model.safetensors", "model.pt", "model.npz"]) {
      const path = join(dir, file);
      const theirs = JSON.parse(runPython(python, "reference_inspect.py", ["hash", path])) as Record<string, string>;
      const ours = cliJson<HashReport>(["hash", path]);
      expect(Object.fromEntries(ours.tensors.map((t) => [t.name, t.sha256])), file).toEqual(theirs);
    }
  });

  it("hash: the checkpoint digest is the same in safetensors and torch files, and the README's Python recomputes it", () => {
    const safetensors = cliJson<HashReport>(["hash", join(dir, "model.safetensors")]);
    const torch = cliJson<HashReport>(["hash", join(dir, "model.pt")]);
    expect(torch.digest).toBe(safetensors.digest);
    const run = spawnSync(python, ["-c", readmeDigestSnippet()], { cwd: dir, encoding: "utf8" });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout.trim()).toBe(safetensors.digest);
    // The same tensors converted to npz (numpy's dtypes only) hash alike too.
    const npz = join(dir, "subset.npz");
    const filter = ["--filter", "^(big|special|allnan|empty|scalar|transposed|bool|u8|i8|i16|i32|i64)"];
    expect(runCli([join(dir, "model.safetensors"), npz, ...filter]).status).toBe(0);
    expect(cliJson<HashReport>(["hash", npz]).digest).toBe(cliJson<HashReport>(["hash", join(dir, "model.safetensors"), ...filter]).digest);
  });

  it("stats: min, max, mean, std and the counts equal numpy's nan-functions in float64 (mean and std within 1e-9)", () => {
    const path = join(dir, "model.safetensors");
    type Row = Record<string, unknown> & { name: string };
    const theirs = JSON.parse(runPython(python, "reference_inspect.py", ["stats", path])) as Row[];
    const ours = cliJson<{ tensors: Row[] }>(["stats", path]).tensors;
    expect(ours.map((t) => t.name)).toEqual(theirs.map((t) => t.name));
    for (const [i, want] of theirs.entries()) {
      const got = ours[i]!;
      for (const key of ["dtype", "shape", "min", "max", "nan", "posinf", "neginf", "zeros"]) expect(got[key], `${want.name}.${key}`).toEqual(want[key]);
      for (const key of ["mean", "std"]) {
        const [a, b] = [got[key], want[key]];
        if (typeof a === "number" && typeof b === "number")
          expect(Math.abs(a - b), `${want.name}.${key}: ${a} vs ${b}`).toBeLessThanOrEqual(1e-9 * Math.abs(b) + 1e-300);
        else expect(a, `${want.name}.${key}`).toEqual(b);
      }
    }
  });

  it("stats: the same numbers from the torch file and, for numpy's dtypes, from the npz", () => {
    const safetensors = cliJson<{ tensors: { name: string }[] }>(["stats", join(dir, "model.safetensors")]).tensors;
    const byName = new Map(safetensors.map((t) => [t.name, t]));
    for (const file of ["model.pt", "model.npz"]) {
      for (const t of cliJson<{ tensors: { name: string }[] }>(["stats", join(dir, file)]).tensors) expect(t, `${file}: ${t.name}`).toEqual(byName.get(t.name));
    }
  });

  it("stats --filter picks tensors", () => {
    const { tensors } = cliJson<{ tensors: { name: string }[] }>(["stats", join(dir, "model.pt"), "--filter", "^f8_"]);
    expect(tensors.map((t) => t.name).sort()).toEqual(["f8_e4m3", "f8_e4m3fnuz", "f8_e5m2", "f8_e5m2.special", "f8_e5m2fnuz", "f8_e8m0"]);
  });
});

describeInterop("diff against torch.testing.assert_close", (python) => {
  interface DiffReport {
    same: boolean;
    tensors: { name: string; status: string; differing: number | null }[];
  }
  beforeAll(() => {
    makeFiles(python);
    runPython(python, "reference_inspect.py", ["perturb", join(dir, "model.safetensors"), join(dir, "perturbed.safetensors")]);
    expect(runCli([join(dir, "model.safetensors"), join(dir, "bf16.safetensors"), "--cast", "BF16", "--force"]).status).toBe(0);
  });

  const cases: [string, string, number, number][] = [
    ["model.safetensors", "perturbed.safetensors", 0, 0],
    ["model.pt", "perturbed.safetensors", 1e-5, 1.3e-6],
    ["model.safetensors", "perturbed.safetensors", 0.02, 0.001],
    ["perturbed.safetensors", "model.npz", 0.3, 0],
    ["model.safetensors", "perturbed.safetensors", 0, 1e-4],
    ["model.safetensors", "bf16.safetensors", 1e-5, 1.3e-6],
    ["model.pt", "bf16.safetensors", 0.05, 0.01],
  ];

  it("with tolerances, the verdict of each tensor is assert_close's (exact and cast files, across formats)", () => {
    const verdicts = JSON.parse(
      runPython(python, "reference_inspect.py", ["close", JSON.stringify(cases.map(([a, b, atol, rtol]) => [join(dir, a), join(dir, b), atol, rtol]))]),
    ) as Record<string, boolean>[];
    for (const [i, [a, b, atol, rtol]] of cases.entries()) {
      const theirs = verdicts[i]!;
      const run = runCli(["diff", join(dir, a), join(dir, b), "--atol", String(atol), "--rtol", String(rtol), "--json"]);
      const report = JSON.parse(run.stdout) as DiffReport;
      const ours = Object.fromEntries(report.tensors.filter((t) => t.name in theirs).map((t) => [t.name, t.status === "same"]));
      expect(ours, `${a} ${b} ${atol} ${rtol}`).toEqual(theirs);
      expect(Object.values(theirs)).toContain(true);
      expect(run.status).toBe(report.same ? 0 : 1);
    }
  });

  it("exactly, the same tensors in torch and safetensors files are the same, and a nudged element is found", () => {
    expect(runCli(["diff", join(dir, "model.pt"), join(dir, "model.safetensors")]).status).toBe(0);
    const run = runCli(["diff", join(dir, "model.safetensors"), join(dir, "perturbed.safetensors"), "--json"]);
    expect(run.status).toBe(1);
    const big = (JSON.parse(run.stdout) as { tensors: Record<string, unknown>[] }).tensors.find((t) => t.name === "big.f32");
    expect(big).toMatchObject({ status: "values", differing: 2, firstIndex: [12345] });
  });
});
