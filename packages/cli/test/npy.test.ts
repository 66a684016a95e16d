/**
 * The st-convert command with NumPy files: .npz and .npy to and from safetensors, info on both,
 * --name, --dtype, --compress, detection by content, and refusals as exit 1 with one line that
 * names the file, the tensor and the rule.
 */
import { copyFileSync, existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes } from "@st-convert/core";
import { readNpy, readNpz } from "@st-convert/npy";
import { fixturePath, makeTempDir, runCli, toHex, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface Entry {
  expect: { metadata?: null; tensors?: { name: string; dtype: string; shape: number[]; hex: string | null; sha256: string }[]; error?: string };
  dtypes?: string[];
}
const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, Entry>;
const npy = (name: string) => fixturePath("npy", name);

async function view(path: string) {
  const bytes = readFileSync(path);
  const file = path.endsWith(".safetensors")
    ? await readSafetensors(bytes)
    : path.endsWith(".npz")
      ? await readNpz(bytes, { dtypes: ["V2=BF16"] })
      : await readNpy(bytes);
  const tensors = await Promise.all(
    file.tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], hex: toHex(await readTensorBytes(t)) })),
  );
  return { metadata: file.metadata === null ? null : { ...file.metadata }, tensors: tensors.sort((a, b) => (a.name < b.name ? -1 : 1)) };
}

const convertible = Object.entries(manifest).filter(([name, e]) => e.expect.tensors !== undefined && (name.endsWith(".npz") || e.expect.tensors.length === 1));

describe("st-convert npz/npy -> safetensors", () => {
  it.each(convertible)("%s: numpy's arrays, C order and little-endian", async (name, entry) => {
    const out = join(dir, "out.safetensors");
    const run = runCli([npy(name), out, ...(entry.dtypes ?? []).flatMap((d) => ["--dtype", d])]);
    expect(run.status, run.stderr).toBe(0);
    const got = await view(out);
    const expected = [...entry.expect.tensors!].sort((a, b) => (a.name < b.name ? -1 : 1));
    expect(got.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(expected.map((t) => [t.name, t.dtype, t.shape]));
    got.tensors.forEach((t, i) => {
      if (expected[i]!.hex !== null) expect(t.hex).toBe(expected[i]!.hex);
    });
    expect(got.metadata).toBeNull();
  });

  it("names a .npy's tensor after the file, or --name", async () => {
    const out = join(dir, "out.safetensors");
    expect(runCli([npy("fortran_f32.npy"), out]).status).toBe(0);
    expect((await view(out)).tensors.map((t) => t.name)).toEqual(["fortran_f32"]);
    expect(runCli([npy("fortran_f32.npy"), out, "--force", "--name", "model.w"]).status).toBe(0);
    expect((await view(out)).tensors.map((t) => t.name)).toEqual(["model.w"]);
  });

  it("--dtype declares what a raw void holds, for every tensor or one", async () => {
    const out = join(dir, "out.safetensors");
    const refusal = oneLineRefusal([npy("ml_bf16.npy"), out], "UndeclaredVoidDtype");
    expect(refusal).toContain(npy("ml_bf16.npy"));
    expect(refusal).toContain('tensor "ml_bf16"');
    expect(refusal).toContain("--dtype V2=BF16");
    expect(existsSync(out)).toBe(false);
    expect(runCli([npy("ml_bf16.npy"), out, "--dtype", "V2=BF16"]).status).toBe(0);
    expect((await view(out)).tensors[0]!.dtype).toBe("BF16");
    expect(runCli([npy("npz_bf16_declared.npz"), out, "--force", "--dtype", "bf:V2=BF16"]).status).toBe(0);
    expect((await view(out)).tensors.find((t) => t.name === "bf")!.dtype).toBe("BF16");
    // A malformed declaration is a command-line mistake: exit 2, with the rule.
    const malformed = runCli([npy("ml_bf16.npy"), out, "--force", "--dtype", "V2=F32"]);
    expect(malformed.status).toBe(2);
    expect(malformed.stderr).toContain("F32 has 4 bytes per element, V2 has 2");
  });

  it("warns about members that are not arrays and converts the rest", async () => {
    const out = join(dir, "out.safetensors");
    const run = runCli([npy("npz_extra_members.npz"), out]);
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/st-convert: warning: \S+: member "readme.txt" is not an npy array/);
    expect((await view(out)).tensors.map((t) => t.name)).toEqual(["a"]);
  });

  it("recognises .npy and .npz by content when the name says nothing", async () => {
    for (const name of ["dtype_f32.npy", "npz_stored.npz"]) {
      const input = join(dir, "weights.bin");
      copyFileSync(npy(name), input);
      const out = join(dir, "out.safetensors");
      const run = runCli([input, out, "--force"]);
      expect(run.status, run.stderr).toBe(0);
      expect(run.stderr).toContain(name.endsWith(".npz") ? "(npz)" : "(npy)");
    }
  });
});

describe("st-convert safetensors -> npz/npy and back", () => {
  it("safetensors -> .npz -> safetensors is byte for byte, metadata and bf16/fp8 included, stored and --compress", async () => {
    const original = fixturePath("safetensors", "mixed.safetensors");
    for (const flags of [[], ["--compress"]]) {
      const npz = join(dir, `mixed${flags.length}.npz`);
      const back = join(dir, `back${flags.length}.safetensors`);
      expect(runCli([original, npz, ...flags]).status).toBe(0);
      const run = runCli([npz, back]);
      expect(run.status, run.stderr).toBe(0);
      expect(toHex(readFileSync(back))).toBe(toHex(readFileSync(original)));
    }
    const stored = readFileSync(join(dir, "mixed0.npz"));
    const compressed = readFileSync(join(dir, "mixed1.npz"));
    expect(compressed.byteLength).toBeLessThan(stored.byteLength);
    // --compress deflates every member (method 8 in each local header).
    expect(stored.readUInt16LE(8)).toBe(0);
    expect(compressed.readUInt16LE(8)).toBe(8);
  });

  it("safetensors -> .npy -> safetensors for one tensor, --name giving it back its name", async () => {
    const original = fixturePath("safetensors", "dtype_f64.safetensors");
    const out = join(dir, "w.npy");
    const back = join(dir, "back.safetensors");
    expect(runCli([original, out]).status).toBe(0);
    expect(runCli([out, back, "--name", "x"]).status).toBe(0);
    expect(toHex(readFileSync(back))).toBe(toHex(readFileSync(original)));
  });

  it("writing a .npy drops metadata with a warning", () => {
    const input = join(dir, "in.safetensors");
    expect(runCli([fixturePath("safetensors", "dtype_u8.safetensors"), input, "--metadata", "format=pt"]).status).toBe(0);
    const run = runCli([input, join(dir, "out.npy")]);
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/st-convert: warning: \S+: metadata dropped/);
  });

  it("refuses a multi-tensor source to .npy with a hint to use .npz, leaving nothing behind", () => {
    const out = join(dir, "out.npy");
    const line = oneLineRefusal([fixturePath("safetensors", "mixed.safetensors"), out], "Unsupported");
    expect(line).toContain(out);
    expect(line).toContain("write a .npz archive instead");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("refuses F4 to .npz naming the tensor and the rule", () => {
    const line = oneLineRefusal([fixturePath("safetensors", "dtype_f4.safetensors"), join(dir, "out.npz")], "UnsupportedDtype");
    expect(line).toMatch(/out\.npz: tensor "f4": F4 has no numpy equivalent/);
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe("st-convert info", () => {
  it("lists an .npz's tensors in archive order, with its metadata", () => {
    const npz = join(dir, "m.npz");
    expect(runCli([fixturePath("safetensors", "mixed.safetensors"), npz]).status).toBe(0);
    const run = runCli(["info", npz, "--json"]);
    expect(run.status, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout) as { input: { format: string }; metadata: unknown; tensors: { name: string; dtype: string; shape: number[] }[] };
    expect(report.input.format).toBe("npz");
    expect(report.metadata).toEqual({ format: "pt" });
    expect(report.tensors.find((t) => t.name === "model.embed_tokens.weight")).toEqual({
      name: "model.embed_tokens.weight",
      dtype: "BF16",
      shape: [16, 8],
      bytes: 256,
    });
  });

  it("describes a .npy", () => {
    const run = runCli(["info", npy("fortran_i64_be.npy")]);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain(": npy");
    expect(run.stdout).toMatch(/fortran_i64_be\s+I64\s+\[5, 3\]\s+120/);
  });

  it("shows the README's sample", () => {
    const run = runCli(["info", npy("sample_model.npz")]);
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/8 tensors, 1,[0-9]{3} parameters/);
  });
});

describe("refusals: exit 1, one line naming file, tensor and rule", () => {
  it.each(Object.entries(manifest).filter(([, e]) => e.expect.error !== undefined))("%s", (name, entry) => {
    const line = oneLineRefusal(["info", npy(name), ...(entry.dtypes ?? []).flatMap((d) => ["--dtype", d])], entry.expect.error!);
    expect(line).toContain(npy(name));
    expect(line).toMatch(/tensor "[^"]+"/);
  });

  it("a file that is both an .npy and a zip archive is refused, named .npz or .npy", () => {
    const polyglot = Buffer.concat([readFileSync(npy("dtype_f32.npy")), readFileSync(npy("npz_c_order.npz"))]);
    for (const name of ["poly.npz", "poly.npy"]) {
      const input = join(dir, name);
      writeFileSync(input, polyglot);
      expect(oneLineRefusal(["info", input], "AmbiguousFormat")).toContain(input);
      oneLineRefusal([input, join(dir, "out.safetensors")], "AmbiguousFormat");
    }
    expect(readdirSync(dir).sort()).toEqual(["poly.npy", "poly.npz"]);
  });

  it("an archive with no array (a PyTorch checkpoint given --from npz) fails and says why, leaving nothing", () => {
    const torch = readdirSync(fixturePath("torch")).find((f) =>
      readFileSync(fixturePath("torch", f)).subarray(0, 4).equals(Buffer.from("PK\x03\x04", "latin1")),
    );
    expect(torch, "a zip checkpoint among fixtures/torch").toBeDefined();
    const out = join(dir, "out.safetensors");
    const line = oneLineRefusal(["--from", "npz", fixturePath("torch", torch!), out], "NoArrays");
    expect(line).toMatch(/PyTorch checkpoint/);
    expect(existsSync(out)).toBe(false);
  });

  it("a flipped byte in a member's npy magic is a bad CRC, not a member skipped with a warning", () => {
    const corrupted = Buffer.from(readFileSync(npy("npz_c_order.npz")));
    corrupted[30 + "w.npy".length + 20 + 1]! ^= 0x01;
    const input = join(dir, "bad.npz");
    writeFileSync(input, corrupted);
    expect(oneLineRefusal(["info", input], "BadCrc")).toContain('tensor "w"');
    oneLineRefusal([input, join(dir, "out.safetensors")], "BadCrc");
    expect(readdirSync(dir)).toEqual(["bad.npz"]);
  });

  it("a corrupted member is refused when converted (bad CRC), and no output is left", () => {
    const bytes = readFileSync(npy("npz_c_order.npz"));
    // Flip a byte of the first member's array data (its header ends 128 bytes after the member's start).
    const input = join(dir, "bad.npz");
    const corrupted = Buffer.from(bytes);
    corrupted[30 + "w.npy".length + 20 + 128 + 3]! ^= 0xff;
    writeFileSync(input, corrupted);
    const line = oneLineRefusal([input, join(dir, "out.safetensors")], "BadCrc");
    expect(line).toContain('tensor "w"');
    expect(readdirSync(dir)).toEqual(["bad.npz"]);
  });
});
