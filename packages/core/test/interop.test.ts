/**
 * Interop with the reference `safetensors` package: it reads what we write, we read what it
 * writes, our bytes equal its bytes, and it accepts and refuses the same hostile files.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import {
  DTYPES,
  type Dtype,
  type TensorEntry,
  dtypeInfo,
  layoutSafetensors,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorByteLength,
  tensorFromBytes,
} from "@st-convert/core";
import { describeInterop, makeTempDir, pseudoRandomBytes as bytesFor, runPython, toHex } from "@st-convert/testing";
import { STRICTER_THAN_REFERENCE, safetensorsHostileCases as hostileCases, safetensorsFile } from "@st-convert/testing";

interface ReferenceView {
  ok: boolean;
  code?: string;
  message?: string;
  metadata?: Record<string, string> | null;
  tensors?: { name: string; dtype: string; shape: number[]; data_offsets: [number, number]; sha256: string }[];
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function tensorSet(seed: number, dtypes: readonly Dtype[]): TensorEntry[] {
  return dtypes.map((dtype, i) => {
    const shapes = [[], [3], [2, 4], [0, 5], [1, 2, 2], [8]];
    let shape = shapes[(seed + i) % shapes.length]!;
    if (dtypeInfo(dtype).bits < 8) shape = [...shape, dtypeInfo(dtype).bits === 4 ? 2 : 4];
    const name = [`layer.${i}.weight`, `p${seed}_${dtype}`, `é${i}`, `😀${i}`, `\uffff${i}`][(seed + i) % 5]!;
    // BOOL must hold 0/1 for numpy to keep the bytes as they are.
    const raw = bytesFor(seed * 100 + i, tensorByteLength(dtype, shape));
    return tensorFromBytes({ name, dtype, shape }, dtype === "BOOL" ? raw.map((b) => b & 1) : raw);
  });
}

describeInterop("safetensors interop with the reference", (python) => {
  const { dir, cleanup } = makeTempDir();
  afterAll(cleanup);
  const read = (...paths: string[]): ReferenceView[] =>
    runPython(python, "reference_safetensors.py", ["read", ...paths])
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as ReferenceView);

  const allDtypes = DTYPES.map((d) => d.code);
  // The reference writes every dtype but F6 (it reads F6, but no API of it writes F6).
  const writable = allDtypes.filter((d) => !d.startsWith("F6"));

  it("reads our files as we wrote them, every dtype, with metadata", async () => {
    const paths: string[] = [];
    const expected: ReferenceView[] = [];
    for (let seed = 0; seed < 6; seed++) {
      const tensors = tensorSet(seed, allDtypes);
      const metadata = seed % 2 === 0 ? null : { format: "pt", seed: String(seed), 'k\n"': "v\u2028😀" };
      const path = join(dir, `ours-${seed}.safetensors`);
      writeFileSync(path, await serializeSafetensors({ metadata, tensors }));
      paths.push(path);
      const file = await readSafetensors(readFileSync(path));
      expected.push({
        ok: true,
        metadata,
        tensors: await Promise.all(
          [...file.tensors]
            .sort((a, b) => (a.name < b.name ? -1 : 1))
            .map(async (t) => ({
              name: t.name,
              dtype: t.dtype,
              shape: [...t.shape],
              data_offsets: [...t.dataOffsets] as [number, number],
              sha256: sha256(await readTensorBytes(t)),
            })),
        ),
      });
    }
    const views = read(...paths);
    // Python sorts names by code point, JS by UTF-16 unit: compare as maps.
    const byName = (v: ReferenceView) => ({ ok: v.ok, metadata: v.metadata, tensors: Object.fromEntries((v.tensors ?? []).map((t) => [t.name, t])) });
    expect(views.map(byName)).toEqual(expected.map(byName));
  });

  it("writes byte-identical files to the reference writer, every dtype it writes, with at most one metadata key", async () => {
    for (let seed = 0; seed < 8; seed++) {
      const dtypes = seed < 4 ? writable : writable.filter((_, i) => (i + seed) % 3 === 0);
      const tensors = tensorSet(seed, dtypes);
      const metadata = seed % 2 === 0 ? null : { format: seed === 3 ? "" : "pt" };
      const spec = join(dir, `spec-${seed}.json`);
      const theirs = join(dir, `theirs-${seed}.safetensors`);
      writeFileSync(
        spec,
        JSON.stringify({
          metadata,
          tensors: await Promise.all(tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, hex: toHex(await readTensorBytes(t)) }))),
        }),
      );
      runPython(python, "reference_safetensors.py", ["save", spec, theirs]);
      const reference = readFileSync(theirs);
      const ours = await serializeSafetensors({ metadata, tensors: [...tensors].reverse() });
      expect(toHex(ours), `seed ${seed}`).toBe(toHex(reference));
      // And we read the reference's file back to the same tensors.
      const file = await readSafetensors(reference);
      for (const t of tensors) expect(toHex(await readTensorBytes(file.tensor(t.name)))).toBe(toHex(await readTensorBytes(t)));
    }
  });

  it("writes no shape the reference reader refuses: dims that overflow u64 before a 0 are refused up front", () => {
    const shapes = [
      [2 ** 32, 2 ** 32, 0],
      [0, 2 ** 32, 2 ** 32],
      [2 ** 32, 2 ** 31, 0],
      [2 ** 53 - 1, 2048, 0],
      [2 ** 53 - 1, 2049, 0],
      [3, 2 ** 53 - 1, 1024, 0, 7],
    ];
    const verdict = (run: () => unknown): string => {
      try {
        run();
        return "ok";
      } catch (error) {
        return (error as { code: string }).code;
      }
    };
    const ours = shapes.map((shape) => verdict(() => layoutSafetensors([{ name: "t", dtype: "U8", shape }])));
    // The files our writer would make, laid out by hand, for the reference to judge.
    const paths = shapes.map((shape, i) => {
      const path = join(dir, `shape-${i}.safetensors`);
      writeFileSync(path, safetensorsFile(`{"t":{"dtype":"U8","shape":[${shape.join(",")}],"data_offsets":[0,0]}}`));
      return path;
    });
    const theirs = read(...paths).map((v) => (v.ok ? "ok" : v.code));
    expect(ours).toEqual(theirs);
    expect(ours).toContain("ValidationOverflow");
    expect(ours).toContain("ok");
  });

  it("accepts and refuses the same hostile files as the reference, by the same rule", () => {
    const paths = hostileCases.map(([, bytes], i) => {
      const path = join(dir, `hostile-${i}.safetensors`);
      writeFileSync(path, bytes);
      return path;
    });
    const views = read(...paths);
    const disagreements = hostileCases
      .map(([attack, , ours], i) => ({ attack, ours, reference: views[i]!.ok ? "ok" : views[i]!.code, message: views[i]!.message }))
      .filter(({ attack, ours, reference }) => ours !== reference && !(attack in STRICTER_THAN_REFERENCE && reference === "ok"));
    expect(disagreements).toEqual([]);
  });
});
