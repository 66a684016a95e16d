import { spawn, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JOBS_PER_TURN, convert, convertMany } from "st-convert";
import { CLI_PATH, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

/** A valid safetensors file of `bytes` zero bytes of U8 data, sparse on disk. */
function sparseSafetensors(path: string, bytes: number): void {
  let header = `{"big":{"dtype":"U8","shape":[${bytes}],"data_offsets":[0,${bytes}]}}`;
  header += " ".repeat((8 - (header.length % 8)) % 8);
  const prefix = Buffer.alloc(8 + header.length);
  prefix.writeBigUInt64LE(BigInt(header.length));
  prefix.write(header, 8, "latin1");
  const fd = openSync(path, "w");
  writeSync(fd, prefix);
  writeSync(fd, Buffer.alloc(1), 0, 1, prefix.length + bytes - 1);
  closeSync(fd);
}

describe("interrupting a conversion", () => {
  it("an aborted convert() rejects with Aborted and leaves no output or temporary file", async () => {
    const input = join(dir, "in.safetensors");
    sparseSafetensors(input, 64 * 1024 * 1024);
    const controller = new AbortController();
    await expect(convert(input, join(dir, "out.safetensors"), { signal: controller.signal, onProgress: () => controller.abort() })).rejects.toMatchObject({
      code: "Aborted",
    });
    expect(readdirSync(dir)).toEqual(["in.safetensors"]);
  });

  it.each([
    ["Ctrl-C", "SIGINT", 130],
    ["a kill", "SIGTERM", 143],
    ["a closed terminal or ssh session", "SIGHUP", 129],
  ] as const)("%s (%s) stops the command with status %i and leaves nothing behind", async (_what, signal, status) => {
    const input = join(dir, "in.safetensors");
    sparseSafetensors(input, 2 * 1024 * 1024 * 1024);
    const child = spawn(process.execPath, [CLI_PATH, input, join(dir, "out.safetensors")], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    // Wait until the temporary output exists, i.e. the conversion is under way (however long the
    // machine takes to get there: the test's own timeout catches a hang).
    while (!readdirSync(dir).some((f) => f.endsWith(".tmp"))) await new Promise((r) => setTimeout(r, 5));
    child.kill(signal);
    expect(await exited).toBe(status);
    expect(readdirSync(dir)).toEqual(["in.safetensors"]);
    expect(stderr).toMatch(/stopped|Aborted/);
  });

  it("a batch of small files takes a stop request that comes as an event (a signal handler's way) within a few jobs", async () => {
    const root = join(dir, "in");
    mkdirSync(root);
    const tiny = safetensorsOf(4);
    for (let i = 0; i < 400; i++) writeFileSync(join(root, `t${String(i).padStart(3, "0")}.safetensors`), tiny);
    const controller = new AbortController();
    let asked = -1;
    const summary = await convertMany([root], {
      outDir: join(dir, "out"),
      to: "safetensors",
      jobs: 1,
      signal: controller.signal,
      onEvent: (event) => {
        // Not at once: from a later turn of the event loop, as Ctrl-C's handler runs.
        if (event.type === "start" && event.index === 50) {
          asked = event.index;
          setImmediate(() => controller.abort());
        }
      },
    });
    expect(asked).toBe(50);
    expect(summary.stopped).toBe(true);
    expect(summary.converted.length).toBeGreaterThan(50);
    expect(summary.converted.length).toBeLessThanOrEqual(51 + JOBS_PER_TURN);
    expect(readdirSync(join(dir, "out"))).toHaveLength(summary.converted.length);
  });

  it.each([
    ["human", [] as string[]],
    ["--json", ["--json"]],
  ])("Ctrl-C during a batch (%s) reports the file under way as interrupted, not failed, and the rest as not started", async (_how, extra) => {
    const root = join(dir, "in");
    mkdirSync(root);
    sparseSafetensors(join(root, "a.safetensors"), 2 * 1024 * 1024 * 1024);
    sparseSafetensors(join(root, "b.safetensors"), 2 * 1024 * 1024 * 1024);
    const out = join(dir, "out");
    const child = spawn(process.execPath, [CLI_PATH, root, "--out-dir", out, "--to", "npz", "--jobs", "1", ...extra], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    // Under way once the first file's temporary output is there; the test's own timeout catches a hang.
    const started = () => {
      try {
        return readdirSync(out).some((f) => f.endsWith(".tmp"));
      } catch {
        return false;
      }
    };
    while (!started()) await new Promise((r) => setTimeout(r, 5));
    child.kill("SIGINT");
    expect(await exited).toBe(130);
    expect(readdirSync(out)).toEqual([]);
    expect(stderr).not.toMatch(/failed: /);
    if (extra.length === 0) {
      expect(stderr).toMatch(new RegExp(`  interrupted: ${join(root, "a.safetensors")} -> ${join(out, "a.npz")}: the output was not written\n`));
      expect(stderr).toMatch(/converted 0, skipped 0, failed 0, interrupted 1 \(of 2 files\); stopped by a signal, 1 not started\n$/);
      return;
    }
    const report = JSON.parse(stdout) as {
      version: number;
      ok: boolean;
      stopped: boolean;
      files: { status: string; input: { file: string } }[];
      totals: Record<string, number>;
      error: { code: string; message: string };
    };
    expect(report).toMatchObject({ version: 2, ok: false, stopped: true, error: { code: "Aborted" } });
    expect(report.files.map((f) => [f.input.file, f.status])).toEqual([[join(root, "a.safetensors"), "interrupted"]]);
    expect(report.totals).toMatchObject({ failed: 0, interrupted: 1, converted: 0 });
    expect(report.error.message).toBe("stopped by a signal: 1 file interrupted, 1 not started");
  });

  it("Ctrl-C stops a batch of small files on two threads (status 130), and every output left is whole", async () => {
    const root = join(dir, "in");
    mkdirSync(root);
    const tiny = safetensorsOf(4);
    const count = 3000;
    for (let i = 0; i < count; i++) writeFileSync(join(root, `t${i}.safetensors`), tiny);
    const out = join(dir, "out");
    const child = spawn(process.execPath, [CLI_PATH, root, "--out-dir", out, "--to", "safetensors", "--jobs", "2"], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    // Under way once the first output is there; the test's own timeout catches a hang.
    const started = () => {
      try {
        return readdirSync(out).length > 0;
      } catch {
        return false;
      }
    };
    while (!started()) await new Promise((r) => setTimeout(r, 5));
    child.kill("SIGINT");
    expect(await exited).toBe(130);
    const left = readdirSync(out);
    expect(left.length).toBeLessThan(count);
    expect(left.filter((name) => name.endsWith(".tmp"))).toEqual([]);
    for (const name of left) expect(readFileSync(join(out, name)).equals(tiny)).toBe(true);
    expect(stderr).toMatch(/stopped/);
  });
});

/** A safetensors file of one U8 tensor of `n` bytes, its header padded as the writer pads it (so a conversion gives the same bytes). */
function safetensorsOf(n: number): Uint8Array {
  const header = `{"w":{"dtype":"U8","shape":[${n}],"data_offsets":[0,${n}]}}`;
  return safetensorsFile(header.padEnd(Math.ceil(header.length / 8) * 8), new Uint8Array(n).fill(7));
}

/** A 1 MiB tmpfs to fill, where this machine lets us mount one (root in a VM; CI runs as root). */
function tinyDisk(dir: string): string | undefined {
  const mount = join(dir, "tiny");
  mkdirSync(mount);
  return spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]).status === 0 ? mount : undefined;
}

describe("a full disk", () => {
  it("fails the conversion with one line, removes the temporary file and leaves an existing target untouched", (context) => {
    const disk = tinyDisk(dir);
    if (disk === undefined) {
      context.skip("cannot mount a tmpfs here (needs root)");
      return;
    }
    try {
      const input = join(dir, "in.safetensors");
      sparseSafetensors(input, 2 * 1024 * 1024);
      writeFileSync(join(disk, "out.safetensors"), "keep");
      for (const args of [
        [input, join(disk, "out.safetensors"), "--force"],
        [input, join(disk, "new.safetensors")],
      ]) {
        const run = runCli(args);
        expect(run.status).toBe(1);
        expect(run.stderr).toMatch(/no space left on the device \[Io\]\n$/);
      }
      expect(readdirSync(disk)).toEqual(["out.safetensors"]);
      expect(readFileSync(join(disk, "out.safetensors"), "utf8")).toBe("keep");
    } finally {
      spawnSync("umount", [disk]);
    }
  });
});
