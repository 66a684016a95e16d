/**
 * Tied weights (a PyTorch checkpoint's names sharing one storage: GPT-2's lm_head.weight and
 * transformer.wte.weight in fixtures/torch/gpt2.bin, saved by transformers) are read as one tensor
 * with the other name in the metadata. Formats with no shared arrays say what became of them.
 */
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const gpt2 = fixturePath("torch", "gpt2.bin");

describe("tied weights in an output with no shared arrays", () => {
  it.each([
    [
      "out.npz",
      /npz has no shared arrays, so each is written once, under the kept name, and transformer\.wte\.weight is only named in the metadata \(the archive comment, which np\.load does not read\)/,
    ],
    ["out.msgpack", /flax has no shared arrays, so each is written once, under the kept name, and transformer\.wte\.weight is left out with the metadata/],
    ["out.json", /json has no shared arrays, so each is written once, under the kept name, and transformer\.wte\.weight is only named in the metadata\n/],
  ])("%s: a warning names the tied names and what was written", (name, fate) => {
    const out = join(dir, name);
    const run = runCli([gpt2, out]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toMatch(
      new RegExp(
        `st-convert: warning: ${out.replace(/\./g, "\\.")}: tied weights: transformer\\.wte\\.weight shared its storage with lm_head\\.weight; ${fate.source}`,
      ),
    );
    const report = JSON.parse(runCli([gpt2, join(dir, `again-${name}`), "--json"]).stdout) as { warnings: { message: string }[] };
    expect(report.warnings.filter((w) => w.message.startsWith("tied weights: "))).toHaveLength(1);
  });

  it("safetensors (convert.py's metadata) and torch (tied again) keep them: no such warning", () => {
    for (const name of ["out.safetensors", "out.bin"]) {
      const run = runCli([gpt2, join(dir, name)]);
      expect(run.status, run.stderr).toBe(0);
      expect(run.stderr).not.toMatch(/tied weights/);
    }
  });
});
