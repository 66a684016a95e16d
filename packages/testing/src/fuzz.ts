/**
 * The fuzz harness every reader's property test uses: arbitrary bytes and mutations of valid seed
 * files (bit flips, byte sets, truncations, insertions, duplicated slices) must give either a valid
 * result or an StConvertError with a code: never another exception, never a hang.
 *
 * Runs are seeded, so a failure reproduces. `FUZZ_RUNS` (default 150 per target) and `FUZZ_SEED`
 * (default fixed) tune it: CI runs the short default; `pnpm fuzz` runs long.
 */
import fc from "fast-check";
import { it } from "vitest";

/** A reader under test: it must read everything it can (headers and every tensor's bytes). */
export interface FuzzTarget {
  /** What is being read, for test names. */
  readonly name: string;
  /** Valid files to mutate. */
  readonly seeds: readonly Uint8Array[];
  /** Reads `bytes` completely; resolves on a valid file, rejects on a refused one. */
  read(bytes: Uint8Array): Promise<unknown>;
  /** Largest random input, in bytes. Default 4096. */
  readonly maxLength?: number;
}

/** Per-input bound that catches hangs (not a performance check: machines are noisy). */
export const FUZZ_INPUT_TIMEOUT_MS = 5_000;

const brand = Symbol.for("st-convert.error");

/**
 * True for an StConvertError with a code. The brand is checked directly: this package does not
 * depend on core (core's tests depend on it), and the brand is what `isStConvertError` checks too.
 */
export function isProjectError(error: unknown): error is { code: string } {
  return (
    typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[brand] === true && typeof (error as { code: unknown }).code === "string"
  );
}

/** Runs of each property: `FUZZ_RUNS` or 150. */
export function fuzzRuns(): number {
  const runs = Number(process.env.FUZZ_RUNS);
  return Number.isInteger(runs) && runs > 0 ? runs : 150;
}

/** A test timeout that grows with `FUZZ_RUNS`: at least a minute, 200 ms a run beyond that. */
export function fuzzTimeout(): number {
  return Math.max(60_000, fuzzRuns() * 200);
}

/** The seed of the random generator: `FUZZ_SEED` or a fixed value, so CI runs are reproducible. */
export function fuzzSeed(): number {
  const seed = Number(process.env.FUZZ_SEED);
  return Number.isInteger(seed) ? seed : 20261129;
}

type Mutation =
  | { kind: "flip"; at: number; bit: number }
  | { kind: "set"; at: number; value: number }
  | { kind: "truncate"; at: number }
  | { kind: "insert"; at: number; bytes: Uint8Array }
  | { kind: "duplicate"; at: number; length: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant("set" as const), at: fc.nat(), value: fc.constantFrom(0, 1, 0x7f, 0x80, 0xff, 0x20, 0x22, 0x7b, 0x5b, 0x30, 0x39) }),
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("insert" as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
  fc.record({ kind: fc.constant("duplicate" as const), at: fc.nat(), length: fc.integer({ min: 1, max: 64 }) }),
);

function mutate(seed: Uint8Array, mutations: readonly Mutation[]): Uint8Array {
  let bytes: Uint8Array = seed.slice();
  for (const m of mutations) {
    if (bytes.byteLength === 0) break;
    const at = m.at % bytes.byteLength;
    switch (m.kind) {
      case "flip":
        bytes[at]! ^= 1 << m.bit;
        break;
      case "set":
        bytes[at] = m.value;
        break;
      case "truncate":
        bytes = bytes.slice(0, at);
        break;
      case "insert":
        bytes = concat(bytes.subarray(0, at), m.bytes, bytes.subarray(at));
        break;
      case "duplicate":
        bytes = concat(bytes.subarray(0, at), bytes.subarray(at, at + m.length), bytes.subarray(at));
        break;
    }
  }
  return bytes;
}

/** The bytes of `parts`, one after the other, in a new array. */
export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** Reads `bytes` and classifies the outcome; throws (failing the property) on anything but ok or a project error. */
async function checkOne(target: FuzzTarget, bytes: Uint8Array): Promise<"ok" | string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${target.name}: no answer within ${FUZZ_INPUT_TIMEOUT_MS} ms (hang?)`)), FUZZ_INPUT_TIMEOUT_MS);
  });
  try {
    await Promise.race([target.read(bytes), timeout]);
    return "ok";
  } catch (error) {
    if (isProjectError(error)) return error.code;
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Declares the fuzz tests of one reader: random bytes, mutated seeds, and every truncation of
 * each seed (deterministic).
 */
export function fuzzReader(target: FuzzTarget): void {
  const runs = fuzzRuns();
  const seed = fuzzSeed();
  const timeout = fuzzTimeout();

  it(
    `${target.name}: random bytes give a result or a coded error`,
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.uint8Array({ maxLength: target.maxLength ?? 4096 }), async (bytes) => {
          await checkOne(target, bytes);
        }),
        { numRuns: runs, seed },
      );
    },
    timeout,
  );

  it(
    `${target.name}: mutated valid files give a result or a coded error`,
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: target.seeds.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 6 }), async (which, mutations) => {
          await checkOne(target, mutate(target.seeds[which]!, mutations));
        }),
        { numRuns: runs * 4, seed },
      );
    },
    timeout,
  );

  it(
    `${target.name}: every truncation of a valid file gives a result or a coded error`,
    async () => {
      for (const file of target.seeds) {
        for (let length = 0; length < file.byteLength; length++) await checkOne(target, file.subarray(0, length));
      }
    },
    timeout,
  );
}
