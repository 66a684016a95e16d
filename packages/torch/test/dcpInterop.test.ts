/**
 * Interop with the real torch.distributed.checkpoint (torch 2.13, CPU): our consolidation of the
 * folders torch saved from several ranks is what `dcp_to_torch_save` gives, byte for byte; and the
 * folders we write load with `dcp.load` into a state dict of empty tensors and consolidate with
 * `dcp_to_torch_save`, giving the tensors written and the metadata as str items.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { MemorySink, serializeSafetensors } from "@st-convert/core";
import { openFileSource } from "@st-convert/core/node";
import { readDcp, readTorch, writeDcp } from "@st-convert/torch";
import { readFileSync } from "node:fs";
import { describeInterop, fixturePath, makeTempDir, runPython } from "@st-convert/testing";

const temp = makeTempDir("st-convert-dcp-interop-");
afterAll(() => temp.cleanup());

interface Report {
  problems: string[];
  tensors: number;
  loaded?: number;
  others: Record<string, string>;
}

const opened: { close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const file of opened) await file.close();
});

async function readFolder(dir: string) {
  const open = async (path: string) => {
    const file = await openFileSource(path);
    opened.push(file);
    return file;
  };
  return readDcp(await open(join(dir, ".metadata")), (name) => open(join(dir, name)));
}

describeInterop("dcp interop", (python) => {
  it("our consolidation of torch's folders is dcp_to_torch_save's, byte for byte; our folders load with dcp.load and consolidate", async () => {
    const args: string[] = [];
    const expectations: ((report: Report) => void)[] = [];
    for (const name of ["ranks2", "ranks4"]) {
      const dir = fixturePath("dcp", name);
      const out = join(temp.dir, `${name}.safetensors`);
      writeFileSync(out, await serializeSafetensors(await readFolder(dir)));
      args.push("consolidate", dir, out);
      expectations.push((report) => {
        expect(report.problems, name).toEqual([]);
        expect(report.tensors, name).toBeGreaterThan(4);
      });
    }
    const sources: [string, () => Promise<Parameters<typeof writeDcp>[0]>][] = [
      ["ranks2-again", () => readFolder(fixturePath("dcp", "ranks2"))],
      ["gpt2", async () => readTorch(readFileSync(fixturePath("torch", "gpt2.bin")))],
    ];
    for (const [what, open] of sources) {
      const source = await open();
      const dir = join(temp.dir, what);
      mkdirSync(dir);
      const files = new Map<string, MemorySink>();
      await writeDcp(source, async (file) => {
        const sink = new MemorySink(file);
        files.set(file, sink);
        return sink;
      });
      for (const [file, sink] of files) writeFileSync(join(dir, file), sink.bytes());
      const expected = join(temp.dir, `${what}.safetensors`);
      writeFileSync(expected, await serializeSafetensors({ metadata: null, tensors: source.tensors }));
      args.push("load", dir, expected);
      expectations.push((report) => {
        expect(report.problems, what).toEqual([]);
        expect(report.loaded, what).toBe(source.tensors.length);
        expect(report.tensors, what).toBe(source.tensors.length);
        // The metadata, as str items under their keys.
        expect(report.others, what).toEqual(Object.fromEntries(Object.entries(source.metadata ?? {}).map(([k, v]) => [k, `'${v}'`])));
      });
    }
    const reports = runPython(python, "reference_dcp.py", args)
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Report);
    expect(reports).toHaveLength(expectations.length);
    reports.forEach((report, i) => expectations[i]!(report));
  });
});
