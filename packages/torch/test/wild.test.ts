/**
 * Checkpoints as found in the wild and hostile ones (fixtures/wild, made by fixtures/gen_wild.py
 * with torch itself): what torch.load(weights_only=True) reads is read the same way, and what
 * would run code or cost a machine is refused by name.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bytesSource, readTensorBytes } from "@st-convert/core";
import { readTorch } from "@st-convert/torch";
import { errorCode, fixturePath } from "@st-convert/testing";

interface Expected {
  tensors?: { name: string; dtype: string; shape: number[]; sha256: string }[];
  skipped?: string[];
  names?: number;
}

const manifest = JSON.parse(readFileSync(fixturePath("wild", "manifest.json"), "utf8")) as Record<string, Expected>;
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const open = (file: string) => bytesSource(readFileSync(fixturePath("wild", file)), file);

async function expectAsTorchReads(file: string, options: Parameters<typeof readTorch>[1] = {}): Promise<void> {
  const expected = manifest[file]!;
  const ours = await readTorch(open(file), options);
  expect(ours.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(expected.tensors!.map((t) => [t.name, t.dtype, t.shape]));
  for (const [i, t] of ours.tensors.entries()) expect(sha256(await readTensorBytes(t)), t.name).toBe(expected.tensors![i]!.sha256);
}

describe("state dicts pickled as Python 2 pickled an OrderedDict", () => {
  it("REDUCE(collections.OrderedDict, ([[key, value], …],)) reads as torch reads it, zip and legacy", async () => {
    await expectAsTorchReads("py2_ordered_dict.pt");
    await expectAsTorchReads("py2_ordered_dict_legacy.pt");
  });
});

describe("legacy files spelled as torch's loader tolerates", () => {
  it("little_endian False, protocol 1001.0 and a storage count of True read as torch reads them (records little-endian)", async () => {
    await expectAsTorchReads("legacy_tolerated.pt");
    expect((await readTorch(open("legacy_tolerated.pt"))).bigEndian).toBe(false);
  });
});

describe("checks", () => {
  it("the fixtures are there", async () => {
    expect(await errorCode(readTorch(open("py2_ordered_dict.pt")))).toBe("ok");
  });
});

describe("a training checkpoint with tensors beside its state_dict (a Lightning .ckpt)", () => {
  it("says once that --key state_dict gives just the model, and not when --key is given or the state dict is alone", async () => {
    const training = (file: string) => bytesSource(readFileSync(fixturePath("torch", file)), file);
    const hint = (w: string) => w.includes("--key state_dict");
    const warnings: string[] = [];
    const all = await readTorch(training("training_adam.pt"), { onWarning: (w) => warnings.push(w) });
    expect(all.tensors.map((t) => t.name)).toContain("optimizer.state.0.exp_avg");
    expect(warnings.filter(hint)).toEqual([
      'the checkpoint has a top-level "state_dict" beside other entries holding tensors: all are converted; --key state_dict gives just the model',
    ]);
    const keyed: string[] = [];
    await readTorch(training("training_adam.pt"), { key: "state_dict", onWarning: (w) => keyed.push(w) });
    const alone: string[] = [];
    await readTorch(training("training.pt"), { onWarning: (w) => alone.push(w) });
    expect([...keyed, ...alone].filter(hint)).toEqual([]);
  });
});

describe("the caller's selection applies before a tensor is judged", () => {
  const others = ["z", "q", "s", "n"];
  it("complex128, qint8, sparse and nested tensors each refuse the file by name when kept", async () => {
    for (const kept of others) {
      const include = (name: string) => name === kept || !others.includes(name);
      await expect(readTorch(open("unconvertible.pt"), { include }), kept).rejects.toThrow(new RegExp(`tensor "${kept}"`));
    }
  });
  it("left out by the selection, they are not judged: the rest reads as torch reads it", async () => {
    await expectAsTorchReads("unconvertible.pt", { include: (name) => !others.includes(name) });
  });
});

describe("pickles that name callables which run code when Python unpickles them", () => {
  const cases: [string, string][] = [
    ["dangerous_system", "posix.system"],
    ["dangerous_eval", "builtins.eval"],
    ["dangerous_exec", "builtins.exec"],
    ["dangerous_popen", "commands.Popen"],
    ["dangerous_getattr", "builtins.getattr"],
    ["dangerous_beside", "posix.system"],
  ];
  for (const [stem, symbol] of cases) {
    it(`${stem}: refused naming ${symbol}, zip and legacy`, async () => {
      for (const file of [`${stem}.pt`, `${stem}_legacy.pt`]) {
        expect(await errorCode(readTorch(open(file))), file).toBe("DangerousGlobal");
        await expect(readTorch(open(file)), file).rejects.toThrow(new RegExp(`${file}: the pickle names ${symbol.replace(".", "\\.")}, which runs code`));
      }
    });
  }
  it("protocol 4 names subprocess.Popen as it is (STACK_GLOBAL)", async () => {
    await expect(readTorch(open("dangerous_popen_p4.pt"))).rejects.toThrow(/names subprocess\.Popen/);
  });
  it("harmless objects of a training checkpoint are listed, not refused; a state dict names none", async () => {
    const training = await readTorch(bytesSource(readFileSync(fixturePath("torch", "training.pt")), "training.pt"));
    expect(training.globals).toContain("argparse.Namespace");
    expect(training.globals.some((g) => /^numpy\.(_core|core)\.multiarray\.scalar$/.test(g))).toBe(true);
    expect(training.globals.some((g) => g.startsWith("torch."))).toBe(false);
    const views = await readTorch(bytesSource(readFileSync(fixturePath("torch", "views.pt")), "views.pt"));
    expect(views.globals).toEqual([]);
  });
});

describe("a pickle that refers to one list many times (torch.save of [[[t] * n] * n] * n)", () => {
  it("torch.load makes a million names of the 2 KB file; st-convert refuses it by the naming budget, at 100 and 170", async () => {
    expect(manifest["shared_list_100.pt"]!.names).toBe(1_000_000);
    for (const file of ["shared_list_100.pt", "shared_list_170.pt"]) {
      expect(readFileSync(fixturePath("wild", file)).byteLength).toBeLessThan(4096);
      expect(await errorCode(readTorch(open(file))), file).toBe("LimitExceeded");
      await expect(readTorch(open(file)), file).rejects.toThrow(
        /naming the tensors visits more than \d+ values \(10000 \+ 8 per byte of the \d+-byte pickle\)/,
      );
    }
  });
  it("a real state dict stays far inside the budget: GPT-2's, its tied weight included", async () => {
    const gpt2 = await readTorch(bytesSource(readFileSync(fixturePath("torch", "gpt2.bin")), "gpt2.bin"), { maxVisitsPerPickleByte: 1 });
    expect(gpt2.tensors.length).toBeGreaterThan(20);
  });
});

describe("a legacy file's storage counts are little-endian whatever sys_info says", () => {
  it("a count written big-endian (as a reader trusting little_endian False would read it) is refused", async () => {
    const bytes = new Uint8Array(readFileSync(fixturePath("wild", "legacy_tolerated.pt")));
    // The records, in the key list's order (torch's keys follow memory addresses): "w"'s (a count
    // of 4, then 16 bytes) and "one"'s (a count of 1, then 4 bytes), one way round or the other.
    const count = (at: number) => new DataView(bytes.buffer, bytes.byteOffset + at, 8);
    const at = count(bytes.byteLength - 24).getBigUint64(0, true) === 4n ? bytes.byteLength - 24 : bytes.byteLength - 36;
    const view = count(at);
    expect(view.getBigUint64(0, true)).toBe(4n);
    view.setBigUint64(0, 4n, false);
    await expect(readTorch(bytesSource(bytes, "swapped.pt"))).rejects.toThrow(
      /storage "\d+" is declared with 4 elements, but its record holds 288230376151711744/,
    );
  });
});

describe("a checkpoint shaped as PyTorch Lightning saves one", () => {
  it("converts as torch.load reads it, skips its harmless objects with warnings, lists their symbols, and gives the --key hint once", async () => {
    const warnings: string[] = [];
    await expectAsTorchReads("lightning_like.ckpt", { onWarning: (w) => warnings.push(w), maxWarnings: 100 });
    const file = await readTorch(open("lightning_like.ckpt"));
    expect(file.skipped).toEqual(manifest["lightning_like.ckpt"]!.skipped);
    expect(file.globals).toEqual(expect.arrayContaining(["pathlib.PurePosixPath", "functools.partial", "argparse.Namespace", "torch.optim.adam.Adam"]));
    expect(warnings.filter((w) => w.includes("--key state_dict"))).toHaveLength(1);
    expect(warnings).toContain('skipped "hyper_parameters.args": an object made by argparse.Namespace (not run)');
  });
});

describe("values left out by the selection", () => {
  it("are not reported: no warning names a call inside them", async () => {
    const warnings: string[] = [];
    await readTorch(open("unconvertible.pt"), { include: (name) => !["z", "q", "s", "n"].includes(name), onWarning: (w) => warnings.push(w) });
    expect(warnings).toEqual([]);
  });
});
