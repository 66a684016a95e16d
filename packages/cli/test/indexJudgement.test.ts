/**
 * Index files judged as huggingface_hub's loader judges them (`json.load` of the file opened as
 * UTF-8, then the weight map): the same index accepted or refused by the reference, by `info` on
 * the index, and by the model folder form. The cases are the index's bytes, written here; the
 * shard is written by safetensors (fixtures/reference_index.py).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { describeInterop, makeTempDir, runCli, runPython } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const SHARD = "model-00001-of-00001.safetensors";
const map = (v = SHARD, w = SHARD) => `"weight_map": {"v": ${JSON.stringify(v)}, "w": ${JSON.stringify(w)}}`;
const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;

/** Index bytes by case; the reference's verdict decides what st-convert must do with each. */
const CASES: Record<string, string | Uint8Array> = {
  plain: `{"metadata": {"total_size": 16}, ${map()}}`,
  bom: Uint8Array.from([0xef, 0xbb, 0xbf, ...new TextEncoder().encode(`{${map()}}`)]),
  nan: `{"metadata": {"total_size": NaN, "a": Infinity, "b": -Infinity}, ${map()}}`,
  "metadata-list": `{"metadata": [1, 2], ${map()}}`,
  "metadata-string": `{"metadata": "hub", ${map()}}`,
  "dot-slash": `{${map(SHARD, `./${SHARD}`)}}`,
  "nested-900": `{"metadata": {"x": ${nested(900)}}, ${map()}}`,
  "nested-5000": `{"metadata": {"x": ${nested(5000)}}, ${map()}}`,
  "trailing-comma": `{${map()},}`,
  "single-quotes": `{'weight_map': {}}`,
};

describeInterop("an index file, judged as huggingface_hub's loader judges it", (python) => {
  it("is accepted or refused by info and by the folder form exactly when the reference accepts or refuses it", () => {
    const root = join(dir, "cases");
    for (const [name, bytes] of Object.entries(CASES)) {
      mkdirSync(join(root, name), { recursive: true });
      writeFileSync(join(root, name, "model.safetensors.index.json"), bytes);
    }
    const verdicts = JSON.parse(runPython(python, "reference_index.py", ["judge", root])) as Record<string, string>;
    // The cases mean something only if the reference splits them as expected.
    expect(verdicts).toEqual({
      plain: "ok",
      bom: "JSONDecodeError",
      nan: "ok",
      "metadata-list": "ok",
      "metadata-string": "ok",
      "dot-slash": "ok",
      "nested-900": "ok",
      "nested-5000": "RecursionError",
      "trailing-comma": "JSONDecodeError",
      "single-quotes": "JSONDecodeError",
    });
    for (const [name, verdict] of Object.entries(verdicts)) {
      const folder = join(root, name);
      const listed = runCli(["info", join(folder, "model.safetensors.index.json"), "--json"]);
      const converted = runCli([folder, join(dir, "out", name), "--to", "torch", "-q"]);
      for (const run of [listed, converted]) {
        expect(run.status, `${name}: ${run.stderr}`).toBe(verdict === "ok" ? 0 : 1);
        if (verdict !== "ok") {
          // One line, with a code; never a crash.
          expect(run.stderr.trimEnd().split("\n"), name).toHaveLength(1);
          expect(run.stderr, name).toMatch(verdict === "RecursionError" ? /\[LimitExceeded\]/ : /\[InvalidIndex\]/);
        }
      }
      if (verdict === "ok") {
        const report = JSON.parse(listed.stdout) as { tensors: { name: string }[] };
        expect(report.tensors.map((t) => t.name)).toEqual(["v", "w"]);
      }
    }
  });
});
