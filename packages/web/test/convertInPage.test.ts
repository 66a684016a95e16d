/**
 * The page's logic without a browser (Node has `Blob` and `File`): settings, names, the blob sink,
 * and failures named as the command names them. The browser tests compare with the command itself.
 */
import { readFileSync } from "node:fs";
import { isStConvertError } from "@st-convert/core";
import { fixturePath, safetensorsFile } from "@st-convert/testing";
import { describe, expect, it } from "vitest";
import { compileSettings, convertFiles, inspectFiles, mainFile, plannedBytes } from "../src/convertInPage.ts";
import { FORMATS, OUTPUT_FORMATS, formatByName, outputFileName } from "../src/formats.ts";
import { BLOB_FOLD_BYTES, BlobSink, writableSink } from "../src/sinks.ts";
import { describeError, formatSize } from "../src/text.ts";

function fixtureFile(path: string): File {
  return new File([readFileSync(fixturePath(path))], path.slice(path.lastIndexOf("/") + 1));
}

async function failure(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    return describeError(error);
  }
  throw new Error("expected a failure");
}

describe("compileSettings", () => {
  it("refuses a filter that does not compile, naming the field", () => {
    expect(() => compileSettings({ filter: "(" })).toThrow(/^filter "\(": Invalid regular expression/);
  });
  it("refuses a metadata line without KEY=", () => {
    expect(() => compileSettings({ metadata: "a=1\n=2" })).toThrow('metadata "=2": expected KEY=VALUE');
    expect(() => compileSettings({ metadata: "a=1\nplain" })).toThrow('metadata "plain": expected KEY=VALUE');
  });
  it("takes KEY=VALUE lines (the first = separates; empty values and blank lines allowed)", () => {
    expect({ ...compileSettings({ metadata: "a=b=c\r\n\nempty=\n" }).metadata }).toEqual({ a: "b=c", empty: "" });
  });
  it("parses cast rules separated by white space, as --cast does", () => {
    expect(compileSettings({ cast: " f32=bf16\tnorm:F32=F32 " }).cast.map((r) => r.text)).toEqual(["F32=BF16", "norm:F32=F32"]);
    expect(() => compileSettings({ cast: "F32=I8" })).toThrow(/does not cast between float and integer/);
  });
});

describe("formats", () => {
  it("offers every writable format of the command, and no index", () => {
    expect(OUTPUT_FORMATS.map((f) => f.name)).toEqual(["safetensors", "npy", "npz", "flax", "json", "torch", "gguf"]);
    // A distributed checkpoint is read from its picked folder; a page saves one file, so it is not written here.
    expect(FORMATS.map((f) => f.name)).toContain("dcp");
    expect(FORMATS.map((f) => f.name)).toContain("safetensors-index");
    expect(() => formatByName("tflite")).toThrow(/unknown format "tflite"/);
  });
  it("names the output after the input, its format's extension replaced (the longest known one)", () => {
    expect(outputFileName("model.safetensors", formatByName("npz"))).toBe("model.npz");
    expect(outputFileName("model.safetensors.index.json", formatByName("safetensors"))).toBe("model.safetensors");
    expect(outputFileName("weights.v2.npy", formatByName("json"))).toBe("weights.v2.json");
    expect(outputFileName("noextension", formatByName("flax"))).toBe("noextension.msgpack");
    expect(outputFileName("dir/sub/x.pt", formatByName("torch"))).toBe("x.bin");
  });
  it("takes an index among the picked files as the one to read", () => {
    const a = new File([], "model-00001-of-00002.safetensors");
    const index = new File([], "model.safetensors.index.json");
    expect(mainFile([a, index])).toBe(index);
    expect(mainFile([a])).toBe(a);
  });
});

describe("inspectFiles and convertFiles", () => {
  it("list a sharded checkpoint from its index and the shards picked with it", async () => {
    const dir = "sharded/hub";
    const { readdirSync } = await import("node:fs");
    const names = readdirSync(fixturePath(dir)).filter((n) => n.startsWith("model") && (n.endsWith(".safetensors") || n.endsWith(".index.json")));
    expect(names.some((n) => n.endsWith(".index.json"))).toBe(true);
    const files = names.map((n) => fixtureFile(`${dir}/${n}`));
    const info = await inspectFiles(files);
    expect(info.format).toBe("safetensors-index");
    expect(info.totals.tensors).toBeGreaterThan(0);
    // Without its shards, the index is refused with a line that says what to pick.
    const alone = files.filter((f) => f.name.endsWith(".index.json"));
    expect(await failure(inspectFiles(alone))).toMatch(/^model\.safetensors\.index\.json: .*pick the index together with its shards \[InvalidArgument\]$/);
  });

  it("read a distributed checkpoint picked as its files (.metadata and rank files) and convert it", async () => {
    const dir = "dcp/ranks2";
    const { readdirSync } = await import("node:fs");
    const files = readdirSync(fixturePath(dir)).map((n) => fixtureFile(`${dir}/${n}`));
    expect(mainFile(files).name).toBe(".metadata");
    const info = await inspectFiles(files);
    expect(info.format).toBe("dcp");
    expect(info.tensors.map((t) => t.name)).toContain("model.embed.weight");
    const sink = new BlobSink("model.safetensors");
    await convertFiles(files, "safetensors", sink, "model.safetensors");
    const out = new Uint8Array(await sink.blob().arrayBuffer());
    const { readSafetensors, readTensorBytes } = await import("@st-convert/core");
    const file = await readSafetensors(out);
    const expected = JSON.parse(readFileSync(fixturePath("dcp", "manifest.json"), "utf8")).ranks2.items.find(
      (i: { name: string }) => i.name === "model.proj.weight",
    );
    const proj = file.tensors.find((t) => t.name === "model.proj.weight")!;
    expect(Buffer.from(await readTensorBytes(proj)).toString("hex")).toBe(expected.hex);
    // Without its rank files, one line says what to pick.
    const alone = files.filter((f) => f.name === ".metadata");
    expect(await failure(inspectFiles(alone))).toMatch(/pick the whole folder, \.metadata with its rank files\).*\[InvalidRelativePath\]$/);
  });

  it("name a refused input as the command does: file, tensor, rule, [Code]", async () => {
    const file = new File([safetensorsFile('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4) as Uint8Array<ArrayBuffer>], "bad.safetensors");
    expect(await failure(inspectFiles([file]))).toMatch(/^bad\.safetensors: .*\[\w+\]$/);
  });

  it("abort the sink when the conversion fails, and name the output for a writer's refusal", async () => {
    const sink = new BlobSink("handwritten.npy");
    const line = await failure(convertFiles([fixtureFile("json/handwritten.json")], "npy", sink, "handwritten.npy"));
    expect(line).toMatch(/^handwritten\.npy: a \.npy file holds exactly one array.*\[Unsupported\]$/);
    expect(() => sink.blob()).toThrow(/not complete/);
  });

  it("refuse a selection that keeps nothing, unless an empty output is allowed", async () => {
    const file = fixtureFile("safetensors/mixed.safetensors");
    expect(await failure(convertFiles([file], "safetensors", new BlobSink(), "x.safetensors", { filter: "^nothing$" }))).toContain("[NothingToWrite]");
    const sink = new BlobSink();
    const done = await convertFiles([file], "safetensors", sink, "x.safetensors", { filter: "^nothing$", allowEmpty: true });
    expect(done.tensors).toBe(0);
    expect(sink.blob().size).toBeGreaterThan(8);
  });

  it("stop at the next chunk when the signal fires, with Aborted, leaving no output", async () => {
    const controller = new AbortController();
    controller.abort();
    const sink = new BlobSink();
    const line = await failure(convertFiles([fixtureFile("npy/sample_model.npz")], "safetensors", sink, "x.safetensors", {}, { signal: controller.signal }));
    expect(line).toContain("[Aborted]");
    expect(() => sink.blob()).toThrow();
  });

  it("show a GGUF's ggml types and summarised keys, and give a GGUF back byte for byte", async () => {
    const info = await inspectFiles([fixtureFile("gguf/quant.gguf")]);
    expect(info.tensors.map((t) => [t.name, t.dtype, t.stored])).toEqual([
      ["q8_0", "F32", "Q8_0 204"],
      ["q4_0", "F32", "Q4_0 36"],
      ["q4_k", "F32", "Q4_K 288"],
      ["q6_k_3d", "F32", "Q6_K 420"],
    ]);
    expect(info.metadataShown?.[0]).toEqual(["gguf.general.architecture", 'STRING "llama"']);
    const sink = new BlobSink();
    await convertFiles([fixtureFile("gguf/quant.gguf")], "gguf", sink, "quant.gguf");
    expect(new Uint8Array(await sink.blob().arrayBuffer())).toEqual(new Uint8Array(readFileSync(fixturePath("gguf/quant.gguf"))));
  });

  it("report a quantized GGUF's bytes as its blocks, as the command does", async () => {
    const f32 = new BlobSink();
    await convertFiles([fixtureFile("gguf/quant.gguf")], "safetensors", f32, "f32.safetensors");
    const input = new File([f32.blob()], "f32.safetensors");
    const sink = new BlobSink();
    const done = await convertFiles([input], "gguf", sink, "q.gguf", { formatOptions: { quantize: ["Q8_0", "q4_k:Q4_K"] } });
    const written = await inspectFiles([new File([sink.blob()], "q.gguf")]);
    const blocks = written.tensors.reduce((sum, t) => sum + Number(t.stored!.split(" ")[1]), 0);
    expect(written.tensors.map((t) => t.stored!.split(" ")[0])).toEqual(["Q8_0", "Q8_0", "Q4_K", "Q8_0"]);
    expect(done.bytes).toBe(blocks);
    expect(done.bytes).toBeLessThan(input.size / 3);
  });

  it("plan the bytes a conversion writes: the selection kept, the casts applied", async () => {
    const info = await inspectFiles([fixtureFile("safetensors/mixed.safetensors")]);
    expect(plannedBytes(info, compileSettings({}))).toBe(860);
    // F32 tensors (256 + 32 bytes) halve as BF16.
    expect(plannedBytes(info, compileSettings({ cast: "F32=BF16" }))).toBe(860 - 144);
    expect(plannedBytes(info, compileSettings({ filter: "^mask$" }))).toBe(4);
  });
});

describe("sinks", () => {
  it("BlobSink keeps the bytes in order across folds, copying each chunk (the writer reuses its buffer)", async () => {
    const sink = new BlobSink("out.bin");
    const buffer = new Uint8Array(3 * 1024 * 1024);
    const chunks = Math.ceil((2 * BLOB_FOLD_BYTES) / buffer.byteLength) + 1;
    for (let k = 0; k < chunks; k++) {
      buffer.fill(k & 0xff);
      await sink.write(buffer);
    }
    await sink.close();
    const bytes = new Uint8Array(await sink.blob().arrayBuffer());
    expect(bytes.byteLength).toBe(chunks * buffer.byteLength);
    for (let k = 0; k < chunks; k++) expect(bytes[k * buffer.byteLength + 12345]).toBe(k & 0xff);
    await expect(sink.write(buffer)).rejects.toThrow(/closed output/);
  });

  it("writableSink reports a refused write as Io, naming the file, and aborts once", async () => {
    let aborts = 0;
    const sink = writableSink(
      {
        write: async () => {
          throw new Error("quota exceeded");
        },
        close: async () => {},
        abort: async () => {
          aborts++;
        },
      },
      "big.safetensors",
    );
    await expect(sink.write(new Uint8Array(1))).rejects.toThrow("big.safetensors: writing failed: quota exceeded");
    await sink.abort();
    await sink.abort();
    expect(aborts).toBe(1);
  });

  it("formatSize words sizes as the command does", () => {
    expect([formatSize(860), formatSize(6792), formatSize(3 * 1024 ** 3)]).toEqual(["860 B", "6.6 KiB", "3.0 GiB"]);
  });
});
