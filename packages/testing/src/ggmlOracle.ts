/**
 * ggml's C reference (libggml-base) for the GGUF tests: golden fixtures are made by it, and interop
 * tests compare with it. `scripts/ggml-oracle.sh` builds it into `.ggml-oracle/`; `.ci/run` builds it
 * and requires these tests. The library is called through `fixtures/reference_ggml.py` (ctypes, the
 * standard library only), so any python3 drives it.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "vitest";
import { fixturePath, REPO_ROOT, referencePython } from "./index.js";

/** libggml-base: `ST_CONVERT_GGML_LIB`, else the one `scripts/ggml-oracle.sh` built in `.ggml-oracle/`, else none. */
export function ggmlLibrary(): string | undefined {
  const fromEnv = process.env.ST_CONVERT_GGML_LIB;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const local = join(REPO_ROOT, ".ggml-oracle", "build", "src", "libggml-base.so");
  return existsSync(local) ? local : undefined;
}

/** Runs the ggml oracle's helper script; the ggml type tables and kernels come back as bytes. */
export interface GgmlOracle {
  /** The library's path. */
  library: string;
  /** `ggml_quantize_chunk(type, rows, …, NULL)`: F32 rows of `nPerRow` elements to blocks. */
  quantize(type: number, rows: Float32Array, nPerRow: number): Uint8Array;
  /** The type's `to_float` over whole blocks. */
  dequantize(type: number, blocks: Uint8Array): Float32Array;
  /** `ggml_get_type_traits` for every type id below GGML_TYPE_COUNT that has a block size. */
  traits(): Record<string, { name: string; blockSize: number; typeSize: number }>;
}

function runOracle(library: string, args: readonly string[], input?: Uint8Array): Buffer {
  const python = referencePython() ?? "python3";
  const result = spawnSync(python, [fixturePath("reference_ggml.py"), library, ...args], { input, maxBuffer: 1024 * 1024 * 1024 });
  if (result.status !== 0) throw new Error(`reference_ggml.py ${args.join(" ")} failed (${result.status}):\n${result.stderr}`);
  return result.stdout;
}

/** The oracle over a library path. */
export function ggmlOracle(library: string): GgmlOracle {
  return {
    library,
    quantize: (type, rows, nPerRow) => {
      const out = runOracle(library, ["quantize", String(type), String(nPerRow)], new Uint8Array(rows.buffer, rows.byteOffset, rows.byteLength));
      return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
    },
    dequantize: (type, blocks) => {
      const out = runOracle(library, ["dequantize", String(type)], blocks);
      return new Float32Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.byteLength));
    },
    traits: () => JSON.parse(runOracle(library, ["traits"]).toString("utf8")),
  };
}

let noted = false;

/**
 * A `describe` for tests against ggml's C. Without the library the block is skipped with a visible
 * note, unless `ST_CONVERT_REQUIRE_GGML=1` (CI), where its absence fails.
 */
export function describeGgml(name: string, body: (oracle: GgmlOracle) => void): void {
  const library = ggmlLibrary();
  if (library !== undefined && existsSync(library)) {
    describe(name, () => body(ggmlOracle(library)));
    return;
  }
  if (process.env.ST_CONVERT_REQUIRE_GGML === "1") {
    describe(name, () => {
      it("needs ggml's C reference", () => {
        throw new Error(
          `ST_CONVERT_REQUIRE_GGML=1 but no libggml-base${library === undefined ? "" : ` at ${library}`}: run scripts/ggml-oracle.sh or set ST_CONVERT_GGML_LIB`,
        );
      });
    });
    return;
  }
  if (!noted) {
    noted = true;
    console.warn("NOTE: ggml interop tests skipped: no libggml-base (run scripts/ggml-oracle.sh, or set ST_CONVERT_GGML_LIB)");
  }
  describe.skip(name, () => body(ggmlOracle("")));
}
