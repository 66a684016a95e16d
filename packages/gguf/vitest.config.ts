import { defineProject } from "vitest/config";
import { HOOK_TIMEOUT_MS, TEST_TIMEOUT_MS } from "../../vitest.shared.ts";

export default defineProject({
  test: { name: "gguf", include: ["test/**/*.test.ts"], testTimeout: TEST_TIMEOUT_MS, hookTimeout: HOOK_TIMEOUT_MS },
});
