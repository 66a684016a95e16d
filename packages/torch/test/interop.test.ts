/**
 * Interop with the real torch (2.13, CPU) and safetensors: every tensor torch.load gives for a
 * fixture is in our safetensors output byte for byte (under its name, or the kept name its alias
 * names), and our .pt files load with torch.load(weights_only=True) and with mmap=True, giving
 * the same tensors (tied names sharing one storage).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { MemorySink, serializeSafetensors } from "@st-convert/core";
import { readTorch, writeTorch } from "@st-convert/torch";
import { describeInterop, fixturePath, makeTempDir, runPython } from "@st-convert/testing";

interface Expected {
  tensors?: { name: string; dtype: string; shape: number[]; sha256: string }[];
  aliases?: Record<string, string>;
}
interface Loaded {
  error?: string;
  message?: string;
  type?: string;
  tensors?: { name: string; dtype: string; shape: number[]; sha256: string }[];
  shared?: [string, string][];
  metadata?: Record<string, string> | null;
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
const files = Object.entries(manifest)
  .filter(([, e]) => e.tensors?.every((t) => KNOWN.has(t.dtype)) === true)
  .map(([f]) => f);
const stem = (file: string) =>
  file
    .split("/")
    .pop()!
    .replace(/\.[^.]*$/, "");
const temp = makeTempDir("st-convert-torch-interop-");
afterAll(() => temp.cleanup());
const lines = <T>(text: string) =>
  text
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as T);

describeInterop("torch interop", (python) => {
  it("every tensor torch.load gives is in our safetensors output, byte for byte", async () => {
    const args: string[] = [];
    for (const file of files) {
      const path = fixturePath("torch", file);
      const ours = await readTorch(readFileSync(path), { rootName: stem(file) });
      const out = join(temp.dir, `${file.replaceAll("/", "_")}.safetensors`);
      writeFileSync(out, await serializeSafetensors(ours));
      args.push(path, out);
    }
    const verdicts = lines<{ ok: boolean; problems: string[]; tensors: number }>(runPython(python, "reference_torch.py", ["compare", ...args]));
    expect(verdicts.map((v, i) => [files[i], v.problems])).toEqual(files.map((f) => [f, []]));
    expect(verdicts.every((v) => v.ok && v.tensors > 0)).toBe(true);
  });

  it("our .pt output loads with torch.load(weights_only=True) and mmap=True: the same tensors, tied names sharing storage", async () => {
    const outs: string[] = [];
    const zip64: string[] = [];
    for (const file of files) {
      const ours = await readTorch(readFileSync(fixturePath("torch", file)), { rootName: stem(file) });
      for (const [threshold, list] of [
        [undefined, outs],
        [64, zip64],
      ] as const) {
        const sink = new MemorySink();
        await writeTorch(ours, sink, { rootFolder: stem(file), zip64Threshold: threshold });
        const out = join(temp.dir, `${file.replaceAll("/", "_")}${threshold === undefined ? "" : ".zip64"}.pt`);
        writeFileSync(out, sink.bytes());
        list.push(out);
      }
    }
    const loaded = lines<Record<"weights_only" | "mmap", Loaded>>(runPython(python, "reference_torch.py", ["load", ...outs, ...zip64]));
    loaded.forEach((result, i) => {
      const file = files[i % files.length]!;
      const expected = manifest[file]!;
      const want = [...expected.tensors!].map((t) => [t.name, t.dtype, t.shape, t.sha256]).sort((a, b) => String(a[0]).localeCompare(String(b[0])));
      for (const mode of ["weights_only", "mmap"] as const) {
        const got = result[mode];
        expect(got.error, `${file} ${mode}: ${got.message}`).toBeUndefined();
        expect(
          got.tensors!.map((t) => [t.name, t.dtype, t.shape, t.sha256]).sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
          `${file} ${mode}`,
        ).toEqual(want);
        for (const [removed, kept] of Object.entries(expected.aliases ?? {})) {
          expect(got.shared, `${file}: ${removed} shares ${kept}'s storage`).toContainEqual([removed, kept].sort() as [string, string]);
        }
      }
    });
  });

  it("metadata our .pt keeps in the state dict's _metadata is what torch.load returns there", async () => {
    const outs: string[] = [];
    const wanted: Record<string, string>[] = [];
    for (const name of ["metadata.pt", "metadata_one.pt"]) {
      const ours = await readTorch(readFileSync(fixturePath("torch_metadata", name)));
      const sink = new MemorySink();
      await writeTorch(ours, sink);
      const out = join(temp.dir, `kept-${name}`);
      writeFileSync(out, sink.bytes());
      outs.push(out);
      const { format: _, ...entries } = ours.metadata;
      wanted.push(entries);
    }
    // Written from scratch too: many entries (batches of SETITEMS) and no "format".
    const many = Object.fromEntries(Array.from({ length: 2500 }, (_, i) => [`key.${i}`, `value ${i} é`]));
    const sink = new MemorySink();
    await writeTorch({ metadata: many, tensors: [await readTorch(readFileSync(fixturePath("torch", "dtypes.pt"))).then((f) => f.tensors[0]!)] }, sink);
    outs.push(join(temp.dir, "kept-many.pt"));
    writeFileSync(outs[outs.length - 1]!, sink.bytes());
    wanted.push(many);
    const loaded = lines<Record<"weights_only" | "mmap", Loaded>>(runPython(python, "reference_torch.py", ["load", ...outs]));
    loaded.forEach((result, i) => {
      for (const mode of ["weights_only", "mmap"] as const) {
        expect(result[mode].error, `${outs[i]} ${mode}: ${result[mode].message}`).toBeUndefined();
        expect(result[mode].metadata, `${outs[i]} ${mode}`).toEqual(wanted[i]);
      }
    });
  });
});
