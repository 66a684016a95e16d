import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { runReadmeSynopsis } from "@st-convert/testing";

it("the README synopsis runs and its assertions hold", () => {
  expect(() => runReadmeSynopsis(fileURLToPath(new URL("..", import.meta.url)))).not.toThrow();
});
