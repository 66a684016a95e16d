/**
 * The distributed checkpoint reader against folders torch itself saved from 2 and 4 ranks
 * (fixtures/dcp, made by fixtures/gen_dcp.py): every tensor consolidates to the bytes
 * `dcp_to_torch_save` gives, the other items are carried or skipped; and the writer's folders
 * read back (hostile folders: hostileDcp.test.ts; torch's own reading of ours: dcpInterop.test.ts).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, kernels, pipeTensor } from "@st-convert/core";
import { type AtomicFileSink, createFileSink } from "@st-convert/core/node";
import { decodeDcpMetadata, pythonFloat, readDcp, sniffDcpMetadata, writeDcp } from "@st-convert/torch";
import { fixturePath } from "@st-convert/testing";
import { type TensorSpec, closeOpened, dcpFolder, iota, openDcp, tensorRecord } from "./dcpBuild.js";

interface Expected {
  items: ({ name: string; dtype: string; shape: number[]; sha256: string; hex: string } | { name: string; value: string })[];
}
const manifest = JSON.parse(readFileSync(fixturePath("dcp", "manifest.json"), "utf8")) as Record<string, Expected>;

afterAll(closeOpened);

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
    expect(checkpoint.others.map((o) => o.name)).toContain("step");
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

describe("large tensors", () => {
  const work = mkdtempSync(join(tmpdir(), "st-convert-dcp-large-"));
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  const columns = 131_072;
  const rows: TensorSpec = {
    name: "rows",
    size: [4, columns],
    chunks: [
      { offsets: [0, 0], sizes: [2, columns], record: tensorRecord([2, columns], iota(2 * columns)) },
      { offsets: [2, 0], sizes: [2, columns], record: tensorRecord([2, columns], iota(2 * columns, 2 * columns)), file: "__1_0.distcp" },
    ],
  };
  const cols: TensorSpec = {
    name: "cols",
    size: [4, 2 * columns],
    chunks: [
      { offsets: [0, 0], sizes: [4, columns], record: tensorRecord([4, columns], iota(4 * columns)) },
      { offsets: [0, columns], sizes: [4, columns], record: tensorRecord([4, columns], iota(4 * columns, 7)), file: "__1_0.distcp" },
    ],
  };
  const expectedRows = Buffer.concat([iota(2 * columns), iota(2 * columns, 2 * columns)]);
  const expectedCols = Buffer.concat([0, 1, 2, 3].flatMap((r) => [iota(columns, r * columns), iota(columns, 7 + r * columns)]).map((b) => Buffer.from(b)));

  // Element i of each tensor holds i; each chunk holds its block of them.
  const blockOf = (size: readonly number[], offsets: readonly number[], sizes: readonly number[]): Uint8Array => {
    const values: number[] = [];
    const index = sizes.map(() => 0);
    const total = sizes.reduce((n, d) => n * d, 1);
    for (let n = 0; n < total; n++) {
      let flat = 0;
      for (let d = 0; d < size.length; d++) flat = flat * size[d]! + offsets[d]! + index[d]!;
      values.push(flat);
      for (let d = sizes.length - 1; d >= 0 && ++index[d]! === sizes[d]; d--) index[d] = 0;
    }
    return new Uint8Array(Float32Array.from(values).buffer);
  };
  const split = (name: string, size: number[], cuts: { offsets: number[]; sizes: number[] }[]): TensorSpec => ({
    name,
    size,
    chunks: cuts.map(({ offsets, sizes }, rank) => ({
      offsets,
      sizes,
      record: tensorRecord(sizes, blockOf(size, offsets, sizes)),
      file: `__${rank}_0.distcp`,
    })),
  });
  // Four ranks' columns: every chunk's share of a row group is evenly spaced runs of 1 KiB.
  const columns4 = split(
    "columns4",
    [1024, 1024],
    [0, 1, 2, 3].map((r) => ({ offsets: [0, 256 * r], sizes: [1024, 256] })),
  );
  // A 2-D mesh over the last two dimensions: a share's runs are not evenly spaced (placed run by run).
  const mesh = split(
    "mesh",
    [3, 4, 6],
    [0, 1, 2, 3].map((r) => ({ offsets: [0, 2 * (r >> 1), 3 * (r & 1)], sizes: [3, 2, 3] })),
  );

  it("columns are read from the files straight into place where the native module is loaded, and give the same bytes without it", async () => {
    const dir = dcpFolder(join(work, "in-place"), [columns4, mesh]);
    const expected = (t: TensorSpec) => Buffer.from(blockOf(t.size as number[], [0, 0, 0].slice(0, t.size.length), t.size as number[]));
    const { readRuns } = kernels;
    let calls = 0;
    try {
      if (readRuns !== undefined)
        kernels.readRuns = (...args) => {
          calls++;
          return readRuns(...args);
        };
      for (const rowGroupSize of [undefined, 40, 1000]) {
        const checkpoint = await openDcp(dir, { rowGroupSize });
        for (const [i, spec] of [columns4, mesh].entries()) {
          const tensor = checkpoint.tensors[i]!;
          expect(Buffer.from(Buffer.from(await hexOf(tensor), "hex")).equals(expected(spec)), `${spec.name}, row groups of ${rowGroupSize}`).toBe(true);
          expect(Buffer.from(Buffer.from(await hexOf(tensor, 4096), "hex")).equals(expected(spec)), `${spec.name}, row groups of ${rowGroupSize}`).toBe(true);
        }
      }
      if (readRuns !== undefined) expect(calls).toBeGreaterThan(0);
      // Without it: through each chunk's record, the same bytes.
      delete kernels.readRuns;
      calls = 0;
      const checkpoint = await openDcp(dir, { rowGroupSize: 1000 });
      for (const [i, spec] of [columns4, mesh].entries())
        expect(Buffer.from(Buffer.from(await hexOf(checkpoint.tensors[i]!), "hex")).equals(expected(spec))).toBe(true);
      expect(calls).toBe(0);
    } finally {
      kernels.readRuns = readRuns;
    }
  });

  it("rows split by rank are copied run by run where the sink copies in the kernel; columns gathered with reused memory", async () => {
    const dir = dcpFolder(join(work, "large"), [rows, cols]);
    const checkpoint = await openDcp(dir, { rowGroupSize: 300_000 });
    for (const [tensor, expected] of [
      [checkpoint.tensors[0]!, expectedRows],
      [checkpoint.tensors[1]!, expectedCols],
    ] as const) {
      const path = join(work, `${tensor.name}.bin`);
      const sink = await createFileSink(path);
      await pipeTensor(tensor, sink);
      // The native module, where it loaded (core/node installs its CRC-32 then), copies in the kernel.
      if (tensor.name === "rows" && kernels.crc32Range !== undefined) expect((sink as AtomicFileSink).kernelCopied).toBe(tensor.byteLength);
      await sink.close();
      expect(Buffer.from(readFileSync(path)).equals(expected), tensor.name).toBe(true);
      expect(Buffer.from(Buffer.from(await hexOf(tensor, 65_536), "hex")).equals(expected), tensor.name).toBe(true);
    }
  });
});
