import { defineProject } from "vitest/config";
import { HOOK_TIMEOUT_MS, TEST_TIMEOUT_MS } from "../../vitest.shared.ts";

// The native JSON loops' comparisons with their JavaScript twins again, with no SIMD loop
// (ST_CONVERT_JSON_SIMD=0): the plain C that other CPUs run.
export default defineProject({
  test: {
    name: "json (plain C loops)",
    include: ["test/nativeKernels.test.ts"],
    env: { ST_CONVERT_JSON_SIMD: "0" },
    testTimeout: TEST_TIMEOUT_MS,
    hookTimeout: HOOK_TIMEOUT_MS,
  },
});
