// Conversions whose tensors are copied in the kernel (the native module's copy_file_range, through
// TensorEntry.extent and ByteSink.copyFrom), on files the reference tools wrote with tensors past
// KERNEL_COPY_FROM: every reader's extents and every writer's piped tensors reach the file sink's
// kernel copy, the outputs load in the references, byte for byte, the same as without the native
// module, and a bad CRC-32 is still refused while the copy runs.
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type AtomicFileSink, createFileSink, createScratchFile, openFileSource } from "@st-convert/core/node";
import { nativeAbsence, nativeIo } from "@st-convert/native";
import { CLI_PATH, describeInterop, makeTempDir, runPython } from "@st-convert/testing";
import { spawnSync } from "node:child_process";
import { kernels } from "@st-convert/core";
import { convert, detectInputFormat, formatByName } from "../src/index.js";

const native = nativeIo();
if (native === undefined && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error(`the native module is required here: ${nativeAbsence}`);

/** Bytes of the tensors of 1 MiB or more that reference_kernel_copy.py writes: big (2 MiB) and half (1.5 MiB). */
const LARGE = 2 * 1024 * 1024 + 1536 * 1024;

function cli(args: readonly string[], env: Record<string, string> = {}) {
  const run = spawnSync(process.execPath, [CLI_PATH, ...args], { encoding: "utf8", env: { ...process.env, NO_COLOR: "1", ...env } });
  return { status: run.status, stderr: run.stderr };
}

describeInterop("kernel copies on files the references wrote", (python) => {
  let dir: string;
  let cleanup: () => void;
  beforeAll(() => {
    ({ dir, cleanup } = makeTempDir());
    runPython(python, "reference_kernel_copy.py", ["gen", dir]);
  });
  afterAll(() => cleanup());

  /** Converts with the library's reader and writer into a file sink, and returns the bytes it copied in the kernel. */
  async function convertCounting(input: string, output: string, to: string): Promise<number> {
    const file = await openFileSource(join(dir, input));
    try {
      const from = await detectInputFormat(file);
      const source = await from.open(file, { options: {}, scratch: () => createScratchFile() });
      const sink = (await createFileSink(join(dir, output))) as AtomicFileSink;
      try {
        await formatByName(to).write(source, sink, { options: {} });
        await sink.close();
      } catch (error) {
        await sink.abort();
        throw error;
      }
      return sink.kernelCopied;
    } finally {
      await file.close();
    }
  }

  it.skipIf(native === undefined)("every reader's large tensors reach the kernel copy, and every writer pipes them there", async () => {
    const copied: Record<string, number> = {};
    for (const [input, output, to] of [
      ["a.safetensors", "from_st.safetensors", "safetensors"],
      ["a.npy", "from_npy.safetensors", "safetensors"],
      ["a.npz", "from_npz.safetensors", "safetensors"],
      ["a.msgpack", "from_flax.safetensors", "safetensors"],
      ["a.pt", "from_pt.safetensors", "safetensors"],
      ["a_legacy.pt", "from_legacy.safetensors", "safetensors"],
      ["a.safetensors", "to.npz", "npz"],
      ["a.safetensors", "to.msgpack", "flax"],
      ["a.safetensors", "to.pt", "torch"],
    ] as const) {
      copied[output] = await convertCounting(input, output, to);
    }
    expect(copied).toEqual({
      "from_st.safetensors": LARGE,
      "from_npy.safetensors": 2 * 1024 * 1024,
      "from_npz.safetensors": LARGE,
      "from_flax.safetensors": LARGE,
      "from_pt.safetensors": LARGE,
      "from_legacy.safetensors": LARGE,
      "to.npz": LARGE,
      "to.msgpack": LARGE,
      "to.pt": LARGE,
    });
    const report = JSON.parse(runPython(python, "reference_kernel_copy.py", ["check", dir]));
    expect(report).toEqual(Object.fromEntries(Object.keys(copied).map((name) => [name, true])));
  });

  it.skipIf(native === undefined)("convert() takes a whole stored member's CRC-32 in its copy, with no read of the member of its own", async () => {
    // The check alongside a copy reads through kernels.crc32Range; the fold never calls it.
    const range = kernels.crc32Range!;
    const calls: number[] = [];
    kernels.crc32Range = (fd, offset, length, previous) => {
      calls.push(length);
      return range(fd, offset, length, previous);
    };
    try {
      for (const input of ["a.pt", "a.npz"]) {
        const viaApi = join(dir, `api_${input}.safetensors`);
        const viaLibrary = join(dir, `lib_${input}.safetensors`);
        await convert(join(dir, input), viaApi);
        await convertCounting(input, `lib_${input}.safetensors`, "safetensors");
        expect(readFileSync(viaApi).equals(readFileSync(viaLibrary)), input).toBe(true);
      }
    } finally {
      kernels.crc32Range = range;
    }
    expect(calls).toEqual([]);
  });

  it("the command gives the same bytes with and without the native module, in every direction", () => {
    const pairs = [
      // without the native module, copied through memory by the file sink (copyFromFile): no check of their own
      ["a.safetensors", "cli_st.safetensors"],
      ["a.npy", "cli_npy.safetensors"],
      ["a.pt", "cli.safetensors"],
      ["a.npz", "cli_npz.safetensors"],
      ["a.safetensors", "cli.npz"],
      ["a.safetensors", "cli.pt"],
      ["a.safetensors", "cli.msgpack"],
    ];
    // The same file name in another folder: a .pt names its root folder after its file.
    const js = join(dir, "js");
    mkdirSync(js, { recursive: true });
    for (const [input, output] of pairs) {
      expect(cli([join(dir, input!), join(dir, output!), "--quiet"]).status).toBe(0);
      expect(cli([join(dir, input!), join(js, output!), "--quiet"], { ST_CONVERT_NATIVE: "0" }).status).toBe(0);
      expect(readFileSync(join(dir, output!)).equals(readFileSync(join(js, output!))), output).toBe(true);
    }
  });

  it("a stored member whose CRC-32 does not match is refused while it is copied, naming file and tensor, leaving no output", () => {
    for (const [input, tensor] of [
      ["a.npz", "big"],
      ["a.pt", "big"],
    ] as const) {
      const bytes = new Uint8Array(readFileSync(join(dir, input)));
      // A byte in the middle of the 2 MiB tensor's data, which the copy never reads.
      const at = bytes.byteLength >> 2;
      bytes[at] = bytes[at]! ^ 0xff;
      const bad = join(dir, `bad_${input}`);
      writeFileSync(bad, bytes);
      const out = join(dir, `bad_${input}.safetensors`);
      const run = cli([bad, out]);
      expect(run.status).toBe(1);
      expect(run.stderr.trim().split("\n")).toHaveLength(1);
      expect(run.stderr).toMatch(/BadCrc/);
      expect(run.stderr).toContain(bad);
      expect(run.stderr).toContain(tensor);
      expect(readdirSync(dir).filter((name) => name.startsWith(`bad_${input}.`) || name.startsWith(`.bad_${input}`))).toEqual([]);
    }
  });
});
