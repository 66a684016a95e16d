import { defineProject } from "vitest/config";
import { HOOK_TIMEOUT_MS, TEST_TIMEOUT_MS } from "../../vitest.shared.ts";

// The native JSON loops' comparisons with their JavaScript twins again, with the AVX2 loops turned
// off (ST_CONVERT_JSON_SIMD=1): a machine with AVX2 runs SSE4.1's loops too, as one without does.
export default defineProject({
  test: {
    name: "json (SSE4.1 loops)",
    include: ["test/nativeKernels.test.ts"],
    env: { ST_CONVERT_JSON_SIMD: "1" },
    testTimeout: TEST_TIMEOUT_MS,
    hookTimeout: HOOK_TIMEOUT_MS,
  },
});
