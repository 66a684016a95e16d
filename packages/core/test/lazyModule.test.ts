import { describe, expect, it } from "vitest";
import { lazyModule } from "@st-convert/core";

describe("lazyModule", () => {
  it("loads on the first call only, and every call gets the same module", async () => {
    let loads = 0;
    const module = { value: 42 };
    const load = lazyModule(async () => {
      loads++;
      return module;
    });
    expect(loads).toBe(0);
    const [a, b] = await Promise.all([load(), load()]);
    expect(await load()).toBe(module);
    expect([a, b, loads]).toEqual([module, module, 1]);
  });

  it("tries a failed load again on the next call instead of keeping the failure", async () => {
    let loads = 0;
    const load = lazyModule(async () => {
      loads++;
      if (loads === 1) throw new Error("ENOENT: the chunk is missing");
      return "loaded";
    });
    await expect(load()).rejects.toThrow(/the chunk is missing/);
    expect(await load()).toBe("loaded");
    expect(loads).toBe(2);
  });
});
