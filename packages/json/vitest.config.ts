import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "json", include: ["test/**/*.test.ts"] },
});
