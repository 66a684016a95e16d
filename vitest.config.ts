import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // At least two test files at a time: most tests wait on the processes they start (st-convert,
    // the reference Python, a browser), so a second file fills the other core. On this project's
    // 2-core machines the default (cores less one) ran one file at a time: 676 s quiet; two at a
    // time took 407 s with the other core kept busy (2026-12-06).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // The json package's native loops run again at each narrower level of SIMD (its two extra configs).
    projects: ["packages/*", "!packages/testing", "packages/json/vitest.sse41.config.ts", "packages/json/vitest.plain.config.ts"],
  },
});
