/**
 * `convert --verify` / `verify: true`: the output is read back and compared with the digests taken
 * while the input streamed; a writer that changes a byte makes the conversion fail and leaves no output.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type TensorEntry, type TensorFormat, safetensorsFormat, tensorFromBytes } from "@st-convert/core";
import { errorCode, fixturePath, makeTempDir, runCli } from "@st-convert/testing";
import { FORMATS, convert, hash } from "st-convert";

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);
const mixed = fixturePath("safetensors", "mixed.safetensors");

/** Safetensors, but the writer flips one bit of the tensor named `victim`: a broken writer. */
const corrupting: TensorFormat = {
  ...safetensorsFormat,
  name: "corrupting",
  extensions: [".corrupt"],
  async write(tensors, sink, context) {
    const flipped: TensorEntry[] = [];
    for (const t of tensors.tensors) {
      if (t.name !== "model.norm.weight") {
        flipped.push(t);
        continue;
      }
      const parts: Uint8Array[] = [];
      for await (const chunk of t.chunks()) parts.push(Uint8Array.from(chunk));
      const bytes = Buffer.concat(parts);
      bytes[0]! ^= 1;
      flipped.push(tensorFromBytes(t, bytes));
    }
    await safetensorsFormat.write({ metadata: tensors.metadata, tensors: flipped }, sink, context);
  },
};

describe("--verify", () => {
  it("passes for every writable format and gives the digest hash gives", async () => {
    const expected = (await hash(mixed)).digest;
    for (const extension of ["safetensors", "npz", "pt", "json"]) {
      const output = join(dir, `ok.${extension}`);
      const result = await convert(mixed, output, { verify: true });
      expect(result.digest, extension).toBe(expected);
    }
    const run = runCli([mixed, join(dir, "cli.npz"), "--verify", "--json"]);
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, digest: expected });
  });

  it("fails with VerifyFailed naming the tensor and removes the output when a byte differs", async () => {
    const output = join(dir, "bad.corrupt");
    const formats = [...FORMATS, corrupting];
    await expect(convert(mixed, output, { formats, verify: true })).rejects.toMatchObject({
      code: "VerifyFailed",
      file: output,
      tensor: "model.norm.weight",
    });
    expect(existsSync(output)).toBe(false);
    // Without --verify the broken writer's output stays, as written.
    await convert(mixed, output, { formats });
    expect(existsSync(output)).toBe(true);
  });

  it("verifies sharded outputs through their index, and refuses a stream as the output", async () => {
    const result = await convert(mixed, join(dir, "shards/"), { verify: true, maxShardSize: 600 });
    expect(result.files.length).toBeGreaterThan(2);
    expect(result.digest).toBe((await hash(mixed)).digest);
    const sink = { write: async () => {}, close: async () => {}, abort: async () => {} };
    expect(await errorCode(convert(mixed, sink as never, { verify: true, to: "npz" }))).toBe("InvalidOption");
  });
});
