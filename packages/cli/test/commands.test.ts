/**
 * The command line as a Unix user meets it: one command per word with its own help, typos
 * answered with the nearest option, `-o`, `-` for stdin and stdout, a closed pipe, usage errors
 * that exit 2, and the messages' counts.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { convert, convertMany, inspect, main, renderProgress } from "st-convert";
import { CLI_PATH, fixturePath, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const mixed = fixturePath("safetensors", "mixed.safetensors");

/** A safetensors file of `count` one-byte U8 tensors named t0, t1, …. */
function manyTensors(path: string, count: number): void {
  const entries = Array.from({ length: count }, (_, i) => `"t${i}":{"dtype":"U8","shape":[1],"data_offsets":[${i},${i + 1}]}`);
  writeFileSync(path, safetensorsFile(`{${entries.join(",")}}`, count));
}

/** Runs a shell pipeline with the built command as $ST; returns its status, stdout and stderr. */
function pipeline(script: string): { status: number; stdout: string; stderr: string } {
  const run = spawnSync("bash", ["-c", script], { encoding: "utf8", env: { ...process.env, ST: `${process.execPath} ${CLI_PATH}` } });
  return { status: run.status ?? -1, stdout: run.stdout, stderr: run.stderr };
}

describe("commands and their help", () => {
  it("st-convert help, help info, info --help and convert --help each print their own text", () => {
    const general = runCli(["help"]);
    expect(general.status).toBe(0);
    expect(general.stdout).toMatch(/Commands:\n {2}convert .*\n {2}batch .*\n {2}info .*\n {2}hash .*\n {2}stats .*\n {2}diff .*\n {2}help /);
    expect(runCli(["--help"]).stdout).toBe(general.stdout);
    const info = runCli(["help", "info"]);
    expect(info.stdout).toMatch(/^Usage: st-convert info <file>/);
    expect(runCli(["info", "--help"]).stdout).toBe(info.stdout);
    expect(runCli(["convert", "--help"]).stdout).toMatch(/^Usage: st-convert \[convert\] <input> <output>/);
    expect(runCli(["help", "batch"]).stdout).toMatch(/^Usage: st-convert \[batch\] <inputs or folders\.\.\.> --out-dir DIR/);
    for (const command of ["hash", "stats", "diff"]) {
      const help = runCli(["help", command]);
      expect(help.stdout).toMatch(new RegExp(`^Usage: st-convert ${command} <`));
      expect(runCli([command, "--help"]).stdout).toBe(help.stdout);
    }
    expect(runCli(["help", "bogus"])).toMatchObject({
      status: 2,
      stderr: expect.stringMatching(/no command "bogus"; the commands are convert, batch, info, hash, stats, diff, help/),
    });
  });

  it("the word convert may be given or left out", () => {
    expect(runCli(["convert", mixed, join(dir, "a.safetensors")]).status).toBe(0);
    expect(readFileSync(join(dir, "a.safetensors")).equals(readFileSync(mixed))).toBe(true);
  });

  it.each([
    [["--froce", "a", "b"], /^st-convert: unknown option --froce; did you mean --force\?\nTry 'st-convert --help'\.\n$/],
    [["info", "--jsno", "x"], /^st-convert: unknown option --jsno for info; did you mean --json\?\nTry 'st-convert info --help'\.\n$/],
    [["a", "b", "--from"], /^st-convert: --from needs a value\n/],
    [["a", "b", "--force=yes"], /^st-convert: --force takes no value\n/],
    [["a", "--xyzzy"], /^st-convert: unknown option --xyzzy\n/],
    [["a.npz", "b", "--jobs", "2"], /--jobs and --dry-run go with --out-dir/],
  ])("%j is a usage error in the tool's own words (exit 2)", (args, message) => {
    const run = runCli(args);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).not.toMatch(/ERR_PARSE_ARGS|To specify a positional/);
  });
});

describe("format options", () => {
  it("a malformed --dtype declaration is a usage error (exit 2), not a refused input", () => {
    const run = runCli([fixturePath("npy", "sample_model.npz"), join(dir, "x.safetensors"), "--dtype", "V2=F32"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/dtype declaration "V2=F32": F32 has 4 bytes per element, V2 has 2/);
  });

  it("the hint for an undeclared void names options that exist: --dtype on the command line, formatOptions.dtype in the library", async () => {
    const run = runCli([fixturePath("npy", "refuse_bf16_undeclared.npy"), join(dir, "x.safetensors")]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/--dtype V2=BF16/);
    expect(run.stderr).toContain('formatOptions: { dtype: "V2=BF16" }');
    expect(run.stderr).not.toMatch(/`dtypes`/);
    // And the library option the hint names works.
    await convert(fixturePath("npy", "refuse_bf16_undeclared.npy"), join(dir, "y.safetensors"), { formatOptions: { dtype: "V2=BF16" } });
    expect((await inspect(join(dir, "y.safetensors"))).tensors[0]!.dtype).toBe("BF16");
  });
});

describe("-o, -O and -", () => {
  it("-o FILE is the output of a single conversion, and -O the output folder of a batch", () => {
    expect(runCli([mixed, "-o", join(dir, "one.npz")]).status).toBe(0);
    expect(existsSync(join(dir, "one.npz"))).toBe(true);
    expect(runCli([mixed, "-O", join(dir, "many"), "--to", "npz"]).status).toBe(0);
    expect(readdirSync(join(dir, "many"))).toEqual(["mixed.npz"]);
    expect(runCli([mixed, join(dir, "x.npz"), "-o", join(dir, "y.npz")])).toMatchObject({
      status: 2,
      stderr: expect.stringMatching(/the output is given twice/),
    });
  });

  it("- as the output writes stdout (--to says the format), the summary staying on stderr", () => {
    const run = spawnSync(process.execPath, [CLI_PATH, mixed, "-", "--to", "safetensors"], { encoding: "buffer" });
    expect(run.status).toBe(0);
    expect(Buffer.compare(run.stdout, readFileSync(mixed))).toBe(0);
    expect(run.stderr.toString()).toMatch(/-> <stdout> \(safetensors\)/);
    expect(runCli([mixed, "-"])).toMatchObject({ status: 2, stderr: expect.stringMatching(/pass --to/) });
    expect(existsSync("-")).toBe(false);
  });

  it("- as the input reads stdin: from a pipe (spooled) and from a redirected file, the format from the content", () => {
    const piped = spawnSync(process.execPath, [CLI_PATH, "-", join(dir, "piped.safetensors")], { input: readFileSync(mixed), encoding: "utf8" });
    expect(piped.status, piped.stderr).toBe(0);
    expect(readFileSync(join(dir, "piped.safetensors")).equals(readFileSync(mixed))).toBe(true);
    const fd = openSync(fixturePath("npy", "sample_model.npz"), "r");
    try {
      const redirected = spawnSync(process.execPath, [CLI_PATH, "info", "-", "--json"], { stdio: [fd, "pipe", "pipe"], encoding: "utf8" });
      expect(redirected.status, redirected.stderr).toBe(0);
      expect(JSON.parse(redirected.stdout)).toMatchObject({ ok: true, input: { file: "<stdin>", format: "npz" } });
    } finally {
      closeSync(fd);
    }
  });

  it("a closed stdout ends info quietly with status 0, and a conversion to - with 141, never a stack trace", () => {
    const input = join(dir, "many.safetensors");
    manyTensors(input, 20_000);
    const info = pipeline(`$ST info ${input} | head -3 >/dev/null; echo "status=\${PIPESTATUS[0]}" >&2`);
    expect(info.stderr).toBe("status=0\n");
    const data = pipeline(`$ST ${input} - --to json | head -c 10 >/dev/null; echo "status=\${PIPESTATUS[0]}" >&2`);
    expect(data.stderr).toBe("status=141\n");
  });
});

describe("outputs and selections", () => {
  it("/dev/stdout as the output is written through, not replaced; a directory is refused, touching nothing", () => {
    const run = spawnSync(process.execPath, [CLI_PATH, mixed, "/dev/stdout", "--to", "safetensors", "--force"], { encoding: "buffer" });
    expect(run.status, run.stderr.toString()).toBe(0);
    expect(Buffer.compare(run.stdout, readFileSync(mixed))).toBe(0);
    mkdirSync(join(dir, "adir"));
    for (const args of [
      [mixed, join(dir, "adir"), "--to", "npz"],
      [mixed, `${join(dir, "adir")}/`, "--to", "npz", "--force"],
    ]) {
      const refused = runCli(args, { cwd: dir });
      expect(refused.status).toBe(1);
      expect(refused.stderr).toMatch(/is a directory/);
    }
    expect(readdirSync(dir)).toEqual(["adir"]);
    expect(readdirSync(join(dir, "adir"))).toEqual([]);
  });

  it("an existing output is refused in the command line's words (--force, not the API's option)", () => {
    const out = join(dir, "exists.safetensors");
    writeFileSync(out, "keep");
    const run = runCli([mixed, out]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/exists\.safetensors: .*pass --force to replace it \[OutputExists\]\n$/);
    expect(run.stderr).not.toContain("force: true");
    expect(readFileSync(out, "utf8")).toBe("keep");
  });

  it("a batch removes stale temporaries of its outputs once, reading each output folder once", () => {
    const out = join(dir, "out");
    mkdirSync(out);
    const dead = join(out, ".mixed.npz.4194399-abc123.tmp");
    writeFileSync(dead, "partial");
    const run = runCli([mixed, "--out-dir", out, "--to", "npz"]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr.split(`removed ${dead}`)).toHaveLength(2);
    expect(readdirSync(out)).toEqual(["mixed.npz"]);
  });

  it("--force keeps the replaced file's mode", () => {
    const out = join(dir, "private.safetensors");
    writeFileSync(out, "old", { mode: 0o600 });
    chmodSync(out, 0o600);
    expect(runCli([mixed, out, "--force"]).status).toBe(0);
    expect(statSync(out).mode & 0o777).toBe(0o600);
  });

  it("removes temporary files of its own naming left beside the target by a process that is gone, and says so", () => {
    const out = join(dir, "out.safetensors");
    const dead = join(dir, ".out.safetensors.4194399-abc123.tmp"); // above Linux's largest pid: never alive
    const alive = join(dir, `.out.safetensors.${process.pid}-abc123.tmp`);
    const other = join(dir, ".other.safetensors.4194399-abc123.tmp");
    for (const f of [dead, alive, other]) writeFileSync(f, "partial");
    const run = runCli([mixed, out]);
    expect(run.status).toBe(0);
    expect(run.stderr).toContain(`removed ${dead}, a temporary file left by an interrupted run`);
    expect(readdirSync(dir).sort()).toEqual([".other.safetensors.4194399-abc123.tmp", `.out.safetensors.${process.pid}-abc123.tmp`, "out.safetensors"].sort());
  });

  it("--out-dir naming an existing file is a usage error, not an internal one", () => {
    writeFileSync(join(dir, "afile"), "x");
    const run = runCli([mixed, "--out-dir", join(dir, "afile"), "--to", "npz"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/--out-dir .*afile exists and is not a folder/);
    expect(readFileSync(join(dir, "afile"), "utf8")).toBe("x");
  });

  it("a batch whose output folder is its input folder converts, leaving out only what it writes", () => {
    writeFileSync(join(dir, "a.safetensors"), readFileSync(mixed));
    const run = runCli([".", "--out-dir", ".", "--to", "npz"], { cwd: dir });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/converted 1, skipped 0, failed 0 \(of 1 file\)/);
    expect(readdirSync(dir).sort()).toEqual(["a.npz", "a.safetensors"]);
    // Again: a.npz is this run's own output, not an input; it exists, so it is skipped.
    expect(runCli([".", "--out-dir", ".", "--to", "npz"], { cwd: dir }).stderr).toMatch(/converted 0, skipped 1, failed 0 \(of 1 file\)/);
  });

  it("a --filter that selects nothing is refused (exit 1) unless --allow-empty", () => {
    const out = join(dir, "none.safetensors");
    const run = runCli([mixed, out, "--filter", "^nothing-matches$"]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/keeps none of the input's \d+ tensors; nothing to write \(pass --allow-empty to write one anyway\) \[NothingToWrite\]/);
    expect(existsSync(out)).toBe(false);
    expect(runCli([mixed, out, "--filter", "^nothing-matches$", "--allow-empty"]).status).toBe(0);
    expect(existsSync(out)).toBe(true);
  });

  it("a read-only format as the output is a usage error, and hints offer only formats that can be written", () => {
    const run = runCli([mixed, join(dir, "x"), "--to", "safetensors-index"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/safetensors-index can be read but not written; write one of .*safetensors/);
    const unknown = runCli([mixed, join(dir, "out.weird")]);
    expect(unknown.stderr).toMatch(/pass --to \(/);
    expect(unknown.stderr).not.toMatch(/safetensors-index/);
    expect(runCli([mixed, "--out-dir", join(dir, "o"), "--to", "safetensors-index"]).status).toBe(2);
    // No hint offers an index format (read only) as an output: an unknown --to, an unknown
    // extension, a read-only --to, in a single conversion, a batch and a model folder.
    for (const args of [
      [mixed, join(dir, "out.weird")],
      [mixed, join(dir, "x"), "--to", "bogus"],
      [mixed, join(dir, "x"), "--to", "torch-index"],
      [mixed, join(dir, "x"), "--to", "safetensors-index"],
      [mixed, "--out-dir", join(dir, "o"), "--to", "bogus"],
      [mixed, "--out-dir", join(dir, "o"), "--to", "torch-index"],
      [fixturePath("sharded", "hub"), join(dir, "m"), "--to", "bogus"],
      [fixturePath("sharded", "hub"), join(dir, "m"), "--to", "torch-index"],
    ]) {
      const refused = runCli(args);
      expect(refused.status, args.join(" ")).toBe(2);
      expect(refused.stderr, args.join(" ")).toMatch(/(written|pass --to \(|write one of )[^\n]*safetensors, npy, npz, flax, json, torch/);
      expect(refused.stderr.replace(/(--to|can be read but not written|: )(torch|safetensors)-index/g, ""), args.join(" ")).not.toMatch(/-index/);
    }
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a format option that applies to neither side is a warning, not silence", () => {
    const run = runCli([mixed, join(dir, "m.json"), "--compress"]);
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/warning: .*mixed\.safetensors: --compress applies to npz, not to reading safetensors or writing json; ignored/);
    expect(runCli([mixed, join(dir, "m.npz"), "--compress"]).stderr).not.toMatch(/warning/);
  });

  it("counts read as words: 1 tensor, 1 file, digits grouped", () => {
    const one = join(dir, "one.safetensors");
    writeFileSync(one, safetensorsFile('{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1));
    expect(runCli([one, join(dir, "o.safetensors")]).stderr).toMatch(/: 1 tensor, 1 B\n$/);
    expect(runCli(["info", one]).stdout).toMatch(/\n1 tensor, 1 parameter, 1 B \(1 byte\)\n$/);
    const many = join(dir, "many.safetensors");
    manyTensors(many, 1500);
    expect(runCli(["info", many]).stdout).toMatch(/\n1,500 tensors, 1,500 parameters/);
    expect(runCli([one, "--out-dir", join(dir, "b"), "--to", "npz"]).stderr).toMatch(/\(of 1 file\)/);
  });
});

describe("the library's options", () => {
  it("takes patterns as strings, and refuses values that are neither with a coded error", async () => {
    const out = join(dir, "r.safetensors");
    await convert(mixed, out, { rename: [{ pattern: "^model\\.", replacement: "" }], filter: ["weight"] });
    const names = (await inspect(out)).tensors.map((t) => t.name);
    expect(names.length).toBeGreaterThan(0);
    expect(names.every((n) => n.includes("weight") && !n.startsWith("model."))).toBe(true);
    await expect(convert(mixed, join(dir, "x.safetensors"), { filter: [5 as unknown as string] })).rejects.toMatchObject({ code: "InvalidOption" });
    await expect(convert(mixed, join(dir, "x.safetensors"), { filter: "weight" as unknown as string[] })).rejects.toMatchObject({ code: "InvalidOption" });
  });

  it("warnings name their file, in convert() results and as batch events", async () => {
    const result = await convert(mixed, join(dir, "m.npy"), { filter: ["^lm_head"] });
    expect(result.warnings).toContainEqual({ file: join(dir, "m.npy"), message: expect.stringMatching(/^metadata dropped/) });
    const events: { file: string; message: string }[] = [];
    await convertMany([mixed], {
      outDir: join(dir, "b"),
      to: "npy",
      filter: ["^lm_head"],
      onEvent: (e) => e.type === "warning" && events.push({ file: e.file, message: e.message }),
    });
    expect(events.length).toBeGreaterThan(0);
    expect(events.every((e) => e.file === join(dir, "b", "mixed.npy"))).toBe(true);
    const text = runCli([mixed, "--out-dir", join(dir, "c"), "--to", "npy", "--filter", "^lm_head"]);
    expect(text.stderr).toContain(`st-convert: warning: ${join(dir, "c", "mixed.npy")}: metadata`);
  });
});

describe("the progress line", () => {
  it("never reaches the last column, at any width", () => {
    for (let columns = 2; columns <= 200; columns++) {
      for (const total of [1 << 30, undefined]) {
        const line = renderProgress("a/rather/long/path/to/model-00001-of-00004.safetensors", 123456789, total, 3.5, columns);
        expect(line.length, `${columns} columns`).toBeLessThan(columns);
      }
    }
  });

  it("is not drawn on a dumb terminal (no \\r redraws)", async () => {
    const input = join(dir, "in.safetensors");
    manyTensors(input, 10);
    let stderr = "";
    const run = (term: string) =>
      main([input, join(dir, `o-${term}.safetensors`)], {
        stdout: () => {},
        stderr: (t) => {
          stderr += t;
        },
        stderrIsTTY: true,
        columns: 80,
        term,
      });
    expect(await run("dumb")).toBe(0);
    expect(stderr).not.toContain("\r");
  });
});

it("the README's examples run twice in a row, exactly as written, through the root package.json's script", () => {
  const readme = readFileSync(fixturePath("..", "README.md"), "utf8");
  const block = /Examples, from this repository[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(block).toBeDefined();
  const lines = block!.trim().split("\n");
  expect(lines.every((line) => line.startsWith("pnpm st-convert "))).toBe(true);
  // A clone after the README's set-up, seen from its root: the root package.json (whose script
  // `pnpm st-convert` runs) and pnpm-workspace.yaml (without its build policy pnpm checks the
  // install before a script and fails on the build script it was told to skip), with the built
  // packages and the fixtures beside them; out/ is this test's.
  const root = fixturePath("..");
  for (const name of ["package.json", "pnpm-workspace.yaml"]) copyFileSync(join(root, name), join(dir, name));
  for (const name of ["packages", "fixtures", "scripts", "node_modules"]) symlinkSync(join(root, name), join(dir, name));
  // The quick start's last step, which also makes out/.
  const sample = spawnSync("pnpm", ["sample"], { cwd: dir, encoding: "utf8" });
  expect(sample.status, `${sample.stdout}${sample.stderr}`).toBe(0);
  expect(sample.stdout).toMatch(/\$ st-convert info out\/sample\.safetensors\n/);
  for (let round = 0; round < 2; round++) {
    for (const line of lines) {
      const run = spawnSync("bash", ["-c", line], { cwd: dir, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
      expect(run.status, `round ${round + 1}: ${line}\n${run.stdout}${run.stderr}`).toBe(0);
    }
  }
});

it("every built file a README or a doc names by its path exists after the build", () => {
  const root = fixturePath("..");
  const docs = [
    "README.md",
    ...readdirSync(join(root, "docs"))
      .filter((n) => n.endsWith(".md"))
      .map((n) => join("docs", n)),
  ];
  for (const pkg of readdirSync(join(root, "packages")))
    if (existsSync(join(root, "packages", pkg, "README.md"))) docs.push(join("packages", pkg, "README.md"));
  const named = docs.flatMap((doc) => [...readFileSync(join(root, doc), "utf8").matchAll(/packages\/[\w-]+\/dist\/[\w.-]+\.c?js\b/g)].map((m) => [doc, m[0]]));
  expect(named.length).toBeGreaterThan(0);
  for (const [doc, path] of named) expect(existsSync(join(root, path!)), `${doc} names ${path}`).toBe(true);
});

describe("the selection applies before the reader judges a tensor", () => {
  const undeclared = fixturePath("npy", "npz_bf16_undeclared.npz"); // numpy's npz with a bfloat16 member saved as raw V2

  it("--exclude or --filter drops a member the reader would refuse, so the rest converts", () => {
    expect(runCli([undeclared, join(dir, "all.safetensors")])).toMatchObject({
      status: 1,
      stderr: expect.stringMatching(/tensor "bf": .*\[UndeclaredVoidDtype\]/),
    });
    const excluded = runCli([undeclared, join(dir, "ex.safetensors"), "--exclude", "^bf$"]);
    expect(excluded.status, excluded.stderr).toBe(0);
    expect(excluded.stderr).toMatch(/: 11 tensors,/);
    const filtered = runCli([undeclared, join(dir, "f.safetensors"), "--filter", "^w"]);
    expect(filtered.status, filtered.stderr).toBe(0);
    expect(
      (JSON.parse(runCli(["info", join(dir, "f.safetensors"), "--json"]).stdout) as { tensors: { name: string }[] }).tensors.map((t) => t.name).sort(),
    ).toEqual(["w", "wt"]);
    expect(runCli(["info", undeclared, "--exclude", "^bf$"]).status).toBe(0);
  });
});
