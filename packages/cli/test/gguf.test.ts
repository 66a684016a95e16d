/**
 * The st-convert command with GGUF files (fixtures/gguf, written by gguf-py): GGUF → GGUF is the
 * input byte for byte, and so is GGUF → safetensors (.npz, JSON, .bin) → GGUF with the blocks kept; --rename and
 * --metadata pass blocks through; info shows each tensor's ggml type and stored bytes and summarises
 * long arrays; split sets both ways; --quantize; refusals as exit 1 with one coded line.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MemorySink, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { type AtomicFileSink, createFileSink, openFileSource } from "@st-convert/core/node";
import { nativeIo } from "@st-convert/native";
import {
  Random,
  describeGgml,
  describeInterop,
  fixturePath,
  makeTempDir,
  expectOneLineRefusal as oneLineRefusal,
  pseudoRandomBytes,
  runCli,
  runPython,
  toHex,
} from "@st-convert/testing";
import { SOURCE_ALIGNMENT, castKernel } from "@st-convert/core";
import { readGguf } from "@st-convert/gguf";
import { detectInputFormat, formatByName } from "../src/index.js";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const gguf = (name: string) => fixturePath("gguf", name);
const hex = (path: string) => toHex(readFileSync(path));
const ok = (args: string[]) => {
  const run = runCli(args);
  expect(run.status, run.stderr).toBe(0);
  return run;
};

describe("a GGUF split set in a batch", () => {
  it("converts once, through its first file; its later files alone are refused, saying why", () => {
    const folder = join(dir, "in");
    mkdirSync(folder);
    for (const k of [1, 2, 3]) copyFileSync(gguf(`split-0000${k}-of-00003.gguf`), join(folder, `split-0000${k}-of-00003.gguf`));
    const run = ok([folder, "--out-dir", join(dir, "out"), "--to", "safetensors", "--json"]);
    const report = JSON.parse(run.stdout) as { files: { input: { file: string }; status: string }[]; totals: { converted: number; failed: number } };
    expect(report.files.map((f) => [f.input.file, f.status])).toEqual([[join(folder, "split-00001-of-00003.gguf"), "converted"]]);
    const whole = JSON.parse(ok(["info", gguf("split-00001-of-00003.gguf"), "--json"]).stdout) as { tensors: unknown[] };
    const converted = JSON.parse(ok(["info", join(dir, "out", "split-00001-of-00003.safetensors"), "--json"]).stdout) as { tensors: unknown[] };
    expect(converted.tensors.length).toBe(whole.tensors.length);

    rmSync(join(folder, "split-00001-of-00003.gguf"));
    const alone = runCli([folder, "--out-dir", join(dir, "out2"), "--to", "safetensors", "--json"]);
    expect(alone.status).toBe(1);
    const failed = (JSON.parse(alone.stdout) as { files: { status: string; error: { code: string } | null }[] }).files;
    expect(failed.map((f) => [f.status, f.error?.code])).toEqual([
      ["failed", "InvalidSplit"],
      ["failed", "InvalidSplit"],
    ]);
  });
});

describe("st-convert with GGUF files", () => {
  it("GGUF → GGUF with nothing asked is the input, byte for byte, quantized blocks and all", () => {
    for (const name of ["quant.gguf", "plain.gguf", "align64.gguf"]) {
      ok([gguf(name), join(dir, name)]);
      expect(hex(join(dir, name))).toBe(hex(gguf(name)));
    }
  });

  it("GGUF → safetensors (blocks kept), .npz, JSON, .bin → GGUF gives the file back byte for byte", () => {
    for (const [via, extra] of [
      ["kept.safetensors", ["--keep-quantized"]],
      ["kept.npz", ["--keep-quantized"]],
      ["kept.json", ["--keep-quantized"]],
      ["kept.bin", ["--keep-quantized"]],
    ] as const) {
      ok([gguf("quant.gguf"), join(dir, via), ...extra]);
      ok([join(dir, via), join(dir, `${via}.gguf`)]);
      expect(hex(join(dir, `${via}.gguf`))).toBe(hex(gguf("quant.gguf")));
    }
  });

  it("--rename and --metadata pass the quantized blocks through untouched", () => {
    const out = join(dir, "renamed.gguf");
    ok([gguf("quant.gguf"), out, "--rename", "^q=w.q", "--metadata", "general.name=renamed"]);
    const report = JSON.parse(runCli(["info", out, "--json"]).stdout) as {
      metadata: Record<string, string>;
      tensors: { name: string; stored: { type: string } }[];
    };
    expect(report.tensors.map((t) => [t.name, t.stored.type])).toEqual([
      ["w.q8_0", "Q8_0"],
      ["w.q4_0", "Q4_0"],
      ["w.q4_k", "Q4_K"],
      ["w.q6_k_3d", "Q6_K"],
    ]);
    expect(JSON.parse(report.metadata["gguf.general.name"]!)).toEqual({ type: "STRING", value: "renamed" });
    // The blocks: the file's data section equals the input's.
    const data = (path: string) => readFileSync(path).subarray(-948 - 12 * 4);
    expect(toHex(data(out))).toBe(toHex(data(gguf("quant.gguf"))));
  });

  it("info: each tensor's dtype as read, its ggml type and stored bytes; long arrays as type and length", () => {
    const table = ok(["info", gguf("quant.gguf")]).stdout;
    expect(table).toContain("name     dtype  shape        bytes  stored\n");
    expect(table).toContain("q4_k     F32    [2, 256]     2,048  Q4_K 288\n");
    expect(table).toContain('gguf.general.architecture=STRING "llama"');
    // A long array: a file with 20 tokens.
    const tokens = join(dir, "tokens.gguf");
    ok([
      gguf("no_tensors.gguf"),
      tokens,
      "--metadata",
      `gguf.tokenizer.ggml.tokens=${JSON.stringify({ type: "ARRAY", itemType: "STRING", value: Array.from({ length: 20 }, (_, i) => `t${i}`) })}`,
    ]);
    expect(ok(["info", tokens]).stdout).toContain("gguf.tokenizer.ggml.tokens=ARRAY<STRING>[20]");
    const json = JSON.parse(ok(["info", tokens, "--json"]).stdout) as { metadata: Record<string, string> };
    expect(JSON.parse(json.metadata["gguf.tokenizer.ggml.tokens"]!).value).toHaveLength(20);
  });

  it("--max-shard-size writes a split set, read back through its first file as one checkpoint", () => {
    const run = ok([gguf("quant.gguf"), join(dir, "model.gguf"), "--max-shard-size", "300"]);
    expect(run.stderr).toContain("(gguf, 3 files of a split set)");
    for (const k of [1, 2, 3]) expect(existsSync(join(dir, `model-0000${k}-of-00003.gguf`))).toBe(true);
    expect(existsSync(join(dir, "model.gguf"))).toBe(false);
    ok([join(dir, "model-00001-of-00003.gguf"), join(dir, "back.gguf")]);
    expect(hex(join(dir, "back.gguf"))).toBe(hex(gguf("quant.gguf")));
    oneLineRefusal([join(dir, "model-00002-of-00003.gguf"), join(dir, "x.safetensors")], "InvalidSplit");
  });

  it("--quantize: the eligible tensors become blocks, and the command says which others keep their dtype", () => {
    ok([gguf("plain.gguf"), join(dir, "plain.safetensors")]);
    const run = ok([join(dir, "plain.safetensors"), join(dir, "q.gguf"), "--quantize", "Q8_0"]);
    expect(run.stderr).toMatch(/warning: .*q\.gguf: kept as they are, not quantized: /);
    expect(run.stderr).toContain('"f32_2d" (rows of 5 are not whole Q8_0 blocks of 32)');
    expect(run.stderr).toContain('"f16_1d" (1 dimension (quantized tensors have 2 or more))');
    ok([gguf("quant.gguf"), join(dir, "f32.safetensors")]);
    const all = ok([join(dir, "f32.safetensors"), join(dir, "q8.gguf"), "--quantize", "Q8_0", "--quantize", "q4_k:Q4_K"]);
    expect(all.stderr).not.toContain("warning");
    const report = JSON.parse(ok(["info", join(dir, "q8.gguf"), "--json"]).stdout) as { tensors: { name: string; stored: { type: string; bytes: number } }[] };
    expect(report.tensors.map((t) => [t.name, t.stored.type])).toEqual([
      ["q8_0", "Q8_0"],
      ["q4_0", "Q8_0"],
      ["q4_k", "Q4_K"],
      ["q6_k_3d", "Q8_0"],
    ]);
    // The report gives the bytes written (the blocks), not the F32 values read.
    const stored = report.tensors.reduce((sum, t) => sum + t.stored.bytes, 0);
    const converted = JSON.parse(
      ok([join(dir, "f32.safetensors"), join(dir, "q8.gguf"), "--quantize", "Q8_0", "--quantize", "q4_k:Q4_K", "--force", "--json"]).stdout,
    ) as {
      bytes: number;
    };
    expect(converted.bytes).toBe(stored);
    expect(converted.bytes).toBeLessThan(statSync(join(dir, "f32.safetensors")).size / 3);
    // A rule that names no tensor is said (a mistyped name would otherwise leave its tensors as they are).
    const typo = ok([join(dir, "f32.safetensors"), join(dir, "typo.gguf"), "--quantize", "q4_kk:Q4_K"]);
    expect(typo.stderr).toMatch(/warning: .*typo\.gguf: --quantize q4_kk:Q4_K: no tensor's name matches q4_kk/);
    expect(runCli([join(dir, "plain.safetensors"), join(dir, "q.gguf"), "--quantize", "Q9_K", "--force"]).status).toBe(2);
    // GGUF → GGUF: quantized tensors stay their blocks, and --quantize is not "ignored" (the same format reads and writes).
    const again = ok([gguf("quant.gguf"), join(dir, "re.gguf"), "--quantize", "Q4_K"]);
    expect(again.stderr).not.toContain("ignored");
    expect(again.stderr).toContain('"q8_0" (already Q8_0 blocks, passed through as they are)');
    expect(hex(join(dir, "re.gguf"))).toBe(hex(gguf("quant.gguf")));
    oneLineRefusal([join(dir, "plain.safetensors"), join(dir, "q2.gguf"), "--quantize", "f32_2d:Q8_0"], "InvalidArgument");
  });

  it("refuses a hostile file and a dtype GGUF cannot hold with one coded line, writing nothing", () => {
    const bad = join(dir, "bad.gguf");
    const bytes = new Uint8Array(readFileSync(gguf("quant.gguf")));
    bytes[4] = 1; // version 1
    writeFileSync(bad, bytes);
    expect(oneLineRefusal([bad, join(dir, "out.safetensors")], "UnsupportedVersion")).toMatch(/bad\.gguf: GGUF version 1 \(GGUFv1\) is no longer supported/);
    ok([gguf("quant.gguf"), join(dir, "kept.safetensors"), "--keep-quantized"]);
    // Without its record (--metadata cannot remove it; a new key file can): U8 has no GGUF type.
    ok([join(dir, "kept.safetensors"), join(dir, "kept.npy"), "--filter", "^q8_0$"]);
    expect(oneLineRefusal([join(dir, "kept.npy"), join(dir, "u8.gguf")], "Unsupported")).toMatch(
      /GGUF has no type for U8; cast it first, e\.g\. --cast U8=I16/,
    );
    expect(existsSync(join(dir, "u8.gguf"))).toBe(false);
  });
});

describe.skipIf(nativeIo() === undefined)("kernel copies", () => {
  /** Converts with the registry's reader and writer into a file sink; the bytes it copied in the kernel. */
  async function kernelCopied(input: string, output: string, to: string): Promise<number> {
    const file = await openFileSource(input);
    try {
      const source = await (await detectInputFormat(file)).open(file, { options: {}, writing: to });
      const sink = (await createFileSink(output)) as AtomicFileSink;
      await formatByName(to).write(source, sink, { options: {} });
      await sink.close();
      return sink.kernelCopied;
    } finally {
      await file.close();
    }
  }

  it("a GGUF's plain tensors and kept blocks reach the kernel copy, both ways", async () => {
    const big = tensorFromBytes({ name: "w", dtype: "F32", shape: [896, 1024] }, pseudoRandomBytes(7, 896 * 1024 * 4));
    const sink = new MemorySink();
    await formatByName("gguf").write({ metadata: null, tensors: [big] }, sink, { options: {} });
    writeFileSync(join(dir, "big.gguf"), sink.bytes());
    expect(await kernelCopied(join(dir, "big.gguf"), join(dir, "big.safetensors"), "safetensors")).toBe(896 * 1024 * 4);
    expect(await kernelCopied(join(dir, "big.safetensors"), join(dir, "back.gguf"), "gguf")).toBe(896 * 1024 * 4);
    expect(hex(join(dir, "back.gguf"))).toBe(toHex(sink.bytes()));
  });
});

describeInterop("GGUF → safetensors laid out for the kernel copy", (python) => {
  it("puts the largest tensors at their GGUF offsets within 64 KiB; safetensors reads the same tensors, with the module or without", () => {
    const input = join(dir, "big.gguf");
    const offsets = JSON.parse(runPython(python, "reference_gguf.py", ["big", input])) as Record<string, number>;
    const outputs = [join(dir, "native.safetensors"), join(dir, "javascript.safetensors")];
    ok([input, outputs[0]!]);
    expect(runCli([input, outputs[1]!], { env: { ST_CONVERT_NATIVE: "0" } }).status).toBe(0);
    // One input, one output: the layout depends on the input alone.
    expect(readFileSync(outputs[1]!).equals(readFileSync(outputs[0]!))).toBe(true);
    expect(runPython(python, "reference_gguf.py", ["same", outputs[0]!, input]).trim()).toBe("true");

    const file = readFileSync(outputs[0]!);
    const n = Number(file.readBigUInt64LE(0));
    const text = file.subarray(8, 8 + n).toString("utf8");
    const json = text.trimEnd();
    const header = JSON.parse(json) as Record<string, { data_offsets: [number, number] }>;
    // The 20 MiB tensor's data (the most bytes) where the GGUF holds it, modulo 64 KiB; the rest of
    // the header is spaces, to a multiple of 8 and less than 64 KiB past it.
    expect(SOURCE_ALIGNMENT).toBe(65536);
    expect((8 + n + header["blk.0.ffn_up.weight"]!.data_offsets[0]) % 65536).toBe(offsets["blk.0.ffn_up.weight"]! % 65536);
    expect(n % 8).toBe(0);
    expect(text.length - json.length).toBeLessThan(65536 + 8);
    expect(/^ *$/.test(text.slice(json.length))).toBe(true);
  });
});

/** A safetensors file of one tensor `w`, its header built here (the bytes are the test's, not a writer's). */
function safetensorsOf(path: string, dtype: "F32" | "F16", shape: [number, number], data: Uint8Array): void {
  let header = JSON.stringify({ w: { dtype, shape, data_offsets: [0, data.byteLength] } });
  header += " ".repeat((8 - (header.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  writeFileSync(path, Buffer.concat([length, Buffer.from(header), data]));
}

describeGgml("--quantize of tensors large enough for the kernel threads", (oracle) => {
  // 4 Mi values, the size from which the writer quantizes on worker threads: F32 through Q4_K's
  // WebAssembly loops, F16 widened on the threads and through the JavaScript Q4_0 kernel; and Q8_0,
  // whose SIMD kernel keeps up with the reads, on the calling thread
  it.each([
    ["F32", "Q4_K", 12],
    ["F16", "Q4_0", 2],
    ["F32", "Q8_0", 8],
  ] as const)("%s → %s: ggml_quantize_chunk's blocks, in order", async (dtype, type, id) => {
    const random = new Random(0x40, id);
    const count = 4096 * 1024;
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = (random.uint32() / 2 ** 32 - 0.5) * (1 + (i % 7)) * (i % 4099 === 0 ? 100 : 1);
    let data = new Uint8Array(values.buffer);
    if (dtype === "F16") {
      data = new Uint8Array(count * 2);
      castKernel("F32", "F16")(new Uint8Array(values.buffer), data, count);
      castKernel("F16", "F32")(data, new Uint8Array(values.buffer), count);
    }
    safetensorsOf(join(dir, "big.safetensors"), dtype, [4096, 1024], data);
    ok([join(dir, "big.safetensors"), join(dir, "big.gguf"), "--quantize", type]);
    const source = await openFileSource(join(dir, "big.gguf"));
    try {
      const file = await readGguf(source, { keepQuantized: true });
      expect(file.tensors[0]!.ggmlType).toBe(type);
      const expected = oracle.quantize(id, values, 1024);
      const ours = await readTensorBytes(file.tensors[0]!);
      expect(ours.byteLength).toBe(expected.byteLength);
      expect(Buffer.from(ours).equals(Buffer.from(expected))).toBe(true);
    } finally {
      await source.close();
    }
  });
});
