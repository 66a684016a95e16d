/**
 * `st-convert info`'s table: built in one pass that reuses the text of a row's dtype, shape and
 * size when they repeat the row before. Checked against the table made cell by cell.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

/** [name, dtype, shape, bytes per element] in file order. */
type Row = [string, string, number[], number];

/** A safetensors file of these tensors, laid out in the given order. */
function fileOf(rows: Row[], metadata?: Record<string, string>): Uint8Array {
  const entries: string[] = metadata === undefined ? [] : [`"__metadata__":${JSON.stringify(metadata)}`];
  let at = 0;
  for (const [name, dtype, shape, size] of rows) {
    const bytes = shape.reduce((n, d) => n * d, 1) * size;
    entries.push(`${JSON.stringify(name)}:{"dtype":"${dtype}","shape":[${shape.join(",")}],"data_offsets":[${at},${at + bytes}]}`);
    at += bytes;
  }
  return safetensorsFile(`{${entries.join(",")}}`, at);
}

/** The table as it reads: every cell padded to its column, the sizes aligned right. */
function expectedTable(path: string, rows: Row[], metadata: string, totals: string): string {
  const cells = rows.map(([name, dtype, shape, size]) => [
    name,
    dtype,
    `[${shape.join(", ")}]`,
    (shape.reduce((n, d) => n * d, 1) * size).toLocaleString("en"),
  ]);
  const all = [["name", "dtype", "shape", "bytes"], ...cells];
  const widths = [0, 1, 2, 3].map((c) => Math.max(...all.map((row) => row[c]!.length)));
  const line = (row: string[]) => row.map((cell, c) => (c === 3 ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join("  ");
  return [`${path}: safetensors`, `metadata: ${metadata}`, "", ...all.map(line), "", totals, ""].join("\n");
}

describe("st-convert info, the table", () => {
  it("pads every column and reuses nothing it should not", () => {
    // Runs of one shape, a shape change at the same size, a size change at the same shape, a
    // dtype change, a scalar, an empty tensor, a name longer than the others and one beyond ASCII.
    const rows: Row[] = [
      ["a.weight", "F64", [4, 4], 8],
      ["b.weight", "F64", [4, 4], 8],
      ["c.weight", "F64", [16, 1], 8],
      ["d", "F32", [16, 1], 4],
      ["e", "F32", [16, 1], 4],
      ["f.very.long.name.of.a.tensor", "F32", [1000, 3], 4],
      ["g", "I32", [1000, 3], 4],
      ["h", "I32", [], 4],
      ["i", "I32", [0, 7], 4],
      ["ünï", "U8", [3], 1],
    ];
    const path = join(dir, "m.safetensors");
    writeFileSync(path, fileOf(rows, { format: "pt" }));
    const run = runCli(["info", path]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    // 16+16+16+16+16+3000+3000+1+0+3 elements; 128+128+128+64+64+12000+12000+4+0+3 bytes.
    expect(run.stdout).toBe(expectedTable(path, rows, 'format="pt"', "10 tensors, 6,084 parameters, 23.9 KiB (24,519 bytes)"));
  });

  it("lists a file without tensors", () => {
    const path = join(dir, "empty.safetensors");
    writeFileSync(path, fileOf([]));
    const run = runCli(["info", path]);
    expect(run.stdout).toBe(expectedTable(path, [], "none", "0 tensors, 0 parameters, 0 B (0 bytes)"));
  });
});
