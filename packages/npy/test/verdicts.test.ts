/**
 * Files at the edges of the npz container, built byte by byte and named after what they do: we
 * read what np.load reads and refuse what it refuses, or refuse by design where a file would mean
 * two things (each such case says why). The interop part hands the same bytes to np.load.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, bytesSource, isStConvertError, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { readNpy, readNpz, writeNpy, writeNpz } from "@st-convert/npy";
import { describeInterop, makeTempDir, runPython } from "@st-convert/testing";
import { npyFile, smallNpy, zipOf } from "./build.js";

const npy = smallNpy();
const text = (s: string) => new TextEncoder().encode(s);
const cat = (...parts: Uint8Array[]) => new Uint8Array(Buffer.concat(parts));
const flipped = (bytes: Uint8Array, at: number) => bytes.map((b, i) => (i === at ? b ^ 0x01 : b));

/** What np.load does with the bytes: reads them (as an array or an archive) or refuses them. */
type NumpyVerdict = "reads npy" | "reads npz" | "refuses";

interface Case {
  /** What the file does. */
  attack: string;
  bytes: Uint8Array;
  kind: "npy" | "npz";
  /** Our verdict: the tensor names we give, or the code we refuse with. */
  ours: string[] | string;
  numpy: NumpyVerdict;
  /** Why we differ from numpy, where we do. */
  why?: string;
  /** Void declarations our reader is given. */
  dtypes?: string[];
}

/** An npy header of `dims` dimensions of `dim` each, float32, with the data it needs. */
const rankNpy = (dims: number, dim: number) =>
  npyFile(`{'descr': '<f4', 'fortran_order': False, 'shape': (${new Array(dims).fill(dim).join(", ")}), }`, dim === 0 ? 0 : 4);
const header = (descr: string, shape: string) => `{'descr': ${descr}, 'fortran_order': False, 'shape': ${shape}, }`;
const bf16be = npyFile(header("'>V2'", "(2,)"), Uint8Array.of(0x3f, 0x80, 0x40, 0x00));

const maxComment = new Uint8Array(0xffff).fill(0x78);

const cases: Case[] = [
  // Item 3: decided by content, as np.load decides.
  {
    attack: "an .npy followed by a zip archive (a polyglot), read as npz",
    bytes: cat(npy, zipOf([{ name: "other.npy", content: npyFile("{'descr': '<i2', 'fortran_order': False, 'shape': (1,), }", 2) }])),
    kind: "npz",
    ours: "AmbiguousFormat",
    numpy: "reads npy",
    why: "valid as two formats: np.load reads the array, zipfile and every unzip the archive",
  },
  {
    attack: "an .npy followed by a zip archive (a polyglot), read as npy",
    bytes: cat(npy, zipOf([{ name: "other.npy", content: npyFile("{'descr': '<i2', 'fortran_order': False, 'shape': (1,), }", 2) }])),
    kind: "npy",
    ours: "AmbiguousFormat",
    numpy: "reads npy",
    why: "valid as two formats: np.load reads the array, zipfile and every unzip the archive",
  },
  {
    attack: "junk bytes before a zip archive",
    bytes: cat(text("junk"), zipOf([{ name: "a.npy", content: npy }])),
    kind: "npz",
    ours: "BadZipFile",
    numpy: "refuses",
  },
  {
    attack: "a zip archive before another one (zipfile reads the last)",
    bytes: cat(zipOf([{ name: "first.npy", content: npy }]), zipOf([{ name: "second.npy", content: npy }])),
    kind: "npz",
    ours: ["second"],
    numpy: "reads npz",
  },
  {
    attack: "an .npy given as npz, with no archive in it",
    bytes: npy,
    kind: "npz",
    ours: "BadZipFile",
    numpy: "reads npy",
    why: "an .npy, not an archive: read it as npy",
  },
  // Item 4: names cut at NUL, as zipfile cuts them.
  {
    attack: "members w.npy and w.npy\\0y, one name for zipfile",
    bytes: zipOf([
      { name: "w.npy", content: npy },
      { name: "w.npy\0y", content: npy },
    ]),
    kind: "npz",
    ours: "DuplicateKey",
    numpy: "reads npz",
    why: "numpy lists w twice and returns the second member for both; which one is meant is not for us to guess",
  },
  { attack: "a member a\\0.npy, which zipfile calls a", bytes: zipOf([{ name: "a\0.npy", content: npy }]), kind: "npz", ours: ["a"], numpy: "reads npz" },
  {
    attack: "members x.npy and x.npy.npy, which np.load's lookup reads as one",
    bytes: zipOf([
      { name: "x.npy", content: npy },
      { name: "x.npy.npy", content: npy },
    ]),
    kind: "npz",
    ours: "DuplicateKey",
    numpy: "reads npz",
    why: "np.load gives the member x.npy for both x and x.npy, so x.npy.npy is unreachable to it",
  },
  // Item 5: nothing dropped silently.
  {
    attack: "a flipped byte in a member's npy magic (bad CRC-32)",
    bytes: zipOf([{ name: "a.npy", content: flipped(npy, 1), crc: crc32(npy) }]),
    kind: "npz",
    ours: "BadCrc",
    numpy: "refuses",
  },
  {
    attack: "a member named a.npy that holds no npy array (intact CRC-32)",
    bytes: zipOf([{ name: "a.npy", content: text("not an array") }]),
    kind: "npz",
    ours: "BadMagic",
    numpy: "reads npz",
    why: "np.load returns its bytes under the name a; a member named .npy that is not one is a broken archive",
  },
  {
    attack: "an archive whose one member is not an array",
    bytes: zipOf([{ name: "readme.txt", content: text("hello") }]),
    kind: "npz",
    ours: "NoArrays",
    numpy: "reads npz",
    why: "np.load returns the bytes; a conversion would write a file with no tensor",
  },
  {
    attack: "a PyTorch checkpoint's zip given as npz",
    bytes: zipOf([
      { name: "archive/data.pkl", content: Uint8Array.of(0x80, 2, 0x7d, 0x71, 0, 0x2e) },
      { name: "archive/version", content: text("3\n") },
    ]),
    kind: "npz",
    ours: "NoArrays",
    numpy: "reads npz",
    why: "np.load returns the pickle's bytes; nothing in it is an array",
  },
  {
    attack: "an array beside a text member",
    bytes: zipOf([
      { name: "a.npy", content: npy },
      { name: "notes.txt", content: text("x") },
    ]),
    kind: "npz",
    ours: ["a"],
    numpy: "reads npz",
  },
  // Item 6: shapes numpy cannot make.
  {
    attack: "a member of shape (2^32, 2^32, 0)",
    bytes: zipOf([{ name: "a.npy", content: npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0), }") }]),
    kind: "npz",
    ours: "InvalidShape",
    numpy: "refuses",
  },
  // Item 8: the end record found as far back as zipfile looks.
  {
    attack: "a 65,535-byte comment followed by one stray byte",
    bytes: cat(zipOf([{ name: "a.npy", content: npy }], { comment: maxComment }), Uint8Array.of(0)),
    kind: "npz",
    ours: ["a"],
    numpy: "reads npz",
  },
  {
    attack: "a 65,535-byte comment followed by two stray bytes (past zipfile's search)",
    bytes: cat(zipOf([{ name: "a.npy", content: npy }], { comment: maxComment }), Uint8Array.of(0, 0)),
    kind: "npz",
    ours: "BadZipFile",
    numpy: "refuses",
  },
  // The differential fuzzer's classes (docs/security.md), named after them.
  { attack: "npy-rank-past-64: 65 dimensions", bytes: rankNpy(65, 1), kind: "npy", ours: "InvalidShape", numpy: "refuses" },
  { attack: "npy-rank-past-64: 65 dimensions, empty", bytes: rankNpy(65, 0), kind: "npy", ours: "InvalidShape", numpy: "refuses" },
  { attack: "npy-rank-past-64: 64 dimensions, numpy's most", bytes: rankNpy(64, 1), kind: "npy", ours: ["a"], numpy: "reads npy" },
  {
    attack: "npy-rank-past-64: a member of 65 dimensions",
    bytes: zipOf([{ name: "a.npy", content: rankNpy(65, 1) }]),
    kind: "npz",
    ours: "InvalidShape",
    numpy: "refuses",
  },
  {
    attack: "npy-byte-order-on-void: '>V2' declared BF16",
    bytes: bf16be,
    kind: "npy",
    ours: "UnsupportedDtype",
    numpy: "reads npy",
    dtypes: ["V2=BF16"],
    why: "numpy returns the bytes unswapped ('>V2' is '|V2'), while ml_dtypes writes a big-endian bfloat16 array so: either reading gives a wrong tensor for one of them",
  },
  {
    attack: "npy-byte-order-on-void: a '>V2' member declared BF16",
    bytes: zipOf([{ name: "a.npy", content: bf16be }]),
    kind: "npz",
    ours: "UnsupportedDtype",
    numpy: "reads npz",
    dtypes: ["V2=BF16"],
    why: "numpy returns the bytes unswapped ('>V2' is '|V2'), while ml_dtypes writes a big-endian bfloat16 array so: either reading gives a wrong tensor for one of them",
  },
  {
    attack: "npy-byte-order-on-void: '>V1' declared F8_E4M3 (one byte: nothing to swap)",
    bytes: npyFile(header("'>V1'", "(2,)"), Uint8Array.of(0x38, 0x40)),
    kind: "npy",
    ours: ["a"],
    numpy: "reads npy",
    dtypes: ["V1=F8_E4M3"],
  },
  {
    attack: "npy-byte-order-on-void: an empty '>V2' declared BF16 (no values to swap)",
    bytes: npyFile(header("'>V2'", "(0,)")),
    kind: "npy",
    ours: ["a"],
    numpy: "reads npy",
    dtypes: ["V2=BF16"],
  },
  {
    attack: "npy-subarray-descr-from-a-file: '6i4' of shape (12,) holding 12 int32",
    bytes: npyFile(header("'6i4'", "(12,)"), 48),
    kind: "npy",
    ours: "UnsupportedDtype",
    numpy: "reads npy",
    why: "numpy.fromfile reads the 12 int32 from a file on disk, while the same bytes from a stream or an npz member are refused: numpy itself gives the file two verdicts",
  },
  {
    attack: "npy-subarray-descr-from-a-file: ('<f4', (2,)) of shape (3, 2) in Fortran order, holding 6 float32",
    bytes: npyFile("{'descr': ('<f4', (2,)), 'fortran_order': True, 'shape': (3, 2), }", 24),
    kind: "npy",
    ours: "UnsupportedDtype",
    numpy: "reads npy",
    why: "numpy.fromfile reads the 6 float32 from a file on disk, while the same bytes from a stream or an npz member are refused: numpy itself gives the file two verdicts",
  },
  {
    attack: "npy-subarray-descr-from-a-file: the same '6i4' as an npz member",
    bytes: zipOf([{ name: "a.npy", content: npyFile(header("'6i4'", "(12,)"), 48) }]),
    kind: "npz",
    ours: "UnsupportedDtype",
    numpy: "refuses",
  },
  {
    attack: "npz-one-name-array-and-bytes: members w (an array) and w (bytes)",
    bytes: zipOf([
      { name: "w", content: npy },
      { name: "w", content: text("not an array") },
    ]),
    kind: "npz",
    ours: "DuplicateKey",
    numpy: "reads npz",
    why: "numpy lists w twice and returns the last member's bytes for both: the array is unreachable to it",
  },
  {
    attack: "npz-one-name-array-and-bytes: members w (bytes) and w (an array)",
    bytes: zipOf([
      { name: "w", content: text("not an array") },
      { name: "w", content: npy },
    ]),
    kind: "npz",
    ours: "DuplicateKey",
    numpy: "reads npz",
    why: "numpy lists w twice and returns the last member's array for both; a name given twice is refused, as everywhere",
  },
  {
    attack: "npz-one-name-array-and-bytes: an array beside two text members of one name",
    bytes: zipOf([
      { name: "a.npy", content: npy },
      { name: "notes.txt", content: text("x") },
      { name: "notes.txt", content: text("y") },
    ]),
    kind: "npz",
    ours: ["a"],
    numpy: "reads npz",
  },
];

async function verdict(c: Case, options: { maxKeptBytes?: number } = {}): Promise<string[] | string> {
  try {
    const source = bytesSource(c.bytes, `case.${c.kind}`);
    const file = c.kind === "npy" ? await readNpy(source, { name: "a", dtypes: c.dtypes }) : await readNpz(source, { ...options, dtypes: c.dtypes });
    for (const t of file.tensors) await readTensorBytes(t);
    return file.tensors.map((t) => t.name);
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    expect(error.file).toBe(`case.${c.kind}`);
    return error.code;
  }
}

describe("npz edges, byte by byte", () => {
  it.each(cases.map((c) => [c.attack, c] as const))("%s", async (_attack, c) => {
    expect(await verdict(c)).toEqual(c.ours);
    // Members read from the source rather than kept from the blocks that located them: the same verdict.
    if (c.kind === "npz") expect(await verdict(c, { maxKeptBytes: 0 })).toEqual(c.ours);
  });

  it("says why it refuses on purpose what np.load reads: a big-endian void, a subarray descr", async () => {
    await expect(readNpy(bf16be, { dtypes: ["V2=BF16"] })).rejects.toThrow(/'>V2' is raw void marked big-endian: numpy drops the mark.*ml_dtypes/);
    await expect(readNpy(npyFile(header("'6i4'", "(12,)"), 48))).rejects.toThrow(/subarray of 6 elements per item.*np\.load reads it two ways/);
  });

  it("says why an archive holds nothing to convert, naming a PyTorch checkpoint", async () => {
    const torch = cases.find((c) => c.attack.startsWith("a PyTorch"))!;
    await expect(readNpz(bytesSource(torch.bytes, "model.npz"))).rejects.toThrow(/no \.npy members.*PyTorch checkpoint \("archive\/data\.pkl"\)/);
  });

  it("checks a broken member's CRC-32 before judging it, kept in memory or read from the source", async () => {
    // The header is garbage because one byte flipped: BadCrc, not InvalidHeader.
    const broken = npy.slice();
    broken[15] = 0x28;
    const archive = zipOf([{ name: "a.npy", content: broken, crc: crc32(npy) }]);
    for (const maxKeptBytes of [undefined, 0]) {
      await expect(readNpz(bytesSource(archive, "a.npz"), { maxKeptBytes })).rejects.toMatchObject({ code: "BadCrc", tensor: "a", file: "a.npz" });
    }
  });

  it("refuses a comment whose dtype cannot describe a member, naming the input and the tensor", async () => {
    const v2 = npyFile("{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }", 6);
    for (const code of ["F32", "F4", "U8"]) {
      const comment = text(JSON.stringify({ format: "st-convert.npz", version: 1, metadata: null, dtypes: { w: code } }));
      const archive = zipOf([{ name: "w.npy", content: v2 }], { comment });
      await expect(readNpz(bytesSource(archive, "in.npz"))).rejects.toMatchObject({ code: "InvalidMetadata", file: "in.npz", tensor: "w" });
    }
    const comment = text(JSON.stringify({ format: "st-convert.npz", version: 1, metadata: null, dtypes: { w: "BF16" } }));
    const file = await readNpz(bytesSource(zipOf([{ name: "w.npy", content: v2 }], { comment }), "in.npz"));
    expect(file.tensors[0]).toMatchObject({ dtype: "BF16", shape: [3], byteLength: 6 });
  });
});

describe("writers refuse what numpy would read otherwise, before writing a byte", () => {
  const one = (name: string, dtype: "U8" | "F32" = "U8", shape: number[] = [1]) =>
    tensorFromBytes({ name, dtype, shape }, new Uint8Array(shape.reduce((n, d) => n * d, dtype === "U8" ? 1 : 4)));
  const write = async (tensors: TensorEntry[], kind: "npy" | "npz" = "npz") => {
    const sink = new MemorySink();
    try {
      await (kind === "npz" ? writeNpz : writeNpy)({ metadata: null, tensors }, sink);
    } finally {
      expect(sink.length).toBe(0);
    }
  };

  it.each([
    ["a name holding NUL (zipfile would cut it)", [one("w\0x")], "InvalidName"],
    ["x beside x.npy (np.load reads x.npy as x's member)", [one("x"), one("x.npy")], "DuplicateKey"],
    ["a\\b beside a/b (one member for zipfile on Windows)", [one("a\\b"), one("a/b")], "DuplicateKey"],
  ])("refuses %s", async (_what, tensors, code) => {
    await expect(write(tensors)).rejects.toMatchObject({ code });
  });

  const empty = (shape: number[]): TensorEntry => ({
    name: "e",
    dtype: "U8",
    shape,
    byteLength: 0,
    async *chunks() {},
  });

  it.each([[[0, 2 ** 32, 2 ** 32]], [[2 ** 32, 2 ** 32, 0]]])(
    "refuses U8 %j, an array numpy refuses to make ('array is too big'), as npz and as npy",
    async (shape) => {
      await expect(write([empty(shape)])).rejects.toMatchObject({ code: "Unsupported", tensor: "e" });
      await expect(write([empty(shape)], "npy")).rejects.toMatchObject({ code: "Unsupported", tensor: "e" });
    },
  );

  it("writers-rank-past-64: refuses a tensor of 65 dimensions, as npz and as npy, naming it; writes 64", async () => {
    const ones = (n: number) => tensorFromBytes({ name: "deep", dtype: "U8", shape: new Array<number>(n).fill(1) }, Uint8Array.of(7));
    await expect(write([one("a"), ones(65)])).rejects.toMatchObject({ code: "Unsupported", tensor: "deep" });
    await expect(write([ones(65)], "npy")).rejects.toMatchObject({ code: "Unsupported", tensor: "deep" });
    const sink = new MemorySink();
    await writeNpz({ metadata: null, tensors: [ones(64)] }, sink);
    expect((await readNpz(sink.bytes())).tensors[0]!.shape).toHaveLength(64);
  });

  it("writes an empty U8 [0, 2^31, 2^31], which numpy can make", async () => {
    const sink = new MemorySink();
    await writeNpz({ metadata: null, tensors: [empty([0, 2 ** 31, 2 ** 31])] }, sink);
    const back = await readNpz(sink.bytes());
    expect(back.tensors[0]!.shape).toEqual([0, 2 ** 31, 2 ** 31]);
  });
});

describeInterop("npz edges against np.load", (python) => {
  const { dir, cleanup } = makeTempDir();
  afterAll(cleanup);

  it("np.load reads or refuses each file as the table says, and we differ only where it says why", () => {
    const paths = cases.map((c, i) => {
      const path = join(dir, `case-${i}.${c.kind}`);
      writeFileSync(path, c.bytes);
      return path;
    });
    const views = runPython(python, "reference_npy.py", ["load", ...paths])
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { ok: boolean; kind?: string; error?: string; arrays?: { name: string }[] });
    const seen = views.map((v): NumpyVerdict => (!v.ok ? "refuses" : v.kind === "npy" ? "reads npy" : "reads npz"));
    expect(cases.map((c, i) => [c.attack, seen[i]])).toEqual(cases.map((c) => [c.attack, c.numpy]));
    for (const [i, c] of cases.entries()) {
      // Where numpy reads an archive and so do we, it lists the same names.
      if (c.numpy === "reads npz" && Array.isArray(c.ours)) {
        expect(
          views[i]!.arrays!.map((a) => a.name).filter((n) => !n.endsWith(".txt")),
          c.attack,
        ).toEqual(c.ours);
      }
      const agree = (c.numpy === "refuses") === (typeof c.ours === "string");
      if (!agree) expect(c.why, `${c.attack}: we differ from numpy and say why`).toBeDefined();
    }
    // numpy sees the NUL-named members as one name, twice.
    const nul = cases.findIndex((c) => c.attack.startsWith("members w.npy"));
    expect(views[nul]!.arrays!.map((a) => a.name)).toEqual(["w", "w"]);
  });
});
