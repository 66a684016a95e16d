/**
 * Interop with numpy, zipfile and safetensors (fixtures/reference_npy.py): numpy's files convert
 * to exactly what `safetensors.numpy.save` writes for the same arrays; `np.load` reads ours with
 * bit-identical values; our `.npy` equals `np.save`'s and our stored `.npz` equals `np.savez`'s;
 * `zipfile` reads our ZIP64 archives; numpy refuses the hostile files we refuse.
 */
import { createHash } from "node:crypto";
import { closeSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import {
  type ByteSink,
  DTYPES,
  type Dtype,
  MemorySink,
  type TensorEntry,
  type TensorSource,
  dtypeInfo,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorByteLength,
  tensorFromBytes,
} from "@st-convert/core";
import { createFileSink } from "@st-convert/core/node";
import { type NpzWriteOptions, readNpy, readNpz, writeNpy, writeNpz } from "@st-convert/npy";
import { describeInterop, fixturePath, makeTempDir, pseudoRandomBytes, runPython, toHex } from "@st-convert/testing";
import { STRICTER_THAN_NUMPY, hostileNpy } from "./hostileNpy.js";

interface Described {
  name?: string;
  descr: string;
  shape: number[];
  hex: string | null;
  sha256: string;
}

interface Loaded extends Partial<Described> {
  ok: boolean;
  error?: string;
  kind?: "npy" | "npz";
  arrays?: Described[];
  testzip?: string | null;
  comment?: string;
  members?: { name: string; flags: number; method: number; size: number }[];
}

interface Entry {
  numpy: { ok: boolean };
  expect: { tensors?: unknown[]; error?: string };
  dtypes?: string[];
}

const manifest = JSON.parse(readFileSync(fixturePath("npy", "manifest.json"), "utf8")) as Record<string, Entry>;
const stManifest = JSON.parse(readFileSync(fixturePath("safetensors", "manifest.json"), "utf8")) as Record<string, { tensors: { dtype: string }[] }>;

/** Deterministic pseudo-random bytes; BOOL gets 0/1, which numpy keeps as they are. */
function bytesFor(seed: number, dtype: Dtype, shape: readonly number[]): Uint8Array {
  const out = pseudoRandomBytes(seed, tensorByteLength(dtype, shape));
  return dtype === "BOOL" ? out.map((b) => b & 1) : out;
}

const NUMPY_DTYPES = DTYPES.filter((d) => d.numpyName !== undefined).map((d) => d.code);
const SHAPES = [[], [0], [3], [2, 3], [1, 1, 5], [0, 4], [4, 1]];

describeInterop("npy/npz interop with numpy", (python) => {
  const { dir, cleanup } = makeTempDir();
  afterAll(cleanup);
  const load = (...paths: string[]): Loaded[] =>
    runPython(python, "reference_npy.py", ["load", ...paths])
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Loaded);
  const save = (specs: { spec: object; out: string }[]) => {
    const args = specs.flatMap(({ spec, out }, i) => {
      const path = join(dir, `spec-${i}-${Math.random().toString(36).slice(2)}.json`);
      writeFileSync(path, JSON.stringify(spec));
      return [path, out];
    });
    runPython(python, "reference_npy.py", ["save", ...args]);
  };
  const specOf = async (t: TensorEntry) => ({ name: t.name, dtype: t.dtype, shape: t.shape, hex: toHex(await readTensorBytes(t)) });
  const bytesTo = async (path: string, write: (sink: ByteSink) => Promise<void>) => {
    const sink = new MemorySink();
    await write(sink);
    writeFileSync(path, sink.bytes());
  };

  it("numpy's files convert to exactly what safetensors.numpy.save writes for the arrays np.load returns", async () => {
    // np.load drops the byte order of a big-endian void (ml_bf16_be) and cannot read ml_f8_e5m2 at all.
    const files = Object.entries(manifest).filter(([name, e]) => e.numpy.ok && e.expect.tensors !== undefined && name !== "ml_bf16_be.npy");
    expect(files.length).toBeGreaterThan(80);
    const jobs = files.map(([name, entry], i) => ({ in: fixturePath("npy", name), out: join(dir, `theirs-${i}.safetensors`), dtypes: entry.dtypes ?? [] }));
    writeFileSync(join(dir, "jobs.json"), JSON.stringify(jobs));
    runPython(python, "reference_npy.py", ["to_safetensors", join(dir, "jobs.json")]);
    for (const [i, [name, entry]] of files.entries()) {
      const source = readFileSync(fixturePath("npy", name));
      const read: TensorSource = name.endsWith(".npz")
        ? await readNpz(source, { dtypes: entry.dtypes })
        : await readNpy(source, { name: name.slice(0, -4), dtypes: entry.dtypes });
      expect(toHex(await serializeSafetensors(read)), name).toBe(toHex(readFileSync(jobs[i]!.out)));
    }
  }, 120_000);

  it("np.load(allow_pickle=False) reads our .npz (every mode) and .npy with bit-identical values, and zipfile finds every CRC right", async () => {
    const sources = Object.keys(stManifest).filter((n) => stManifest[n]!.tensors.every((t) => t.dtype !== "F4" && !t.dtype.startsWith("F6_")));
    const modes: Record<string, NpzWriteOptions> = {
      stored: {},
      "one pass": { crcPrePass: false },
      compressed: { compress: true },
      fflate: { compress: true, codec: "fflate" },
    };
    const expected: { path: string; source: TensorSource; kind: "npy" | "npz" }[] = [];
    for (const name of sources) {
      const source = await readSafetensors(readFileSync(fixturePath("safetensors", name)));
      for (const [mode, options] of Object.entries(modes)) {
        const path = join(dir, `${name}.${mode}.npz`);
        await bytesTo(path, (sink) => writeNpz(source, sink, options));
        expected.push({ path, source, kind: "npz" });
      }
      if (source.tensors.length === 1) {
        const path = join(dir, `${name}.npy`);
        await bytesTo(path, (sink) => writeNpy(source, sink));
        expected.push({ path, source, kind: "npy" });
      }
    }
    const views = load(...expected.map((e) => e.path));
    for (const [i, { path, source, kind }] of expected.entries()) {
      const view = views[i]!;
      expect(view.ok, `${path}: ${view.error}`).toBe(true);
      const arrays = kind === "npy" ? [view as Described] : view.arrays!;
      expect(arrays.length, path).toBe(source.tensors.length);
      for (const [j, t] of source.tensors.entries()) {
        const a = arrays[j]!;
        if (kind === "npz") expect(a.name).toBe(t.name);
        expect(a.shape, path).toEqual(t.shape);
        const bytes = await readTensorBytes(t);
        expect(a.sha256, `${path} ${t.name}`).toBe(createHash("sha256").update(bytes).digest("hex"));
        const numpyType = t.dtype === "BF16" || t.dtype.startsWith("F8_") ? `|V${dtypeInfo(t.dtype).bits / 8}` : undefined;
        if (numpyType !== undefined) expect(a.descr).toBe(numpyType);
      }
      if (kind === "npz") {
        expect(view.testzip, path).toBeNull();
        if (source.metadata !== null) expect(JSON.parse(view.comment!).metadata).toEqual({ ...source.metadata });
      }
    }
  }, 120_000);

  it("our .npy is byte-identical to np.save's, for every dtype numpy has and every shape", async () => {
    const cases: { tensor: TensorEntry; ours: string; theirs: string }[] = [];
    for (const [i, dtype] of NUMPY_DTYPES.entries()) {
      // np.save writes float8_e5m2 as '<f1', which np.load cannot read; we write '<V1'.
      if (dtype === "F8_E5M2") continue;
      for (const [k, shape] of SHAPES.entries()) {
        const tensor = tensorFromBytes({ name: `t${i}_${k}`, dtype, shape }, bytesFor(i * 10 + k, dtype, shape));
        cases.push({ tensor, ours: join(dir, `ours-${i}-${k}.npy`), theirs: join(dir, `theirs-${i}-${k}.npy`) });
      }
    }
    save(await Promise.all(cases.map(async (c) => ({ spec: { mode: "npy", arrays: [await specOf(c.tensor)] }, out: c.theirs }))));
    for (const c of cases) {
      await bytesTo(c.ours, (sink) => writeNpy({ metadata: null, tensors: [c.tensor] }, sink));
      expect(toHex(readFileSync(c.ours)), `${c.tensor.dtype} [${c.tensor.shape}]`).toBe(toHex(readFileSync(c.theirs)));
    }
    expect(cases.length).toBe(18 * SHAPES.length);
  }, 120_000);

  it("into a file, tensors past 1 MiB are written in one pass with the CRC filled in after: np.savez's bytes", async () => {
    const tensors = [
      tensorFromBytes({ name: "small", dtype: "I64", shape: [3] }, bytesFor(1, "I64", [3])),
      tensorFromBytes({ name: "big", dtype: "F32", shape: [700, 600] }, bytesFor(2, "F32", [700, 600])),
      tensorFromBytes({ name: "bigger", dtype: "U8", shape: [3, 1 << 20] }, bytesFor(3, "U8", [3, 1 << 20])),
    ];
    const theirs = join(dir, "savez-big.npz");
    save([{ spec: { mode: "savez", arrays: await Promise.all(tensors.map(specOf)) }, out: theirs }]);
    const ours = join(dir, "ours-big.npz");
    const sink = await createFileSink(ours);
    expect(sink.patch).toBeDefined();
    await writeNpz({ metadata: null, tensors }, sink);
    await sink.close();
    expect(createHash("sha256").update(readFileSync(ours)).digest("hex")).toBe(createHash("sha256").update(readFileSync(theirs)).digest("hex"));
  });

  it("our stored .npz equals np.savez's, to a file (default) and to a pipe (crcPrePass: false); numpy's compressed .npz reads back the same", async () => {
    const tensors = NUMPY_DTYPES.filter((d) => d !== "F8_E5M2").map((dtype, i) => {
      const shape = SHAPES[i % SHAPES.length]!;
      return tensorFromBytes({ name: [`layer.${i}.weight`, `a/b${i}`, `é${i}`, `x${i}.npy`][i % 4]!, dtype, shape }, bytesFor(100 + i, dtype, shape));
    });
    const arrays = await Promise.all(tensors.map(specOf));
    const paths = {
      file: join(dir, "savez.npz"),
      pipe: join(dir, "savez-pipe.npz"),
      compressed: join(dir, "savez-compressed.npz"),
      compressedPipe: join(dir, "savez-compressed-pipe.npz"),
    };
    save([
      { spec: { mode: "savez", arrays }, out: paths.file },
      { spec: { mode: "savez", stream: true, arrays }, out: paths.pipe },
      { spec: { mode: "savez_compressed", arrays }, out: paths.compressed },
      { spec: { mode: "savez_compressed", stream: true, arrays }, out: paths.compressedPipe },
    ]);
    const declarations = tensors
      .filter((t) => t.dtype === "BF16" || t.dtype.startsWith("F8_"))
      .map((t) => `${t.name}:V${dtypeInfo(t.dtype).bits / 8}=${t.dtype}`);
    const ours = async (options: NpzWriteOptions) => {
      const sink = new MemorySink();
      await writeNpz({ metadata: null, tensors }, sink, options);
      return sink.bytes();
    };
    // Void dtypes make us write a comment, which np.savez does not: compare without them.
    const plain = tensors.filter((t) => t.dtype !== "BF16" && !t.dtype.startsWith("F8_"));
    const plainArrays = await Promise.all(plain.map(specOf));
    const plainPaths = { file: join(dir, "plain.npz"), pipe: join(dir, "plain-pipe.npz") };
    save([
      { spec: { mode: "savez", arrays: plainArrays }, out: plainPaths.file },
      { spec: { mode: "savez", stream: true, arrays: plainArrays }, out: plainPaths.pipe },
    ]);
    const plainOurs = async (options: NpzWriteOptions) => {
      const sink = new MemorySink();
      await writeNpz({ metadata: null, tensors: plain }, sink, options);
      return sink.bytes();
    };
    expect(toHex(await plainOurs({}))).toBe(toHex(readFileSync(plainPaths.file)));
    expect(toHex(await plainOurs({ crcPrePass: false }))).toBe(toHex(readFileSync(plainPaths.pipe)));
    for (const path of Object.values(paths)) {
      const back = await readNpz(readFileSync(path), { dtypes: declarations });
      expect(back.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(tensors.map((t) => [t.name, t.dtype, t.shape]));
      for (const [i, t] of back.tensors.entries()) expect(toHex(await readTensorBytes(t))).toBe(arrays[i]!.hex);
    }
    // And numpy reads ours with the comment in place.
    const withVoids = join(dir, "ours-voids.npz");
    writeFileSync(withVoids, await ours({}));
    const [view] = load(withVoids);
    expect(view!.ok).toBe(true);
    expect(view!.arrays!.map((a) => a.hex)).toEqual(arrays.map((a) => a.hex));
  }, 120_000);

  it("zipfile reads our ZIP64 archive: a 4.5 GiB member (a sparse file) and a member past 4 GiB", async () => {
    const GIB = 1024 ** 3;
    const zero = new Uint8Array(4 * 1024 * 1024);
    const size = 4.5 * GIB;
    const big: TensorEntry = {
      name: "big",
      dtype: "U8",
      shape: [size],
      byteLength: size,
      async *chunks() {
        for (let at = 0; at < size; at += zero.byteLength) yield zero;
      },
    };
    const path = join(dir, "zip64.npz");
    const fd = openSync(path, "w");
    let offset = 0;
    // Writes everything but the shared zero buffer, whose bytes the sparse file already reads as zeros.
    const sink: ByteSink = {
      async write(chunk) {
        if (chunk.buffer !== zero.buffer) writeSync(fd, chunk, 0, chunk.byteLength, offset);
        offset += chunk.byteLength;
      },
      async close() {},
      async abort() {},
    };
    const after = tensorFromBytes({ name: "after", dtype: "I16", shape: [2] }, Uint8Array.of(1, 0, 0xff, 0xff));
    await writeNpz({ metadata: { k: "v" }, tensors: [big, after] }, sink);
    writeSync(fd, new Uint8Array(0), 0, 0, offset);
    closeSync(fd);
    const info = JSON.parse(runPython(python, "reference_npy.py", ["zipinfo", path])) as {
      members: { name: string; size: number; compressed: number; offset: number; head: string }[];
      comment: string;
      small: Record<string, Described>;
    };
    expect(info.members.map((m) => [m.name, m.size, m.compressed])).toEqual([
      ["big.npy", size + 128, size + 128],
      ["after.npy", 132, 132],
    ]);
    expect(info.members[1]!.offset).toBeGreaterThan(2 ** 32);
    expect(info.members[0]!.head.startsWith("934e554d5059")).toBe(true);
    expect(info.small.after).toMatchObject({ descr: "<i2", shape: [2], hex: "0100ffff" });
    expect(JSON.parse(info.comment).metadata).toEqual({ k: "v" });
  }, 120_000);

  it("numpy refuses the hostile npy files we refuse", () => {
    const paths = hostileNpy.map(([, bytes], i) => {
      const path = join(dir, `hostile-${i}.npy`);
      writeFileSync(path, bytes);
      return path;
    });
    const views = load(...paths);
    const accepted = hostileNpy.filter((_, i) => views[i]!.ok).map(([attack]) => attack);
    expect(accepted).toEqual(Object.keys(STRICTER_THAN_NUMPY));
  });
});
