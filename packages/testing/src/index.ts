/**
 * Helpers for st-convert's own tests: where the fixtures are, how to reach the reference Python,
 * and how to build files byte by byte.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { isProjectError } from "./fuzz.js";

/** The repository root. */
export const REPO_ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));

/** A path under `fixtures/`. */
export function fixturePath(...parts: string[]): string {
  return join(REPO_ROOT, "fixtures", ...parts);
}

/** The CLI as the package ships it (dist/st-convert.cjs, bundled after tsc), run as `node <path>`. */
export const CLI_PATH = join(REPO_ROOT, "packages", "cli", "dist", "st-convert.cjs");

/**
 * The reference Python (safetensors, numpy, ml_dtypes, flax): `ST_CONVERT_REF_PYTHON`, else
 * `.venv-ref/bin/python` at the repository root, else none.
 */
export function referencePython(): string | undefined {
  const fromEnv = process.env.ST_CONVERT_REF_PYTHON;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const local = join(REPO_ROOT, ".venv-ref", "bin", "python");
  return existsSync(local) ? local : undefined;
}

let noted = false;

/**
 * A `describe` for interop tests against the reference Python. Without one, the block is skipped
 * with a visible note, unless `ST_CONVERT_REQUIRE_REF=1` (CI), where a missing Python fails.
 */
export function describeInterop(name: string, body: (python: string) => void): void {
  const python = referencePython();
  if (python !== undefined) {
    describe(name, () => body(python));
    return;
  }
  if (process.env.ST_CONVERT_REQUIRE_REF === "1") {
    describe(name, () => {
      it("needs the reference Python", () => {
        throw new Error("ST_CONVERT_REQUIRE_REF=1 but no reference Python: set ST_CONVERT_REF_PYTHON or create .venv-ref (see README)");
      });
    });
    return;
  }
  if (!noted) {
    noted = true;
    console.warn("NOTE: interop tests skipped: no reference Python (create .venv-ref as the README says, or set ST_CONVERT_REF_PYTHON)");
  }
  describe.skip(name, () => body(""));
}

/**
 * Runs a helper script from `fixtures/` with the reference Python and returns its stdout.
 * @throws Error with the script's stderr when it exits non-zero.
 */
export function runPython(python: string, script: string, args: readonly string[] = [], input?: string): string {
  const result = spawnSync(python, [fixturePath(script), ...args], {
    input,
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
    env: { ...process.env, PYTHONHASHSEED: "0", JAX_PLATFORMS: "cpu" },
  });
  if (result.status !== 0) {
    throw new Error(`${script} ${args.join(" ")} failed (${result.status}):\n${result.stderr}`);
  }
  return result.stdout;
}

/** Result of running the CLI. */
export interface CliRun {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs the built `st-convert` command; `env` adds to (or overrides) the environment. */
export function runCli(args: readonly string[], options: { cwd?: string; env?: Record<string, string> } = {}): CliRun {
  const result = spawnSync(process.execPath, [CLI_PATH, ...args], {
    encoding: "utf8",
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
  });
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** A fresh temporary directory and a function that removes it. */
export function makeTempDir(prefix = "st-convert-test-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Bytes from a hex string. */
export function fromHex(hex: string): Uint8Array {
  return Uint8Array.from(Buffer.from(hex, "hex"));
}

/** Hex of bytes. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** Removes a path if it exists. */
export function removeQuietly(path: string): void {
  rmSync(path, { force: true, recursive: true });
}
export { safetensorsFile } from "./safetensorsFile.js";
export {
  STRICTER_THAN_REFERENCE,
  header as safetensorsHeader,
  hostileCases as safetensorsHostileCases,
  t as safetensorsEntry,
} from "./safetensorsHostileCases.js";

/**
 * Runs the first ```js block of a README as an ES module inside `packageDir` (so that the package
 * resolves its own name), in a fresh working directory. Returns the module's stdout.
 * @throws Error with stderr when the block fails (an assertion in it, or an exception).
 */
export function runReadmeSynopsis(packageDir: string): string {
  const readme = readFileSync(join(packageDir, "README.md"), "utf8");
  const block = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  if (block === undefined) throw new Error(`${packageDir}/README.md has no js block`);
  const script = join(packageDir, `.readme-synopsis-${process.pid}.mjs`);
  const work = makeTempDir("st-convert-readme-");
  writeFileSync(script, block);
  try {
    const result = spawnSync(process.execPath, [script], { cwd: work.dir, encoding: "utf8" });
    if (result.status !== 0) throw new Error(`README synopsis failed (${result.status}):\n${result.stderr}`);
    return result.stdout;
  } finally {
    rmSync(script, { force: true });
    work.cleanup();
  }
}
export { FUZZ_INPUT_TIMEOUT_MS, type FuzzTarget, fuzzReader, fuzzRuns, fuzzSeed, concat, fuzzTimeout, isProjectError } from "./fuzz.js";
export { type HostileCorpusEntry, recordHostileCases, recordHostileFolders } from "./hostileCorpus.js";

/** Deterministic pseudo-random bytes (xorshift32), so that test data is reproducible. */
export function pseudoRandomBytes(seed: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** The code of the StConvertError a promise rejects with, "ok" when it resolves; any other error propagates. */
export async function errorCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "ok";
  } catch (error) {
    if (!isProjectError(error)) throw error;
    return error.code;
  }
}

/**
 * Runs the CLI and checks a clean refusal: exit 1, nothing on stdout, one line on stderr with the
 * code in brackets and no stack trace. Returns the line.
 */
export function expectOneLineRefusal(args: readonly string[], code: string): string {
  const run = runCli(args);
  expect(run.status, run.stderr).toBe(1);
  expect(run.stdout).toBe("");
  const lines = run.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(`[${code}]`);
  expect(lines[0]).not.toMatch(/\bat .*\.js:\d+/);
  return lines[0]!;
}
export {
  type LoggedRequest,
  type RangeServer,
  type RangeServerOptions,
  type ServedFile,
  type ServedVersion,
  servedBytes,
  sparseFile,
  startRangeServer,
} from "./rangeServer.js";
export {
  type DifferentialCase,
  type DifferentialOptions,
  type DifferentialReport,
  type DifferentialTarget,
  DTYPE_BITS,
  type KnownDifference,
  KNOWN_DIFFERENCES,
  OPEN_DISAGREEMENTS,
  OPEN_WRITER_FAILURES,
  type OpenWriterFailure,
  type OurReader,
  type OurVerdict,
  type ReferenceVerdict,
  ReferenceReader,
  type TensorSet,
  type TensorSpec,
  type TensorView,
  type WriterOutcome,
  type WriterReport,
  type WriterTarget,
  compareVerdicts,
  differentialMutant,
  formatReport,
  formatWriterReport,
  judge,
  randomTensorSet,
  runDifferential,
  runWriterProperty,
  tensorDifference,
} from "./differential.js";
export { MUTATORS, type Mutant, type MutationContext, type Mutator, mutate } from "./mutators.js";
export { Random } from "./Random.js";
export { describeGgml, type GgmlOracle, ggmlLibrary, ggmlOracle } from "./ggmlOracle.js";
