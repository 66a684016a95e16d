/**
 * The distributed checkpoint reader against folders torch itself saved from 2 and 4 ranks
 * (fixtures/dcp, made by fixtures/gen_dcp.py): every tensor consolidates to the bytes
 * `dcp_to_torch_save` gives; and hostile folders, built byte by byte and named after the attack,
 * each refused with one coded line naming the tensor and the rule.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, readTensorBytes } from "@st-convert/core";
import { openFileSource } from "@st-convert/core/node";
import { type DcpCheckpoint, type DcpReadOptions, decodeDcpMetadata, pythonFloat, readDcp, sniffDcpMetadata, writeDcp } from "@st-convert/torch";
import { fixturePath } from "@st-convert/testing";
import { type TensorSpec, dcpFolder, iota, tensorRecord } from "./dcpBuild.js";

const work = mkdtempSync(join(tmpdir(), "st-convert-dcp-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Expected {
  items: ({ name: string; dtype: string; shape: number[]; sha256: string; hex: string } | { name: string; value: string })[];
}
const manifest = JSON.parse(readFileSync(fixturePath("dcp", "manifest.json"), "utf8")) as Record<string, Expected>;

const opened: { close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const file of opened) await file.close();
});

async function openDcp(dir: string, options: DcpReadOptions = {}): Promise<DcpCheckpoint> {
  const metadata = await openFileSource(join(dir, ".metadata"));
  opened.push(metadata);
  return readDcp(
    metadata,
    async (name) => {
      const file = await openFileSource(join(dir, name));
      opened.push(file);
      return file;
    },
    options,
  );
}

async function hexOf(t: TensorEntry, chunkSize?: number): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const chunk of t.chunks({ chunkSize })) parts.push(new Uint8Array(chunk));
  return Buffer.concat(parts).toString("hex");
}

describe("folders torch saved from several ranks", () => {
  for (const [name, expected] of Object.entries(manifest)) {
    for (const rowGroupSize of [undefined, 1, 40]) {
      it(`${name}: every tensor is dcp_to_torch_save's bytes (row groups of ${rowGroupSize ?? "the default"} bytes)`, async () => {
        const warnings: string[] = [];
        const checkpoint = await openDcp(fixturePath("dcp", name), { rowGroupSize, onWarning: (w) => warnings.push(w) });
        const tensors = expected.items.filter((i) => "hex" in i);
        expect(checkpoint.tensors.map((t) => t.name).sort()).toEqual(tensors.map((t) => t.name).sort());
        for (const item of tensors) {
          const t = checkpoint.tensors.find((x) => x.name === item.name)!;
          expect([t.dtype, t.shape], item.name).toEqual([item.dtype, item.shape]);
          expect(await hexOf(t, 8), item.name).toBe(item.hex);
          expect(await hexOf(t), item.name).toBe(item.hex);
        }
        // Plain values carried as Python's str() of them (the manifest holds their repr); the rest skipped with a notice.
        const others = expected.items.filter((i): i is { name: string; value: string } => "value" in i);
        for (const item of others) {
          const carried = checkpoint.metadata[item.name];
          if (/^[\d.e+-]+$/.test(item.value)) expect(carried, item.name).toBe(item.value);
          else if (item.value.startsWith("'")) expect(carried, item.name).toBe(item.value.slice(1, -1));
          else {
            expect(carried, item.name).toBeUndefined();
            expect(warnings.some((w) => w.includes(JSON.stringify(item.name)))).toBe(true);
          }
        }
        expect(checkpoint.others.map((o) => o.name)).toEqual(others.map((o) => o.name));
      });
    }
  }

  it("ranks2: a selection leaves tensors out before any of their chunks is opened", async () => {
    const checkpoint = await openDcp(fixturePath("dcp", "ranks2"), { include: (n) => n.startsWith("model.") && n !== "model.mask" });
    expect(checkpoint.tensors.map((t) => t.name)).not.toContain("model.mask");
    expect(checkpoint.tensors.every((t) => t.name.startsWith("model."))).toBe(true);
    expect(checkpoint.others).toEqual([]);
  });

  it("recognises a .metadata file by its first bytes, and nothing else", () => {
    const head = readFileSync(fixturePath("dcp", "ranks2", ".metadata")).subarray(0, 4096);
    expect(sniffDcpMetadata(head)).toBe(true);
    expect(sniffDcpMetadata(readFileSync(fixturePath("dcp", "ranks2", "__0_0.distcp")).subarray(0, 4096))).toBe(false);
  });

  it("decodes the metadata's structure: chunks located in the rank files", () => {
    const decoded = decodeDcpMetadata(readFileSync(fixturePath("dcp", "ranks4", ".metadata")));
    const grid = decoded.items.find((i) => i.name === "grid");
    expect(grid?.kind).toBe("tensor");
    if (grid?.kind !== "tensor") return;
    expect(grid.chunks.map((c) => [c.offsets, c.sizes, c.storage.relativePath])).toEqual([
      [[0, 0], [3, 4], "__0_0.distcp"],
      [[0, 4], [3, 4], "__1_0.distcp"],
      [[3, 0], [3, 4], "__2_0.distcp"],
      [[3, 4], [3, 4], "__3_0.distcp"],
    ]);
    expect(decoded.version).toBe("1.0.0");
  });
});

describe("Python's repr of a float, for carried values", () => {
  const cases: [number, string][] = [
    [0.001, "0.001"],
    [1e-5, "1e-05"],
    [1.25, "1.25"],
    [5, "5.0"],
    [1e16, "1e+16"],
    [123456789012345.6, "123456789012345.6"],
    [-0, "-0.0"],
    [Number.POSITIVE_INFINITY, "inf"],
    [Number.NaN, "nan"],
  ];
  for (const [x, repr] of cases) it(`${x} → ${repr}`, () => expect(pythonFloat(x)).toBe(repr));
});

const W: TensorSpec = {
  name: "w",
  size: [4, 2],
  chunks: [
    { offsets: [0, 0], sizes: [2, 2] },
    { offsets: [2, 0], sizes: [2, 2] },
  ],
};

let folders = 0;
async function refusal(tensors: TensorSpec[], options: Parameters<typeof dcpFolder>[2] = {}): Promise<{ code: string | undefined; message: string }> {
  const dir = dcpFolder(join(work, `case${folders++}`), tensors, options);
  try {
    const checkpoint = await openDcp(dir);
    for (const t of checkpoint.tensors) await readTensorBytes(t);
    return { code: undefined, message: "read" };
  } catch (error) {
    return { code: (error as { code?: string }).code, message: (error as Error).message };
  }
}

describe("hostile folders", () => {
  it("a well-formed folder built here reads (the builder's baseline)", async () => {
    const dir = dcpFolder(join(work, "baseline"), [W]);
    const checkpoint = await openDcp(dir);
    expect(Buffer.from(await readTensorBytes(checkpoint.tensors[0]!))).toEqual(Buffer.concat([iota(4), iota(4)]));
  });

  const cases: [string, TensorSpec[], string, RegExp][] = [
    ["a hole no rank saved", [{ ...W, chunks: [W.chunks[0]!] }], "ChunksDoNotTile", /hold 4 of its 8 elements: a hole/],
    [
      "two chunks sharing rows",
      [
        {
          ...W,
          chunks: [
            { offsets: [0, 0], sizes: [3, 2] },
            { offsets: [2, 0], sizes: [2, 2] },
          ],
        },
      ],
      "ChunksDoNotTile",
      /overlap/,
    ],
    ["a chunk past the edge", [{ ...W, chunks: [W.chunks[0]!, { offsets: [2, 0], sizes: [3, 2] }] }], "ChunksDoNotTile", /past the edge/],
    [
      "two chunks of a 0-d tensor",
      [
        {
          name: "s",
          size: [],
          chunks: [
            { offsets: [], sizes: [] },
            { offsets: [], sizes: [], unlisted: true },
          ],
        },
      ],
      "ChunksDoNotTile",
      /overlap/,
    ],
    [
      "a chunk of another dtype than the metadata's",
      [{ ...W, chunks: [W.chunks[0]!, { offsets: [2, 0], sizes: [2, 2], record: tensorRecord([2, 2], new Uint8Array(32), "LongStorage", 8) }] }],
      "ChunkMismatch",
      /holds I64, but the metadata says torch.float32/,
    ],
    [
      "a chunk of another shape than the metadata's",
      [{ ...W, chunks: [W.chunks[0]!, { offsets: [2, 0], sizes: [2, 2], record: tensorRecord([4], iota(4)) }] }],
      "ChunkMismatch",
      /holds shape \[4\], but the metadata says \[2, 2\]/,
    ],
    ["a record past its file's end", [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, length: 1_000_000 }] }], "StoragePastEnd", /passes the file's end/],
    [
      "a relative_path climbing out of the folder",
      [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, file: "../__0_0.distcp" }] }],
      "InvalidRelativePath",
      /climbs out/,
    ],
    ["an absolute relative_path", [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, file: "/etc/passwd" }] }], "InvalidRelativePath", /absolute/],
    [
      "a relative_path naming no file",
      [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, file: ".missing" }] }],
      "InvalidRelativePath",
      /not a regular file of the folder/,
    ],
    [
      "sizes whose product passes 2^53",
      [{ name: "huge", size: [2 ** 40, 2 ** 40], chunks: [{ offsets: [0, 0], sizes: [2 ** 40, 2 ** 40], record: tensorRecord([1], iota(1)) }] }],
      "ValidationOverflow",
      /past 2\^53 - 1/,
    ],
    ["a size past 2^53", [{ name: "huge", size: [2n ** 60n], chunks: [{ offsets: [0], sizes: [1] }] }], "ValidationOverflow", /past 2\^53 - 1/],
    [
      "a compressed chunk",
      [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, transforms: ["zstd"] }] }],
      "UnsupportedTransform",
      /transforms st-convert does not implement: "zstd"/,
    ],
    [
      "one chunk named twice in storage_data",
      [
        {
          name: "s",
          size: [],
          chunks: [
            { offsets: [], sizes: [] },
            { offsets: [], sizes: [] },
          ],
        },
      ],
      "InvalidDcpMetadata",
      /names the chunk at \[\] twice/,
    ],
    [
      "a chunk with no storage entry",
      [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, unlisted: true }] }],
      "InvalidDcpMetadata",
      /no entry for the chunk at \[2, 0\]/,
    ],
  ];
  for (const [attack, tensors, code, rule] of cases) {
    it(`${attack}: ${code}, naming the tensor`, async () => {
      const { code: got, message } = await refusal(tensors);
      expect(got, message).toBe(code);
      expect(message).toMatch(rule);
      expect(message).toMatch(/tensor "(w|s|huge)"/);
    });
  }

  it("a relative_path naming a folder: not a regular file", async () => {
    const dir = dcpFolder(join(work, "dir-path"), [{ ...W, chunks: [W.chunks[0]!, { ...W.chunks[1]!, file: "sub" }] }]);
    rmSync(join(dir, "sub"));
    mkdirSync(join(dir, "sub"));
    await expect(openDcp(dir)).rejects.toMatchObject({ code: "InvalidRelativePath" });
  });

  it("a callable outside DCP's classes is refused by name and never run", async () => {
    const marker = join(work, "pwned");
    const { code, message } = await refusal([W], {
      inject: (p) => {
        p.str("evil").global("os", "system").mark().str(`touch ${marker}`).tuple().reduce();
      },
    });
    expect(code).toBe("UnsupportedGlobal");
    expect(message).toMatch(/os\.system/);
    expect(existsSync(marker)).toBe(false);
  });

  it("a hostile tensor left out by the selection is not judged", async () => {
    const dir = dcpFolder(join(work, "selected"), [W, { name: "bad", size: [4, 2], chunks: [W.chunks[0]!] }]);
    const checkpoint = await openDcp(dir, { include: (n) => n !== "bad" });
    expect(checkpoint.tensors.map((t) => t.name)).toEqual(["w"]);
  });
});

describe("the writer", () => {
  it("a folder it writes reads back with the same tensors and metadata", async () => {
    const source = await openDcp(fixturePath("dcp", "ranks2"));
    const files = new Map<string, MemorySink>();
    await writeDcp(source, async (name) => {
      const sink = new MemorySink(name);
      files.set(name, sink);
      return sink;
    });
    expect([...files.keys()]).toEqual(["__0_0.distcp", ".metadata"]);
    const back = await readDcp(files.get(".metadata")!.bytes(), async (name) => {
      const { bytesSource } = await import("@st-convert/core");
      return bytesSource(files.get(name)!.bytes(), name);
    });
    expect(back.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(source.tensors.map((t) => [t.name, t.dtype, t.shape]));
    for (let i = 0; i < source.tensors.length; i++) expect(await hexOf(back.tensors[i]!)).toBe(await hexOf(source.tensors[i]!));
    expect({ ...back.metadata }).toEqual({ ...source.metadata });
  });
});
