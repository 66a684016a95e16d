/**
 * The st-convert command with flax msgpack files: to and from safetensors, round trips that give
 * flax's own bytes back (the flax.tree metadata through safetensors, npz and JSON), info, --sep,
 * --keep-scalars, detection by content, refusals as exit 1 with one line, and real TrainStates
 * restored by flax's from_bytes after the trip.
 */
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { describeInterop, fixturePath, makeTempDir, runCli, runPython, toHex, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

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
    // The tree goes along in the metadata unless the names alone rebuild the file.
    const canonical = expected.identical && expected.max_chunk_size === 2 ** 30;
    expect(Object.keys((await safetensorsView(out)).metadata ?? {})).toEqual(canonical ? [] : ["flax.tree"]);
  });

  it("keeps the leaves that are not arrays in the flax.tree metadata, with no warning; where no metadata goes, a warning says so", () => {
    const out = join(dir, "out.safetensors");
    const run = runCli([flax("scalars_and_leaves.msgpack"), out]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).not.toContain("warning");
    // {"step": 3, "w": uint8 [1]} as flax writes it, into a .npy, which has no room for metadata.
    const input = join(dir, "state.msgpack");
    writeFileSync(input, Buffer.from("82a47374657003a177c70c01939101a575696e7438c40107", "hex"));
    const npy = runCli([input, join(dir, "w.npy")]);
    expect(npy.status, npy.stderr).toBe(0);
    expect(npy.stderr).toMatch(/warning: .*metadata dropped/);
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
    // An extension no format claims (.bin is PyTorch's).
    const input = join(dir, "weights.data");
    copyFileSync(flax("linen_to_bytes.msgpack"), input);
    const run = runCli([input, join(dir, "a.safetensors"), "--json"]);
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ input: { format: "flax" }, output: { format: "safetensors" }, tensors: 7 });
    expect(runCli([input, join(dir, "b.safetensors"), "--from", "flax"]).status).toBe(0);
  });
});

describe("st-convert safetensors -> flax", () => {
  // See packages/flax/test/golden.test.ts: flax never writes this fixture's sorted chunk dict itself.
  const flaxOwnBytes = Object.keys(manifest).filter((name) => name !== "chunked_in_list.msgpack");

  it.each(flaxOwnBytes)("%s: flax -> flax, and through safetensors, npz and JSON, back to flax's own bytes", (name) => {
    // [input, output]: a path in the temporary folder, or the fixture itself.
    const steps: [string, string][] = [
      [flax(name), "direct.msgpack"],
      [flax(name), "a.safetensors"],
      ["a.safetensors", "via-safetensors.msgpack"],
      ["a.safetensors", "b.npz"],
      ["b.npz", "c.safetensors"],
      ["c.safetensors", "via-npz.msgpack"],
      [flax(name), "d.json"],
      ["d.json", "via-json.msgpack"],
    ];
    for (const [input, output] of steps) {
      const run = runCli([input.startsWith("/") ? input : join(dir, input), join(dir, output)]);
      expect(run.status, `${output}: ${run.stderr}`).toBe(0);
      expect(run.stderr, output).not.toContain("warning");
    }
    for (const output of ["direct.msgpack", "via-safetensors.msgpack", "via-npz.msgpack", "via-json.msgpack"]) {
      expect(toHex(readFileSync(join(dir, output))), output).toBe(toHex(readFileSync(flax(name))));
    }
  });

  it("--keep-scalars: the numbers go out as tensors and come back as numbers", () => {
    const mid = join(dir, "mid.safetensors");
    const out = join(dir, "out.msgpack");
    expect(runCli([flax("train_state_adam.msgpack"), mid, "--keep-scalars"]).status).toBe(0);
    expect(runCli([mid, out]).status).toBe(0);
    expect(toHex(readFileSync(out))).toBe(toHex(readFileSync(flax("train_state_adam.msgpack"))));
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
    // The chunk sizes flax used (its MAX_CHUNK_SIZE patched to 16) are in the tree.
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, input: { format: "flax" }, metadata: { "flax.tree": expect.stringContaining('"big",{"k":4}') } });
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

it("--help lists the flax format, and the convert command's help its options", () => {
  expect(runCli(["--help"]).stdout).toMatch(/flax\s+\.msgpack/);
  const run = runCli(["help", "convert"]);
  expect(run.stdout).toContain("--sep SEP");
  expect(run.stdout).toContain("--keep-scalars");
});

describeInterop("st-convert with real flax TrainStates", (python) => {
  it("adam, sgd with momentum, BatchNorm batch_stats: flax -> flax and through safetensors and npz, restored by from_bytes into the original's target", () => {
    const args = ["from-bytes"];
    for (const kind of ["adam", "sgd_momentum", "batch_norm"]) {
      const fixture = flax(`train_state_${kind}.msgpack`);
      const [direct, st, back, npz, st2, back2] = ["direct.msgpack", "a.safetensors", "b.msgpack", "c.npz", "d.safetensors", "e.msgpack"].map((f) =>
        join(dir, `${kind}-${f}`),
      ) as [string, string, string, string, string, string];
      for (const [input, output] of [
        [fixture, direct],
        [fixture, st],
        [st, back],
        [st, npz],
        [npz, st2],
        [st2, back2],
      ] as const) {
        const run = runCli([input, output]);
        expect(run.status, run.stderr).toBe(0);
      }
      args.push(...(args.length > 1 ? ["--"] : []), kind, fixture, direct, back, back2);
    }
    const results = runPython(python, "reference_flax.py", args)
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as unknown);
    expect(results).toEqual(Array.from({ length: 9 }, () => ({ ok: true, leaves: expect.any(Number), differences: [], to_bytes_identical: true })));
  }, 120_000);
});
