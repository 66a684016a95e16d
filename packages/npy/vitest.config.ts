import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "npy", include: ["test/**/*.test.ts"] },
});
