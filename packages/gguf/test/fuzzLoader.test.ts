/**
 * One file, one meaning: ggml's own loader (`gguf_init_from_file` in libggml-base, with a data
 * context, as llama.cpp's tools load files) and our reader must accept and refuse the same files
 * and, where both accept, list the same tensors (name, ggml type, ne). Checked on every hostile
 * case and on seeded mutants of the files it accepts. The differences made on purpose (big-endian
 * files and arrays of arrays read; names and keys that are not UTF-8, split sets read through
 * another file than the first refused) are recognised and left out; the package README lists them.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { readTensorBytes } from "@st-convert/core";
import { readGguf } from "@st-convert/gguf";
import { Random, describeGgml, fixturePath, fuzzRuns, fuzzSeed, fuzzTimeout, isProjectError, referencePython } from "@st-convert/testing";
import { hostileCases } from "./hostileCases.js";

type Verdict = { ok: false; code?: string; deliberate?: boolean } | { ok: true; tensors: [string, number, number[]][]; deliberate?: boolean };

const dir = mkdtempSync(join(tmpdir(), "gguf-loader-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Files judged by one run of the helper: its command line stays far below the system's limit (FUZZ_RUNS=20000 makes 80,000 files). */
const FILES_PER_RUN = 2000;

/** ggml's verdicts on files, by runs of the helper. */
function ggmlVerdicts(library: string, files: readonly Uint8Array[]): Verdict[] {
  const verdicts: Verdict[] = [];
  for (let from = 0; from < files.length; from += FILES_PER_RUN) {
    const paths = files.slice(from, from + FILES_PER_RUN).map((bytes, i) => {
      const path = join(dir, `${from + i}.gguf`);
      writeFileSync(path, bytes);
      return path;
    });
    const run = spawnSync(referencePython() ?? "python3", [fixturePath("reference_gguf.py"), "ggml-load", library, ...paths], {
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
    if (run.status !== 0) throw new Error(`reference_gguf.py ggml-load failed: ${run.error?.message ?? run.stderr}`);
    for (const line of run.stdout.trim().split("\n")) verdicts.push(JSON.parse(line) as Verdict);
    for (const path of paths) rmSync(path);
  }
  return verdicts;
}

/** Ours: the header and every tensor's bytes; `deliberate` when the verdict is one of our differences on purpose. */
async function ourVerdict(bytes: Uint8Array): Promise<Verdict> {
  try {
    const file = await readGguf(bytes, { keepQuantized: true });
    for (const t of file.tensors) await readTensorBytes(t);
    const nested = file.header.kvs.some((kv) => kv.itemType === "ARRAY");
    return {
      ok: true,
      tensors: file.header.tensors.map((t) => [t.name, t.type, [...t.ne, 1, 1, 1, 1].slice(0, 4)]),
      deliberate: nested || !file.header.littleEndian,
    };
  } catch (error) {
    if (!isProjectError(error)) throw error;
    const message = (error as unknown as Error).message;
    return { ok: false, code: error.code, deliberate: error.code === "InvalidSplit" || /not UTF-8/.test(message) };
  }
}

describeGgml("our reader and ggml's loader agree", (oracle) => {
  it("on every hostile case (ggml's verdict differs only where the case says so)", async () => {
    const theirs = ggmlVerdicts(
      oracle.library,
      hostileCases.map(([, bytes]) => bytes),
    );
    for (const [i, [attack, , expected, ggml]] of hostileCases.entries()) {
      const them = theirs[i]!;
      const ggmlAccepts = ggml === undefined ? expected === "ok" : ggml === "accepts";
      expect({ attack, ok: them.ok }).toEqual({ attack, ok: ggmlAccepts });
      if (them.ok && expected === "ok")
        expect({ attack, tensors: them.tensors }).toEqual({ attack, tensors: ((await ourVerdict(hostileCases[i]![1])) as { tensors: unknown }).tensors });
    }
  });

  it(
    "on seeded mutants of gguf-py's files",
    async () => {
      const seeds = ["quant.gguf", "align64.gguf", "no_tensors.gguf"].map((name) => new Uint8Array(readFileSync(fixturePath("gguf", name))));
      const random = new Random(fuzzSeed(), 0x6767);
      const mutants: Uint8Array[] = [];
      for (let n = 0; n < fuzzRuns() * 4; n++) {
        const bytes = random.pick(seeds).slice();
        const edits = 1 + random.int(3);
        let out = bytes;
        for (let e = 0; e < edits; e++) {
          const kind = random.int(10);
          // Header bytes mostly: that is where the rules are.
          const at = random.int(Math.min(out.byteLength, random.chance(0.8) ? 200 : out.byteLength));
          if (kind < 5) out[at] = out[at]! ^ (1 << random.int(8));
          else if (kind < 8) out[at] = random.pick([0, 1, 0xff, 0x7f, 0x80, 9, 31, 32, 64, random.int(256)]);
          else if (kind < 9) out = out.subarray(0, at);
          else out = new Uint8Array([...out.subarray(0, at), ...random.bytes(1 + random.int(8)), ...out.subarray(at)]);
        }
        mutants.push(out.slice());
      }
      const theirs = ggmlVerdicts(oracle.library, mutants);
      let compared = 0;
      for (const [i, mutant] of mutants.entries()) {
        const ours = await ourVerdict(mutant);
        if (ours.deliberate === true) continue;
        const them = theirs[i]!;
        const label = `mutant ${i} (FUZZ_SEED=${fuzzSeed()}): ${Buffer.from(mutant.subarray(0, 160)).toString("hex")}`;
        expect({ label, ok: ours.ok, code: ours.ok ? undefined : ours.code }).toEqual({ label, ok: them.ok, code: ours.ok ? undefined : ours.code });
        if (ours.ok && them.ok) expect({ label, tensors: ours.tensors }).toEqual({ label, tensors: them.tensors });
        compared++;
      }
      expect(compared).toBeGreaterThan(mutants.length / 2);
    },
    fuzzTimeout(),
  );
});
