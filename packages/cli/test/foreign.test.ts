/**
 * Files of formats st-convert does not convert (fixtures/foreign/, made by torch.jit.save and onnx,
 * or laid out by hand where the venv lacks the tool: see fixtures/gen_foreign.py) are named for
 * what they are, with exit 1, never "cannot tell the format … pass --from" (exit 2); a file whose
 * content is another format than its name (an npz renamed .safetensors) is told so.
 */
import { copyFileSync, cpSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const foreign = (name: string) => fixturePath("foreign", name);

describe("formats st-convert does not convert", () => {
  it.each([
    ["torchscript.pt", /a TorchScript archive \(torch\.jit\.save: code\/ and constants\.pkl .*\): load it with torch\.jit\.load/],
    ["model.onnx", /an ONNX model/],
    ["model.h5", /an HDF5 file \(Keras \.h5/],
    ["model.keras", /a Keras model archive \(\.keras/],
    ["model.tflite", /a TensorFlow Lite model/],
    ["ckpt.index", /the index of a TensorFlow checkpoint/],
    ["ckpt.data-00000-of-00001", /a data shard of a TensorFlow checkpoint/],
    [join("saved_model", "saved_model.pb"), /the graph of a TensorFlow SavedModel/],
  ])("%s is named for what it is, exit 1 [UnsupportedFormat], in convert and info", (name, what) => {
    const line = new RegExp(
      `^st-convert: ${foreign(name).replace(/[.]/g, "\\.")}: ${what.source}.*; st-convert does not convert it \\(it reads safetensors, npy, npz, flax, json, torch, gguf\\) \\[UnsupportedFormat\\]\\n$`,
    );
    const converted = runCli([foreign(name), join(dir, "out.safetensors")]);
    expect(converted.stderr).toMatch(line);
    expect(converted.status).toBe(1);
    const info = runCli(["info", foreign(name)]);
    expect(info.stderr).toMatch(line);
    expect(info.status).toBe(1);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("without a telling name too (content alone): ONNX, HDF5, TFLite, a TorchScript archive, a TensorFlow index", () => {
    for (const [name, what] of [
      ["model.onnx", /an ONNX model/],
      ["model.h5", /an HDF5 file/],
      ["model.tflite", /a TensorFlow Lite model/],
      ["torchscript.pt", /a TorchScript archive/],
      ["ckpt.index", /the index of a TensorFlow checkpoint/],
    ] as const) {
      const copy = join(dir, `${name.replace(/\./g, "_")}.weights`);
      copyFileSync(foreign(name), copy);
      const run = runCli(["info", copy]);
      expect(run.stderr, name).toMatch(what);
      expect(run.stderr, name).toMatch(/\[UnsupportedFormat\]\n$/);
      expect(run.status, name).toBe(1);
    }
  });

  it("a SavedModel folder given as a model folder is named, exit 1", () => {
    const run = runCli([foreign("saved_model"), join(dir, "out"), "--to", "safetensors"]);
    expect(run.stderr).toMatch(
      /saved_model: a TensorFlow SavedModel folder \(saved_model\.pb, variables\/\); st-convert does not convert it .*\[UnsupportedFormat\]\n$/,
    );
    expect(run.status).toBe(1);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a batch over a folder skips a TorchScript .pt saying why, and converts the rest", () => {
    const input = join(dir, "in");
    cpSync(fixturePath("foreign"), input, { recursive: true });
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), join(input, "mixed.safetensors"));
    const run = runCli([input, "--out-dir", join(dir, "out"), "--to", "npz"]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toMatch(
      new RegExp(
        `  skipped: ${join(input, "torchscript.pt")} -> ${join(dir, "out", "torchscript.npz")}: a TorchScript archive \\(torch\\.jit\\.save.*; st-convert does not convert it\\n`,
      ),
    );
    expect(run.stderr).toMatch(/converted 1, skipped 1, failed 0/);
    expect(run.stderr).not.toMatch(/ignored/);
    const report = JSON.parse(runCli([input, "--out-dir", join(dir, "out2"), "--to", "npz", "--json"]).stdout) as {
      files: { status: string; reason: string | null }[];
    };
    expect(report.files.find((f) => f.status === "skipped")?.reason).toMatch(/^a TorchScript archive/);
  });
});

describe("a file whose content is another format than its name says", () => {
  it("an npz renamed .safetensors is a zip archive, an npz: not 'header too large' [FormatMismatch]", () => {
    const renamed = join(dir, "weights.safetensors");
    copyFileSync(fixturePath("npy", "sample_model.npz"), renamed);
    for (const args of [
      ["info", renamed],
      [renamed, join(dir, "out.npy")],
    ]) {
      const run = runCli(args);
      expect(run.stderr).toBe(
        `st-convert: ${renamed}: the file is a zip archive, not safetensors as its name says: an npz (NumPy) archive; rename it or pass --from npz [FormatMismatch]\n`,
      );
      expect(run.status).toBe(1);
    }
    expect(runCli(["info", renamed, "--from", "npz"]).status).toBe(0);
  });

  it("a PyTorch zip checkpoint renamed .safetensors, and a zip nothing claims, name the zip formats it may be", () => {
    const torch = join(dir, "torch.safetensors");
    copyFileSync(fixturePath("torch", "gpt2.bin"), torch);
    expect(runCli(["info", torch]).stderr).toMatch(
      /the file is a zip archive, not safetensors as its name says: a PyTorch checkpoint \(torch\.save\); rename it or pass --from torch \[FormatMismatch\]\n$/,
    );
    // A zip whose first member is neither an .npy nor data.pkl: the formats a zip may be, by name.
    const other = join(dir, "other.safetensors");
    copyFileSync(foreign("archive.zip"), other);
    expect(runCli(["info", other]).stderr).toBe(
      `st-convert: ${other}: the file is a zip archive, not safetensors as its name says: perhaps an npz (NumPy) archive or a PyTorch checkpoint (torch.save); rename it or pass --from npz or --from torch [FormatMismatch]\n`,
    );
    const keras = join(dir, "keras.safetensors");
    copyFileSync(foreign("model.keras"), keras);
    expect(runCli(["info", keras]).stderr).toMatch(/a Keras model archive .*, though its name says safetensors; st-convert does not convert it/);
  });
});
