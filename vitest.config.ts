import { defineConfig } from "vitest/config";

export default defineConfig({
  // The json package's native loops run again at each narrower level of SIMD (its two extra configs).
  test: { projects: ["packages/*", "!packages/testing", "packages/json/vitest.sse41.config.ts", "packages/json/vitest.plain.config.ts"] },
});
