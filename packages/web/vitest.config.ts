import { defineProject } from "vitest/config";
import { HOOK_TIMEOUT_MS, SPAWNING_TEST_TIMEOUT_MS } from "../../vitest.shared.ts";

export default defineProject({
  // Browser tests spawn Chromium and the command: the spawning budget.
  test: { name: "web", include: ["test/**/*.test.ts"], testTimeout: SPAWNING_TEST_TIMEOUT_MS, hookTimeout: HOOK_TIMEOUT_MS },
});
