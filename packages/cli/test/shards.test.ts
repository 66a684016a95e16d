/**
 * Sharded output (`--max-shard-size`): the split of huggingface_hub, the index and shards of
 * transformers' `save_pretrained` byte for byte, all-or-nothing writes, and replacing a set whole.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { describeInterop, fixturePath, makeTempDir, runCli, runPython, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const ELEMENT_BYTES: Record<string, number> = { F32: 4, F16: 2, U8: 1, I64: 8, BF16: 2 };

/** A safetensors file whose tensors lie in `spec`'s order (the reader's order), zeros throughout. */
function orderedSafetensors(path: string, spec: [string, string, number[]][]): void {
  let at = 0;
  const entries = spec.map(([name, dtype, shape]) => {
    const bytes = shape.reduce((n, d) => n * d, 1) * ELEMENT_BYTES[dtype]!;
    const entry = `${JSON.stringify(name)}:{"dtype":"${dtype}","shape":[${shape.join(",")}],"data_offsets":[${at},${at + bytes}]}`;
    at += bytes;
    return entry;
  });
  writeFileSync(path, safetensorsFile(`{${entries.join(",")}}`, at));
}

describe("--max-shard-size", () => {
  it("parses huggingface_hub's units (powers of 10), binary units and bytes, and refuses the rest as usage errors", () => {
    const input = join(dir, "in.safetensors");
    orderedSafetensors(input, [["a", "U8", [1000]]]);
    for (const bad of ["5XB", "-1", "GB", "0"]) expect(runCli([input, join(dir, "o", ""), "--max-shard-size", bad]).status, bad).toBe(2);
    expect(runCli([input, `${join(dir, "o")}/`, "--max-shard-size", "1KB"]).status).toBe(0);
    expect(readdirSync(join(dir, "o"))).toEqual(["model.safetensors"]); // 1000 bytes fit in 1 KB: one unsharded file
    expect(runCli([input, `${join(dir, "p")}/`, "--max-shard-size", "999"]).status).toBe(0);
    expect(readdirSync(join(dir, "p"))).toEqual(["model.safetensors"]); // larger than the limit, alone: still one file
  });

  it("refuses formats that have no sharded form, and a stream as the output", () => {
    const input = join(dir, "in.safetensors");
    orderedSafetensors(input, [["a", "U8", [10]]]);
    expect(runCli([input, join(dir, "o.npz"), "--max-shard-size", "5"])).toMatchObject({
      status: 2,
      stderr: expect.stringMatching(/applies to safetensors, torch and gguf outputs, not npz/),
    });
    expect(runCli([input, "-", "--to", "safetensors", "--max-shard-size", "5"]).status).toBe(2);
  });

  it("takes an output that is not a checkpoint's name (no extension of the format) as a folder, and a checkpoint name as the shards' stem", () => {
    const input = join(dir, "in.safetensors");
    orderedSafetensors(input, [
      ["a", "U8", [100]],
      ["b", "U8", [100]],
    ]);
    expect(runCli([input, join(dir, "resharded"), "--max-shard-size", "100"]).status).toBe(0);
    expect(readdirSync(join(dir, "resharded")).sort()).toEqual([
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
      "model.safetensors.index.json",
    ]);
    expect(runCli([input, join(dir, "named", "weights.safetensors"), "--max-shard-size", "100"]).status).toBe(0);
    expect(readdirSync(join(dir, "named")).sort()).toEqual([
      "weights-00001-of-00002.safetensors",
      "weights-00002-of-00002.safetensors",
      "weights.safetensors.index.json",
    ]);
  });

  it("needs --force over an existing set, then replaces it whole: shards the new set does not name go", () => {
    const input = join(dir, "in.safetensors");
    orderedSafetensors(input, [
      ["a", "U8", [100]],
      ["b", "U8", [100]],
      ["c", "U8", [100]],
    ]);
    const out = join(dir, "out");
    expect(runCli([input, `${out}/`, "--max-shard-size", "100"]).status).toBe(0);
    expect(readdirSync(out).sort()).toEqual([
      "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors",
      "model.safetensors.index.json",
    ]);
    writeFileSync(join(out, "config.json"), "{}");
    const before = readFileSync(join(out, "model.safetensors.index.json"));
    const refused = runCli([input, `${out}/`, "--max-shard-size", "200"]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/pass --force to replace the set \[OutputExists\]/);
    expect(readFileSync(join(out, "model.safetensors.index.json")).equals(before)).toBe(true);
    const replaced = runCli([input, `${out}/`, "--max-shard-size", "200", "--force"]);
    expect(replaced.status, replaced.stderr).toBe(0);
    expect(readdirSync(out).sort()).toEqual([
      "config.json",
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
      "model.safetensors.index.json",
    ]);
    expect(replaced.stderr).toMatch(/removed .*model-00003-of-00003\.safetensors/);
    // Back to one file: the stale index and shards go too.
    expect(runCli([input, `${out}/`, "--max-shard-size", "1MB", "--force"]).status).toBe(0);
    expect(readdirSync(out).sort()).toEqual(["config.json", "model.safetensors"]);
  });

  it("leaves nothing behind when a shard cannot be written (a full disk), and an existing set untouched", (context) => {
    const mount = join(dir, "tiny");
    mkdirSync(mount);
    if (spawnSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", mount]).status !== 0) {
      context.skip("cannot mount a tmpfs here (needs root)");
      return;
    }
    try {
      const input = join(dir, "in.safetensors");
      orderedSafetensors(input, [
        ["a", "U8", [30_000]],
        ["b", "U8", [30_000]],
        ["c", "U8", [30_000]],
      ]);
      const out = join(mount, "model");
      mkdirSync(out);
      writeFileSync(join(out, "keep.txt"), "x");
      const run = runCli([input, `${out}/`, "--max-shard-size", "30000", "--force"]);
      expect(run.status).toBe(1);
      expect(run.stderr).toMatch(/no space left on the device \[Io\]\n$/);
      expect(readdirSync(out)).toEqual(["keep.txt"]);
      const fresh = runCli([input, `${join(mount, "new")}/`, "--max-shard-size", "30000"]);
      expect(fresh.status).toBe(1);
      expect(existsSync(join(mount, "new"))).toBe(false);
    } finally {
      spawnSync("umount", [mount]);
    }
  });
});

describeInterop("sharded output against huggingface_hub and transformers", (python) => {
  it("splits as split_torch_state_dict_into_shards does, corner cases included, with transformers' index text", () => {
    const spec: [string, string, number[]][] = [
      ["small.0", "F32", [10]],
      ["big.0", "U8", [300]],
      ["small.1", "F16", [30]],
      ["small.2", "I64", [5]],
      ["big.1", "F32", [100]],
      ["é.😀", "U8", [7]],
      ['z\u007f"quote', "U8", [0]],
      ["\uffff", "BF16", [2, 3]],
    ];
    const specPath = join(dir, "spec.json");
    writeFileSync(specPath, JSON.stringify(spec));
    const input = join(dir, "in.safetensors");
    orderedSafetensors(input, spec);
    for (const max of ["100", "200", "1000"]) {
      const expected = JSON.parse(runPython(python, "reference_shards.py", ["split", specPath, max])) as {
        filename_to_tensors: Record<string, string[]>;
        is_sharded: boolean;
        index_text: string;
      };
      const out = join(dir, `out-${max}`);
      const run = runCli([input, `${out}/`, "--max-shard-size", max]);
      expect(run.status, run.stderr).toBe(0);
      const files = readdirSync(out).sort();
      expect(files).toEqual([...Object.keys(expected.filename_to_tensors), ...(expected.is_sharded ? ["model.safetensors.index.json"] : [])].sort());
      for (const [file, names] of Object.entries(expected.filename_to_tensors)) {
        const info = JSON.parse(runCli(["info", join(out, file), "--json"]).stdout) as { tensors: { name: string }[] };
        expect(info.tensors.map((t) => t.name).sort(), `${max}: ${file}`).toEqual([...names].sort());
      }
      if (expected.is_sharded) expect(readFileSync(join(out, "model.safetensors.index.json"), "utf8")).toBe(expected.index_text);
    }
  });

  it("writes PyTorch shards (pytorch_model-0000k-of-0000n.bin + pytorch_model.bin.index.json) that torch.load reads", () => {
    const out = join(dir, "torch");
    const run = runCli([fixturePath("sharded", "merged.safetensors"), `${out}/`, "--to", "torch", "--max-shard-size", "400"]);
    expect(run.status, run.stderr).toBe(0);
    const shards = readdirSync(out)
      .filter((f) => f.endsWith(".bin"))
      .sort();
    expect(shards).toEqual(["pytorch_model-00001-of-00003.bin", "pytorch_model-00002-of-00003.bin", "pytorch_model-00003-of-00003.bin"]);
    const pairs = shards.flatMap((f) => {
      const single = join(dir, `${f}.safetensors`);
      expect(runCli([join(out, f), single]).status).toBe(0);
      return [join(out, f), single];
    });
    runPython(python, "reference_torch.py", ["compare", ...pairs]);
    const merged = join(dir, "merged-again.safetensors");
    expect(runCli([join(out, "pytorch_model.bin.index.json"), merged]).status).toBe(0);
    expect(readFileSync(merged).equals(readFileSync(fixturePath("sharded", "merged.safetensors")))).toBe(true);
  });

  it("reshards a model to transformers' save_pretrained bytes (every shard and the index), and from_pretrained loads ours", () => {
    const work = join(dir, "model");
    runPython(python, "reference_shards.py", ["model", work, "20KB"]);
    const manifest = JSON.parse(readFileSync(join(work, "manifest.json"), "utf8")) as { files: Record<string, string> };
    const out = join(dir, "ours");
    const run = runCli([join(work, "state_dict.npz"), `${out}/`, "--max-shard-size", "20KB", "--metadata", "format=pt"]);
    expect(run.status, run.stderr).toBe(0);
    const weights = Object.keys(manifest.files).filter((f) => f.startsWith("model"));
    expect(weights.length).toBeGreaterThan(2);
    expect(readdirSync(out).sort()).toEqual(weights.sort());
    for (const file of weights) expect(readFileSync(join(out, file)).equals(readFileSync(join(work, "hf", file))), file).toBe(true);
    // And back to one file through the index reader.
    const merged = join(dir, "merged.safetensors");
    expect(runCli([join(out, "model.safetensors.index.json"), merged]).status).toBe(0);
    expect((JSON.parse(runCli(["info", merged, "--json"]).stdout) as { totals: { tensors: number } }).totals.tensors).toBe(21);
    copyFileSync(join(work, "hf", "config.json"), join(out, "config.json"));
    expect(runPython(python, "reference_shards.py", ["load", out, join(work, "state_dict.npz")]).trim()).toBe("ok");
  });
});
