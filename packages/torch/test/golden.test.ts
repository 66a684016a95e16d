/**
 * The reader against files torch itself wrote (fixtures/torch, made by fixtures/gen_torch.py):
 * every tensor torch.load returns is listed under its name, or folded into an identical view under
 * the name its alias records, with torch's dtype, shape and bytes; the values that are not tensors
 * are the ones skipped.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bytesSource, isStConvertError, readTensorBytes } from "@st-convert/core";
import { readTorch, readTorchIndex } from "@st-convert/torch";
import { errorCode, fixturePath } from "@st-convert/testing";

interface Expected {
  reference?: string;
  error?: string;
  tensors?: { name: string; dtype: string; shape: number[]; sha256: string }[];
  skipped?: string[];
  aliases?: Record<string, string>;
}

const manifest = JSON.parse(readFileSync(fixturePath("torch", "manifest.json"), "utf8")) as Record<string, Expected>;
const KNOWN = new Set([
  "F64",
  "F32",
  "F16",
  "BF16",
  "I64",
  "I32",
  "I16",
  "I8",
  "U8",
  "BOOL",
  "F8_E4M3",
  "F8_E5M2",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "F8_E8M0",
  "U16",
  "U32",
  "U64",
  "C64",
]);
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const stem = (file: string) =>
  file
    .split("/")
    .pop()!
    .replace(/\.[^.]*$/, "");
const open = (file: string) => bytesSource(readFileSync(fixturePath("torch", file)), file);

describe("files torch wrote read as torch.load reads them", () => {
  const readable = Object.entries(manifest).filter(([, e]) => e.tensors?.every((t) => KNOWN.has(t.dtype)) === true);
  it("covers every kind of fixture", () => expect(readable.length).toBeGreaterThanOrEqual(20));
  for (const [file, expected] of readable) {
    it(file, async () => {
      const warnings: string[] = [];
      const ours = await readTorch(open(file), { rootName: stem(file), onWarning: (w) => warnings.push(w) });
      const aliases = expected.aliases ?? {};
      expect({ ...ours.aliases }).toEqual(aliases);
      expect(ours.metadata).toEqual({ format: "pt", ...aliases });
      const kept = expected.tensors!.filter((t) => aliases[t.name] === undefined);
      expect(ours.tensors.map((t) => t.name)).toEqual(kept.map((t) => t.name));
      for (const [i, t] of kept.entries()) {
        const o = ours.tensors[i]!;
        expect([o.name, o.dtype, o.shape]).toEqual([t.name, t.dtype, t.shape]);
        expect(sha256(await readTensorBytes(o)), o.name).toBe(t.sha256);
      }
      // An alias names bytes identical to its kept tensor's (the same view of one storage).
      for (const [removed, keptName] of Object.entries(aliases)) {
        expect(expected.tensors!.find((t) => t.name === removed)!.sha256).toBe(expected.tensors!.find((t) => t.name === keptName)!.sha256);
      }
      expect(ours.skipped).toEqual(expected.skipped);
      expect(warnings.filter((w) => w.startsWith("skipped ")).length).toBe(Math.min(expected.skipped!.length, 20) + (expected.skipped!.length > 20 ? 1 : 0));
    });
  }

  it("reads chunk by chunk (views gathered across chunk boundaries) the same bytes", async () => {
    const file = await readTorch(open("views.pt"));
    for (const t of file.tensors) {
      const whole = await readTensorBytes(t);
      const parts: Uint8Array[] = [];
      for await (const chunk of t.chunks({ chunkSize: 2 })) parts.push(new Uint8Array(chunk));
      expect(Buffer.concat(parts).equals(Buffer.from(whole)), t.name).toBe(true);
      expect(
        parts.every((p) => p.byteLength <= 8),
        t.name,
      ).toBe(true);
    }
  });

  it("gathers a view run by run when its window is past maxGatherWindow", async () => {
    const small = await readTorch(open("views.pt"), { maxGatherWindow: 1 });
    const big = await readTorch(open("views.pt"));
    for (const [i, t] of small.tensors.entries()) expect(sha256(await readTensorBytes(t)), t.name).toBe(sha256(await readTensorBytes(big.tensors[i]!)));
  });

  it("tells which views are contiguous (streamed) and which are gathered", async () => {
    const file = await readTorch(open("views.pt"));
    const by = Object.fromEntries(file.tensors.map((t) => [t.name, t.contiguous]));
    expect(by).toMatchObject({ tied: true, slice: true, wt: false, column: false, narrow: false, expanded: false, permuted: false, element: true });
  });

  it("a training checkpoint's lone state_dict is unwrapped; with Adam state beside it, it is not", async () => {
    const sgd = await readTorch(open("training.pt"));
    expect(sgd.tensors.map((t) => t.name)).toEqual(["0.weight", "0.bias", "2.weight", "2.bias"]);
    const adam = await readTorch(open("training_adam.pt"));
    expect(adam.tensors.map((t) => t.name)).toContain("optimizer.state.0.exp_avg");
    expect(adam.tensors.map((t) => t.name)).toContain("state_dict.0.weight");
  });

  it("warns about each skipped value by name and kind, and runs nothing", async () => {
    const warnings: string[] = [];
    await readTorch(open("training.pt"), { onWarning: (w) => warnings.push(w) });
    expect(warnings).toContain('skipped "epoch": an int');
    expect(warnings).toContain('skipped "args": an object made by argparse.Namespace (not run)');
    expect(warnings).toContain('skipped "size": an object made by torch.Size (not run)');
    expect(warnings.some((w) => w.includes("also calls"))).toBe(false);
  });

  it("--key reads one entry of the checkpoint", async () => {
    const file = await readTorch(open("training_adam.pt"), { key: "optimizer.state" });
    expect(file.tensors.map((t) => t.name).slice(0, 3)).toEqual(["0.step", "0.exp_avg", "0.exp_avg_sq"]);
    await expect(readTorch(open("training_adam.pt"), { key: "nope" })).rejects.toThrow(/no such entry \(top-level keys: "state_dict", "epoch", "optimizer"\)/);
  });

  it("refuses dtypes safetensors lacks by name", async () => {
    await expect(readTorch(open("complex128.pt"))).rejects.toThrow(/tensor "z": torch.complex128 has no safetensors dtype/);
    expect(await errorCode(readTorch(open("complex32.pt")))).toBe("UnsupportedDtype");
  });

  it("names a .bin that is a safetensors file or a Git LFS pointer", async () => {
    await expect(readTorch(open("safetensors_named.bin"))).rejects.toThrow(/safetensors_named.bin: this is a safetensors file, not a PyTorch checkpoint/);
    await expect(readTorch(open("lfs_pointer.bin"))).rejects.toThrow(/lfs_pointer.bin: this is a Git LFS pointer/);
    try {
      await readTorch(open("lfs_pointer.bin"));
    } catch (error) {
      expect(isStConvertError(error) && error.code).toBe("NotACheckpoint");
    }
  });

  it("big-endian storages are swapped; a re-zipped file under another root folder reads the same", async () => {
    const be = await readTorch(open("big_endian.pt"));
    expect(be.bigEndian).toBe(true);
    const f32 = await readTensorBytes(be.tensors.find((t) => t.name === "f32")!);
    expect([...new Float32Array(f32.slice().buffer)]).toEqual([1, -2.5, 3.25]);
    const rezipped = await readTorch(open("rezipped_deflated.pt"));
    const original = await readTorch(open("views.pt"));
    for (const [i, t] of rezipped.tensors.entries()) expect(sha256(await readTensorBytes(t))).toBe(sha256(await readTensorBytes(original.tensors[i]!)));
  });
});

describe("a sharded checkpoint read through pytorch_model.bin.index.json", () => {
  it("lists the index's tensors from their shards, in weight_map order", async () => {
    const index = JSON.parse(readFileSync(fixturePath("torch", "hub_sharded", "pytorch_model.bin.index.json"), "utf8")) as {
      weight_map: Record<string, string>;
    };
    const opened: string[] = [];
    const file = await readTorchIndex(open("hub_sharded/pytorch_model.bin.index.json"), async (name) => {
      opened.push(name);
      return open(`hub_sharded/${name}`);
    });
    expect(file.tensors.map((t) => t.name)).toEqual(Object.keys(index.weight_map));
    expect(opened).toEqual(["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]);
    for (const t of file.tensors) {
      const shard = index.weight_map[t.name]!;
      const expected = manifest[`hub_sharded/${shard}`]!.tensors!.find((e) => e.name === t.name)!;
      expect(sha256(await readTensorBytes(t))).toBe(expected.sha256);
    }
    expect(file.metadata).toEqual({ format: "pt" });
  });

  it("refuses a shard name outside the folder and a tensor its shard lacks", async () => {
    const index = (weightMap: Record<string, string>) => new TextEncoder().encode(JSON.stringify({ weight_map: weightMap }));
    const shard = async (name: string) => open(`hub_sharded/${name}`);
    expect(await errorCode(readTorchIndex(index({ a: "../x.bin" }), shard))).toBe("InvalidIndex");
    expect(await errorCode(readTorchIndex(index({ a: "x.safetensors" }), shard))).toBe("InvalidIndex");
    const all = JSON.parse(readFileSync(fixturePath("torch", "hub_sharded", "pytorch_model.bin.index.json"), "utf8")).weight_map as Record<string, string>;
    expect(await errorCode(readTorchIndex(index({ ...all, ghost: "pytorch_model-00001-of-00002.bin" }), shard))).toBe("TensorNotFound");
    const { "embed.weight": _, ...missing } = all;
    expect(await errorCode(readTorchIndex(index(missing), shard))).toBe("InvalidIndex");
  });
});
