/**
 * Hostile distributed checkpoints, built byte by byte and named after the attack: each is refused
 * with one coded line naming the tensor and the rule, never run, never a crash. `pnpm hostile`
 * runs the command itself on each folder (recorded through recordHostileFolders).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { kernels, readTensorBytes } from "@st-convert/core";
import { recordHostileFolders } from "@st-convert/testing";
import { type TensorSpec, closeOpened, dcpFolder, iota, openDcp, tensorRecord } from "./dcpBuild.js";

const work = mkdtempSync(join(tmpdir(), "st-convert-dcp-hostile-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

afterAll(closeOpened);

const W: TensorSpec = {
  name: "w",
  size: [4, 2],
  chunks: [
    { offsets: [0, 0], sizes: [2, 2] },
    { offsets: [2, 0], sizes: [2, 2] },
  ],
};

/** A tensor split by columns whose second chunk's bytes were changed after its record's CRC-32 was taken. */
const CORRUPT_COLUMNS: TensorSpec = (() => {
  const data = iota(8 * 4);
  const record = tensorRecord([8, 4], data);
  const at = Buffer.from(record).indexOf(Buffer.from(data));
  record[at + 37]! ^= 0x40;
  return {
    name: "w",
    size: [8, 8],
    chunks: [
      { offsets: [0, 0], sizes: [8, 4] },
      { offsets: [0, 4], sizes: [8, 4], record, file: "__1_0.distcp" },
    ],
  };
})();

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
    ["a chunk whose bytes do not match their CRC-32 (split by columns)", [CORRUPT_COLUMNS], "BadCrc", /Bad CRC-32 for member/],
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
  recordHostileFolders(
    "dcp",
    cases.map(([attack, tensors, code]) => [attack, dcpFolder(join(work, `corpus${folders++}`), tensors), code] as const),
  );
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

  it("a chunk of a tensor split by columns whose bytes do not match their CRC-32: BadCrc, read in place or through its record", async () => {
    const { readRuns } = kernels;
    try {
      for (const inPlace of readRuns === undefined ? [false] : [true, false]) {
        if (!inPlace) delete kernels.readRuns;
        const { code, message } = await refusal([CORRUPT_COLUMNS]);
        expect(code, message).toBe("BadCrc");
        expect(message).toMatch(/tensor "w"/);
      }
    } finally {
      kernels.readRuns = readRuns;
    }
  });

  it("a hostile tensor left out by the selection is not judged", async () => {
    const dir = dcpFolder(join(work, "selected"), [W, { name: "bad", size: [4, 2], chunks: [W.chunks[0]!] }]);
    const checkpoint = await openDcp(dir, { include: (n) => n !== "bad" });
    expect(checkpoint.tensors.map((t) => t.name)).toEqual(["w"]);
  });
});
