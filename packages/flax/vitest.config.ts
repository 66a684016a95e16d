import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "flax", include: ["test/**/*.test.ts"] },
});
