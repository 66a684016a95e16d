/**
 * The st-convert command on checkpoints as found in the wild and hostile ones (fixtures/wild, made
 * by torch.save and flax in fixtures/gen_wild.py): a pickle naming code that runs is refused by
 * `info` and `convert` alike (exit 1, one line), `info --json` lists what a pickle names, the
 * selection drops what cannot be converted, a shared-reference bomb is refused, and a training
 * checkpoint says how to take just the model.
 */
import { copyFileSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { expectOneLineRefusal, fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const wild = (name: string) => fixturePath("wild", name);

describe("a checkpoint whose pickle names code that runs when Python loads it", () => {
  for (const file of ["dangerous_system.pt", "dangerous_eval_legacy.pt", "dangerous_getattr.pt", "dangerous_popen_p4.pt", "dangerous_beside.pt"]) {
    it(`${file}: info and convert refuse it with DangerousGlobal, and write nothing`, () => {
      expect(expectOneLineRefusal(["info", wild(file)], "DangerousGlobal")).toMatch(/the pickle names \S+, which runs code/);
      const out = join(dir, "out.safetensors");
      expectOneLineRefusal([wild(file), out], "DangerousGlobal");
      expect(existsSync(out)).toBe(false);
    });
  }

  it("info --json lists the harmless symbols a training checkpoint names, and none for a state dict", () => {
    const training = runCli(["info", fixturePath("torch", "training.pt"), "--json"]);
    expect(training.status, training.stderr).toBe(0);
    expect((JSON.parse(training.stdout) as { globals: string[] }).globals).toContain("argparse.Namespace");
    const views = JSON.parse(runCli(["info", fixturePath("torch", "views.pt"), "--json"]).stdout) as { globals: string[] };
    expect(views.globals).toEqual([]);
  });
});

describe("--exclude drops what a reader would refuse", () => {
  it("complex128, qint8, sparse and nested tensors of a checkpoint; a complex128 array of a flax file", () => {
    expectOneLineRefusal([wild("unconvertible.pt"), join(dir, "all.safetensors")], "UnsupportedGlobal");
    const torch = runCli([wild("unconvertible.pt"), join(dir, "some.safetensors"), "--exclude", "^(z|q|s|n)$"]);
    expect(torch.status, torch.stderr).toBe(0);
    const listed = runCli(["info", join(dir, "some.safetensors")]).stdout;
    expect(listed).toMatch(/\nw\s+F32\s+\[2, 3\]/);
    expect(listed).toMatch(/\nb\s+I64\s+\[2\]/);
    expect(listed).toMatch(/\n2 tensors,/);
    expectOneLineRefusal([wild("unconvertible.msgpack"), join(dir, "flax.safetensors")], "UnknownDtype");
    const flax = runCli([wild("unconvertible.msgpack"), join(dir, "flax.safetensors"), "--exclude", "^a$"]);
    expect(flax.status, flax.stderr).toBe(0);
  });
});

describe("--exclude reaches the shards of a sharded .bin checkpoint", () => {
  it("an excluded unconvertible tensor in a shard, and a shard holding only excluded ones, are never judged", () => {
    copyFileSync(wild("unconvertible.pt"), join(dir, "pytorch_model-00001-of-00002.bin"));
    const weightMap = Object.fromEntries(["w", "b", "z", "q", "s", "n"].map((name) => [name, "pytorch_model-00001-of-00002.bin"]));
    // The second shard is not there at all: a selection that leaves out all it holds never opens it.
    const index = join(dir, "pytorch_model.bin.index.json");
    writeFileSync(index, JSON.stringify({ metadata: {}, weight_map: { ...weightMap, x: "pytorch_model-00002-of-00002.bin" } }));
    expectOneLineRefusal([index, join(dir, "all.safetensors")], "UnsupportedGlobal");
    const run = runCli([index, join(dir, "some.safetensors"), "--exclude", "^(z|q|s|n|x)$"]);
    expect(run.status, run.stderr).toBe(0);
    expect(runCli(["info", join(dir, "some.safetensors")]).stdout).toMatch(/\n2 tensors,/);
    const info = runCli(["info", index, "--filter", "^(w|b)$"]);
    expect(info.status, info.stderr).toBe(0);
  });
});

describe("limits and hints", () => {
  it("a 2 KB pickle that would make a million names is refused with one line", () => {
    expectOneLineRefusal(["info", wild("shared_list_100.pt")], "LimitExceeded");
  });

  it("a training checkpoint with optimizer tensors says once that --key state_dict gives just the model", () => {
    const run = runCli([fixturePath("torch", "training_adam.pt"), join(dir, "all.safetensors")]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr.match(/--key state_dict gives just the model/g)).toHaveLength(1);
  });
});
