/**
 * The st-convert command with flax msgpack files: to and from safetensors, info, --sep,
 * --keep-scalars, detection by content, and refusals as exit 1 with one line.
 */
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { fixturePath, makeTempDir, runCli, toHex, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface ManifestFile {
  max_chunk_size: number;
  identical: boolean;
  tensors: { name: string; dtype: string; shape: number[]; hex: string }[];
  skipped: { name: string; kind: string }[];
}
const manifest = JSON.parse(readFileSync(fixturePath("flax", "manifest.json"), "utf8")) as Record<string, ManifestFile>;
const flax = (name: string) => fixturePath("flax", name);

async function safetensorsView(path: string) {
  const file = await readSafetensors(readFileSync(path));
  const tensors = await Promise.all(
    file.tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], hex: toHex(await readTensorBytes(t)) })),
  );
  return { metadata: file.metadata, tensors: tensors.sort((a, b) => (a.name < b.name ? -1 : 1)) };
}

describe("st-convert flax -> safetensors", () => {
  it.each(Object.entries(manifest))("%s: the tensors msgpack_restore gives, as safetensors", async (name, expected) => {
    const out = join(dir, "out.safetensors");
    const run = runCli([flax(name), out]);
    expect(run.status, run.stderr).toBe(0);
    // A top-level array is named after the input file's stem, as in the manifest.
    const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : 1);
    expect((await safetensorsView(out)).tensors).toEqual([...expected.tensors].sort(byName));
    expect((await safetensorsView(out)).metadata).toBeNull();
  });

  it("reports each skipped leaf as a warning on stderr and still succeeds; --quiet silences them", () => {
    const out = join(dir, "out.safetensors");
    const run = runCli([flax("scalars_and_leaves.msgpack"), out]);
    expect(run.status).toBe(0);
    for (const leaf of manifest["scalars_and_leaves.msgpack"]!.skipped) expect(run.stderr).toContain(`: skipped "${leaf.name}": `);
    expect(runCli([flax("scalars_and_leaves.msgpack"), out, "--force", "--quiet"]).stderr).toBe("");
  });

  it("--keep-scalars keeps Python numbers and bools as 0-d tensors", async () => {
    const out = join(dir, "out.safetensors");
    expect(runCli([flax("scalars_and_leaves.msgpack"), out, "--keep-scalars"]).status).toBe(0);
    const names = (await safetensorsView(out)).tensors.map((t) => [t.name, t.dtype]);
    expect(names).toEqual(
      expect.arrayContaining([
        ["py_int", "I64"],
        ["py_u64", "U64"],
        ["py_float", "F64"],
        ["py_bool", "BOOL"],
      ]),
    );
  });

  it("--sep / joins names with a slash", () => {
    const run = runCli(["info", flax("linen_to_bytes.msgpack"), "--json", "--sep", "/"]);
    expect(run.status).toBe(0);
    expect((JSON.parse(run.stdout) as { tensors: { name: string }[] }).tensors[0]!.name).toBe("params/Embed_0/embedding");
  });

  it("recognises a flax file by its content, whatever its name, and with --from flax", () => {
    const input = join(dir, "weights.bin");
    copyFileSync(flax("linen_to_bytes.msgpack"), input);
    const run = runCli([input, join(dir, "a.safetensors"), "--json"]);
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ input: { format: "flax" }, output: { format: "safetensors" }, tensors: 7 });
    expect(runCli([input, join(dir, "b.safetensors"), "--from", "flax"]).status).toBe(0);
  });
});

describe("st-convert safetensors -> flax", () => {
  it.each(Object.entries(manifest).filter(([, f]) => f.identical && f.max_chunk_size === 2 ** 30))("%s: back to flax's own bytes", (name) => {
    const mid = join(dir, "mid.safetensors");
    const out = join(dir, "out.msgpack");
    expect(runCli([flax(name), mid]).status).toBe(0);
    const run = runCli([mid, out]);
    expect(run.status, run.stderr).toBe(0);
    expect(toHex(readFileSync(out))).toBe(toHex(readFileSync(flax(name))));
  });

  it("safetensors -> msgpack -> safetensors gives the same file", () => {
    const [a, b, c] = ["a.safetensors", "b.msgpack", "c.safetensors"].map((f) => join(dir, f)) as [string, string, string];
    expect(runCli([flax("mixed_to_bytes.msgpack"), a]).status).toBe(0);
    expect(runCli([a, b]).status).toBe(0);
    expect(runCli([b, c]).status).toBe(0);
    expect(readFileSync(c).equals(readFileSync(a))).toBe(true);
  });

  it("drops metadata with a warning, and --sep / splits names on slashes", async () => {
    const input = join(dir, "in.safetensors");
    const t = tensorFromBytes({ name: "enc/layer.0/w", dtype: "F16", shape: [2] }, Uint8Array.of(0, 0x3c, 0, 0x40));
    writeFileSync(input, await serializeSafetensors({ metadata: { format: "flax" }, tensors: [t] }));
    const out = join(dir, "out.msgpack");
    const run = runCli([input, out, "--sep", "/"]);
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/warning: .*: metadata dropped \(format\)/);
    const info = JSON.parse(runCli(["info", out, "--json"]).stdout) as { input: { format: string }; tensors: { name: string }[] };
    expect(info).toMatchObject({ input: { format: "flax" }, tensors: [{ name: "enc.layer.0.w" }] });
    expect(JSON.parse(runCli(["info", out, "--json", "--sep", "/"]).stdout)).toMatchObject({ tensors: [{ name: "enc/layer.0/w", dtype: "F16", shape: [2] }] });
  });
});

describe("st-convert info on flax files", () => {
  it("prints a table of the tensors", () => {
    const run = runCli(["info", flax("linen_to_bytes.msgpack")]);
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/: flax\n/);
    expect(run.stdout).toMatch(/params\.Embed_0\.embedding\s+F32\s+\[10, 4\]\s+160/);
    expect(run.stdout).toMatch(/7 tensors, 69 parameters/);
  });

  it("--json lists names, dtypes and shapes in file order", () => {
    const run = runCli(["info", flax("chunked.msgpack"), "--json"]);
    expect(run.status).toBe(0);
    const expected = manifest["chunked.msgpack"]!.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape }));
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, input: { format: "flax" }, metadata: null });
    expect(JSON.parse(run.stdout).tensors.map(({ name, dtype, shape }: { name: string; dtype: string; shape: number[] }) => ({ name, dtype, shape }))).toEqual(
      expected,
    );
  });
});

describe("refusals", () => {
  it("a truncated file: exit 1, one line naming the file and the rule", () => {
    const path = join(dir, "cut.msgpack");
    const bytes = readFileSync(flax("linen_to_bytes.msgpack"));
    writeFileSync(path, bytes.subarray(0, bytes.length - 3));
    expect(oneLineRefusal(["info", path], "UnexpectedEof")).toContain(path);
    expect(oneLineRefusal([path, join(dir, "out.safetensors")], "UnexpectedEof")).toContain("truncated");
    expect(readdirSync(dir)).toEqual(["cut.msgpack"]);
  });

  it("trailing bytes", () => {
    const path = join(dir, "extra.msgpack");
    writeFileSync(path, Buffer.concat([readFileSync(flax("linen_to_bytes.msgpack")), Buffer.from([0])]));
    oneLineRefusal(["info", path], "ExtraData");
  });

  it("a dtype safetensors cannot hold names the tensor", () => {
    const path = join(dir, "c128.msgpack");
    // {"z": ndarray complex128 [1]} as flax writes it.
    writeFileSync(path, Buffer.from(`81a17ac72001939101aa636f6d706c6578313238c410${"00".repeat(16)}`, "hex"));
    expect(oneLineRefusal(["info", path], "UnknownDtype")).toContain('tensor "z": the dtype "complex128" has no safetensors equivalent');
  });

  it("a name clash on write (a beside a.b)", async () => {
    const input = join(dir, "clash.safetensors");
    const u8 = (name: string) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, Uint8Array.of(1));
    writeFileSync(input, await serializeSafetensors({ metadata: null, tensors: [u8("a"), u8("a.b")] }));
    expect(oneLineRefusal([input, join(dir, "out.msgpack")], "InvalidName")).toMatch(/"a" is an array, but "a\.b" needs it to be a dict/);
    expect(readdirSync(dir)).toEqual(["clash.safetensors"]);
  });

  it("F4 cannot be written as flax", async () => {
    const input = join(dir, "f4.safetensors");
    writeFileSync(
      input,
      await serializeSafetensors({ metadata: null, tensors: [tensorFromBytes({ name: "q", dtype: "F4", shape: [2] }, Uint8Array.of(0x21))] }),
    );
    oneLineRefusal([input, join(dir, "out.msgpack")], "Unsupported");
  });
});

it("--help lists the flax format and its options", () => {
  const run = runCli(["--help"]);
  expect(run.stdout).toMatch(/flax\s+\.msgpack/);
  expect(run.stdout).toContain("--sep SEP");
  expect(run.stdout).toContain("--keep-scalars");
});
