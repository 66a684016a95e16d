/**
 * Outputs that are not a missing path or a plain file: what the file sink does with pipes, devices,
 * links and directories (it must never destroy what it writes into), the descriptor sink, the
 * removal of stale temporary files, and the gathering of small writes.
 */
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  createReadStream,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { basename, join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEFAULT_CHUNK_SIZE } from "@st-convert/core";
import { SINK_COALESCE_BELOW, createDescriptorSink, createFileSink, removeStaleTempFiles } from "@st-convert/core/node";
import { REPO_ROOT, makeTempDir } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const encode = (text: string) => new TextEncoder().encode(text);
const isRoot = process.getuid?.() === 0;

function mkfifo(path: string): void {
  const result = spawnSync("mkfifo", [path]);
  if (result.status !== 0) throw new Error(`mkfifo failed: ${result.stderr}`);
}

/** Makes a device node; false where the system does not let this process (not root, a jail). */
function mknod(path: string, type: "b" | "c", major: number, minor: number): boolean {
  return spawnSync("mknod", [path, type, String(major), String(minor)]).status === 0;
}

/**
 * A FIFO with a reader that never blocks: writers can open it at once, and after the writer has
 * closed, `drain()` returns what it wrote (which must fit the pipe's 64 KiB).
 */
function fifoWithReader(path: string): { drain(): Uint8Array; hasWriter(): boolean; close(): void } {
  mkfifo(path);
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  return {
    /** Whether a writer holds the FIFO open (an empty FIFO then says EAGAIN, not end of file). */
    hasWriter() {
      let n: number;
      try {
        n = readSync(fd, Buffer.alloc(1));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EAGAIN") return true;
        throw error;
      }
      if (n !== 0) throw new Error("the FIFO held bytes");
      return false;
    },
    drain() {
      const parts: Buffer[] = [];
      for (;;) {
        const part = Buffer.alloc(65536);
        const n = readSync(fd, part); // EAGAIN here would mean the writer is still open
        if (n === 0) return new Uint8Array(Buffer.concat(parts));
        parts.push(part.subarray(0, n));
      }
    },
    close: () => closeSync(fd),
  };
}

/** Every path under `root` with its kind, to show that nothing was touched. */
function snapshot(root: string): string[] {
  return readdirSync(root, { recursive: true, encoding: "utf8" })
    .map((name) => {
      const info = lstatSync(join(root, name));
      return `${name} ${info.isSymbolicLink() ? "link" : info.isDirectory() ? "dir" : info.isFile() ? `file ${info.size}` : "other"} ${info.ino}`;
    })
    .sort();
}

describe("pipes and character devices are written through", () => {
  for (const force of [false, true]) {
    it(`a FIFO receives the bytes and stays a FIFO, nothing created beside it (force: ${force})`, async () => {
      const fifo = join(dir, "pipe");
      const reader = fifoWithReader(fifo);
      try {
        const sink = await createFileSink(fifo, { force });
        expect(sink.kind).toBe("stream");
        await sink.write(encode("hello "));
        await sink.write(encode("pipe"));
        await sink.close();
        expect(new TextDecoder().decode(reader.drain())).toBe("hello pipe");
      } finally {
        reader.close();
      }
      expect(lstatSync(fifo).isFIFO()).toBe(true);
      expect(readdirSync(dir)).toEqual(["pipe"]);
    });
  }

  it("abort() on a FIFO just closes it: buffered bytes are dropped, the FIFO stays", async () => {
    const fifo = join(dir, "pipe");
    const reader = fifoWithReader(fifo);
    try {
      const sink = await createFileSink(fifo, { force: true });
      expect(reader.hasWriter()).toBe(true);
      await sink.write(encode("dropped"));
      await sink.abort();
      await sink.abort();
      expect(reader.hasWriter()).toBe(false);
      expect(reader.drain()).toEqual(new Uint8Array(0));
      await expect(sink.write(encode("x"))).rejects.toMatchObject({ code: "Io" });
    } finally {
      reader.close();
    }
    expect(lstatSync(fifo).isFIFO()).toBe(true);
    expect(readdirSync(dir)).toEqual(["pipe"]);
  });

  it("/dev/null is written into without --force and stays a character device", async () => {
    const before = statSync("/dev/null");
    const sink = await createFileSink("/dev/null");
    expect(sink.kind).toBe("stream");
    await sink.write(new Uint8Array(DEFAULT_CHUNK_SIZE));
    await sink.write(encode("small"));
    await sink.close();
    const after = lstatSync("/dev/null");
    expect(after.isCharacterDevice()).toBe(true);
    expect([after.ino, after.rdev]).toEqual([before.ino, before.rdev]);
  });

  it("a character device is written into with --force, never renamed over", async (context) => {
    const device = join(dir, "null");
    if (!mknod(device, "c", 1, 3)) context.skip(); // the null device, made here so that nothing shared is at risk
    const sink = await createFileSink(device, { force: true });
    expect(sink.kind).toBe("stream");
    await sink.write(encode("gone"));
    await sink.close();
    expect(lstatSync(device).isCharacterDevice()).toBe(true);
    expect(readdirSync(dir)).toEqual(["null"]);
  });

  it("a symbolic link to a device is written through and stays a link", async () => {
    const link = join(dir, "out");
    symlinkSync("/dev/null", link);
    const sink = await createFileSink(link, { force: true });
    expect(sink.kind).toBe("stream");
    await sink.write(encode("x"));
    await sink.close();
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe("/dev/null");
    expect(readdirSync(dir)).toEqual(["out"]);
  });
});

describe("/dev/stdout is the process's own standard output", () => {
  const nodeEntry = pathToFileURL(join(REPO_ROOT, "packages", "core", "dist", "node.js")).href;
  // No force: writing into stdout replaces nothing.
  const script = `const { createFileSink } = await import(${JSON.stringify(nodeEntry)});
const sink = await createFileSink("/dev/stdout");
if (sink.kind !== "stream") throw new Error("kind " + sink.kind);
await sink.write(new TextEncoder().encode("tensor bytes\\n"));
await sink.close();`;
  const run = (stdout: "pipe" | number) =>
    spawnSync(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", stdout, "pipe"], encoding: "utf8" });

  it("a pipe on stdout receives the bytes", () => {
    const result = run("pipe");
    expect(result.stderr).toBe("");
    expect(result.stdout).toBe("tensor bytes\n");
    expect(lstatSync("/dev/stdout").isSymbolicLink()).toBe(true);
  });

  it("a file on stdout opened to append (>>) is appended to in place, not replaced", () => {
    const file = join(dir, "log.txt");
    writeFileSync(file, "old line\n");
    const inode = statSync(file).ino;
    const fd = openSync(file, "a");
    let result: ReturnType<typeof run>;
    try {
      result = run(fd);
    } finally {
      closeSync(fd);
    }
    expect(result.stderr).toBe("");
    expect(readFileSync(file, "utf8")).toBe("old line\ntensor bytes\n");
    expect(statSync(file).ino).toBe(inode);
    expect(readdirSync(dir)).toEqual(["log.txt"]);
  });
});

describe("symbolic links are written through", () => {
  it("the file a link points to is replaced (only with force) and keeps its mode; the link stays a link", async () => {
    const real = join(dir, "real.bin");
    const link = join(dir, "link.bin");
    writeFileSync(real, "old");
    chmodSync(real, 0o640);
    symlinkSync("real.bin", link);
    await expect(createFileSink(link)).rejects.toMatchObject({ code: "OutputExists", file: link });
    expect(readFileSync(real, "utf8")).toBe("old");

    const sink = await createFileSink(link, { force: true });
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    expect(sink.targetPath).toBe(join(realpathSync(dir), "real.bin"));
    await sink.write(encode("new"));
    await sink.close();
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe("real.bin");
    expect(readFileSync(real, "utf8")).toBe("new");
    expect(statSync(real).mode & 0o777).toBe(0o640);
    expect(readdirSync(dir).sort()).toEqual(["link.bin", "real.bin"]);
  });

  it("a dangling link: the file it names is created, `..` resolved from the link's real folder", async () => {
    // dir/a/alias -> ../sub, so dir/a/alias/link is dir/sub/link, and its "../made.bin" is dir/made.bin
    // (a lexical resolution would say dir/a/made.bin).
    mkdirSync(join(dir, "a"));
    mkdirSync(join(dir, "sub"));
    symlinkSync("../sub", join(dir, "a", "alias"));
    symlinkSync("../made.bin", join(dir, "sub", "link"));
    const sink = await createFileSink(join(dir, "a", "alias", "link"));
    expect(sink.kind).toBe("file");
    await sink.write(encode("made"));
    await sink.close();
    expect(readFileSync(join(dir, "made.bin"), "utf8")).toBe("made");
    expect(existsSync(join(dir, "a", "made.bin"))).toBe(false);
    expect(lstatSync(join(dir, "sub", "link")).isSymbolicLink()).toBe(true);
    expect(readdirSync(join(dir, "sub"))).toEqual(["link"]);
  });

  it("a dangling link into a missing folder is an Io error, and nothing is created", async () => {
    const link = join(dir, "link");
    symlinkSync("missing/out.bin", link);
    await expect(createFileSink(link, { force: true })).rejects.toMatchObject({ code: "Io", file: link });
    expect(readdirSync(dir)).toEqual(["link"]);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
  });

  it("a loop of links is refused, even with force, and the links stay", async () => {
    symlinkSync("b", join(dir, "a"));
    symlinkSync("a", join(dir, "b"));
    await expect(createFileSink(join(dir, "a"), { force: true })).rejects.toMatchObject({ code: "Io", rule: expect.stringMatching(/symbolic links/) });
    expect(lstatSync(join(dir, "a")).isSymbolicLink()).toBe(true);
    expect(readdirSync(dir).sort()).toEqual(["a", "b"]);
  });
});

describe("what is never written", () => {
  it("a directory, with or without a trailing slash, with or without force: 'is a directory', nothing touched", async () => {
    const sub = join(dir, "sub");
    mkdirSync(sub);
    writeFileSync(join(sub, "keep.bin"), "keep");
    symlinkSync("sub", join(dir, "to-sub"));
    const before = snapshot(dir);
    for (const path of [sub, `${sub}/`, join(dir, "to-sub"), join(dir, "new-folder/")]) {
      for (const force of [false, true]) {
        await expect(createFileSink(path, { force }), `${path} (force: ${force})`).rejects.toMatchObject({
          code: "Io",
          file: path,
          rule: expect.stringMatching(/is a directory/),
        });
      }
    }
    expect(snapshot(dir)).toEqual(before);
  });

  it("a block device and a socket are refused, even with force, and left in place", async () => {
    const socket = join(dir, "sock");
    const server = createServer();
    server.listen(socket);
    await once(server, "listening");
    try {
      const block = join(dir, "disk");
      const paths = mknod(block, "b", 7, 0) ? [block, socket] : [socket]; // a loop device node, never opened
      const before = snapshot(dir);
      for (const path of paths) {
        for (const force of [false, true]) {
          await expect(createFileSink(path, { force }), path).rejects.toMatchObject({
            code: "Io",
            rule: expect.stringMatching(/is a (block device|socket); st-convert writes only regular files, pipes/),
          });
        }
      }
      expect(snapshot(dir)).toEqual(before);
      if (paths.includes(block)) expect(lstatSync(block).isBlockDevice()).toBe(true);
      expect(lstatSync(socket).isSocket()).toBe(true);
    } finally {
      server.close();
      await once(server, "close");
    }
  });
});

describe("modes and owners", () => {
  it("--force over a 0600 file leaves 0600, set on the temporary file before any byte", async () => {
    const target = join(dir, "secret.bin");
    writeFileSync(target, "old");
    chmodSync(target, 0o600);
    const sink = await createFileSink(target, { force: true });
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    expect(statSync(sink.tempPath).mode & 0o777).toBe(0o600);
    await sink.write(encode("new"));
    await sink.close();
    expect(readFileSync(target, "utf8")).toBe("new");
    expect(statSync(target).mode & 0o777).toBe(0o600);
  });

  it("--force keeps wide modes too (0664), which the umask would narrow", async () => {
    const target = join(dir, "shared.bin");
    writeFileSync(target, "old");
    chmodSync(target, 0o664);
    const sink = await createFileSink(target, { force: true });
    await sink.write(encode("new"));
    await sink.close();
    expect(statSync(target).mode & 0o777).toBe(0o664);
  });

  it.runIf(isRoot)("--force run as root keeps the replaced file's owner and group", async () => {
    const target = join(dir, "users.bin");
    writeFileSync(target, "old");
    chownSync(target, 1234, 5678);
    const sink = await createFileSink(target, { force: true });
    await sink.write(encode("new"));
    await sink.close();
    expect(statSync(target)).toMatchObject({ uid: 1234, gid: 5678 });
  });

  it("a new file gets 0666 less the umask", async () => {
    const previous = process.umask(0o027);
    try {
      const target = join(dir, "new.bin");
      const sink = await createFileSink(target);
      await sink.write(encode("x"));
      await sink.close();
      expect(statSync(target).mode & 0o777).toBe(0o640);
    } finally {
      process.umask(previous);
    }
  });
});

describe("stale temporary files", () => {
  /** A process id that no process has: one of a child that has exited (and been reaped). */
  function deadPid(): number {
    for (let attempt = 0; attempt < 5; attempt++) {
      const pid = spawnSync(process.execPath, ["-e", ""]).pid;
      try {
        process.kill(pid, 0);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ESRCH") return pid;
      }
    }
    throw new Error("no free process id found");
  }

  it("removes ours of dead processes only: live ones, other names and non-files stay", async () => {
    const dead = deadPid();
    const target = join(dir, "out.bin");
    writeFileSync(target, "the output");
    const stale = join(dir, `.out.bin.${dead}-k3j9x0qa.tmp`);
    const staleShortTag = join(dir, `.out.bin.${dead}-z1.tmp`);
    writeFileSync(stale, new Uint8Array(1000));
    writeFileSync(staleShortTag, "");
    const kept = [
      `.out.bin.${process.pid}-k3j9x0qa.tmp`, // this process: a sink may be writing it
      `.out.bin.${dead}-k3j9x0qa.tmp.bak`,
      `.out.bin.${dead}-K3J9X0QA.tmp`,
      `.out.bin.${dead}-k3j9x0qa9.tmp`,
      `.out.bin.0${dead}-k3j9x0qa.tmp`,
      `.out.bin.${dead}.tmp`,
      `.other.bin.${dead}-k3j9x0qa.tmp`,
      `out.bin.${dead}-k3j9x0qa.tmp`,
      `..out.bin.${dead}-k3j9x0qa.tmp`,
    ];
    for (const name of kept) writeFileSync(join(dir, name), "");
    mkdirSync(join(dir, `.out.bin.${dead}-dir00000.tmp`));
    symlinkSync("out.bin", join(dir, `.out.bin.${dead}-link0000.tmp`));
    kept.push(`.out.bin.${dead}-dir00000.tmp`, `.out.bin.${dead}-link0000.tmp`, "out.bin");

    expect((await removeStaleTempFiles(target)).sort()).toEqual([stale, staleShortTag].sort());
    expect(readdirSync(dir).sort()).toEqual(kept.sort());
    expect(await removeStaleTempFiles(target)).toEqual([]);
  });

  it("knows the names the sink gives its temporary files", async () => {
    const target = join(dir, "model.safetensors");
    const sink = await createFileSink(target);
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    // Large enough to go through its temporary file at once (a small output has none until close).
    await sink.write(new Uint8Array(SINK_COALESCE_BELOW));
    const left = join(dir, basename(sink.tempPath).replace(`.${process.pid}-`, `.${deadPid()}-`));
    writeFileSync(left, "left by a killed run");
    expect(await removeStaleTempFiles(target)).toEqual([left]);
    expect(existsSync(sink.tempPath)).toBe(true);
    await sink.abort();
  });

  it("looks beside the file a link leads to, where the sink writes", async () => {
    mkdirSync(join(dir, "real"));
    symlinkSync("real/out.bin", join(dir, "link.bin"));
    const stale = join(realpathSync(dir), "real", `.out.bin.${deadPid()}-abcdefgh.tmp`);
    writeFileSync(stale, "");
    expect(await removeStaleTempFiles(join(dir, "link.bin"))).toEqual([stale]);
    expect(readdirSync(join(dir, "real"))).toEqual([]);
  });

  it("removes nothing for a missing folder", async () => {
    expect(await removeStaleTempFiles(join(dir, "missing", "out.bin"))).toEqual([]);
  });
});

describe("descriptor sink", () => {
  it("a pipe whose reader went away fails with BrokenPipe, on close() and on a large write", async () => {
    const fifo = join(dir, "pipe");
    const reader = fifoWithReader(fifo);
    const writer = openSync(fifo, "w");
    reader.close();
    try {
      const small = createDescriptorSink(writer, "<stdout>");
      expect(small.kind).toBe("stream");
      await small.write(encode("gathered, not yet written"));
      await expect(small.close()).rejects.toMatchObject({ code: "BrokenPipe", file: "<stdout>" });
      await small.abort();
      const large = createDescriptorSink(writer, "<stdout>");
      await expect(large.write(new Uint8Array(DEFAULT_CHUNK_SIZE))).rejects.toMatchObject({ code: "BrokenPipe", file: "<stdout>" });
      await expect(large.write(encode("x"))).rejects.toMatchObject({ code: "BrokenPipe" });
      await large.abort();
    } finally {
      closeSync(writer);
    }
  });

  it("a FIFO opened by path whose reader went away fails with BrokenPipe too", async () => {
    const fifo = join(dir, "pipe");
    const reader = fifoWithReader(fifo);
    const sink = await createFileSink(fifo);
    reader.close();
    await expect(sink.write(new Uint8Array(DEFAULT_CHUNK_SIZE))).rejects.toMatchObject({ code: "BrokenPipe", file: fifo });
    await sink.abort();
    expect(lstatSync(fifo).isFIFO()).toBe(true);
  });

  it("a full non-blocking pipe (as stdout is once Node has used it) is waited for, and gets every byte", async () => {
    const fifo = join(dir, "pipe");
    mkfifo(fifo);
    const opener = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
    const stream = createReadStream(fifo, { highWaterMark: 4096 });
    const received: Buffer[] = [];
    stream.on("data", (part) => received.push(part as Buffer));
    const ended = once(stream, "close");
    await once(stream, "open");
    closeSync(opener);
    // Many times the pipe's 64 KiB, read slowly: the writes meet EAGAIN.
    const bytes = Uint8Array.from({ length: 4 * 1024 * 1024 + 3 }, (_, i) => (i * 31) & 0xff);
    try {
      const sink = createDescriptorSink(writer, "pipe");
      await sink.write(bytes.subarray(0, 3));
      await sink.write(bytes.subarray(3));
      await sink.close();
    } finally {
      closeSync(writer);
    }
    await ended;
    expect(Buffer.compare(Buffer.concat(received), bytes)).toBe(0);
  });

  it("writes at the descriptor's position, leaves it open, and gathers small writes into the same bytes", async () => {
    const file = join(dir, "out.bin");
    writeFileSync(file, "head:");
    const fd = openSync(file, "a");
    const expected: number[] = [...encode("head:")];
    try {
      const sink = createDescriptorSink(fd);
      for (let i = 0; i < 2000; i++) {
        const part = Uint8Array.from({ length: 1 + (i % 700) }, (_, j) => (i + j) & 0xff);
        expected.push(...part);
        await sink.write(part);
        part.fill(0); // the caller may reuse its buffer once the write settled
      }
      const big = Uint8Array.from({ length: DEFAULT_CHUNK_SIZE }, (_, j) => (j * 7) & 0xff);
      await sink.write(big);
      for (const b of big) expected.push(b);
      await sink.write(encode("tail"));
      expected.push(...encode("tail"));
      await sink.close();
      expect(() => statSync(file)).not.toThrow();
      writeFileSync(fd, "!"); // still open: the descriptor is the caller's
      expected.push(...encode("!"));
    } finally {
      closeSync(fd);
    }
    expect(Buffer.compare(readFileSync(file), Buffer.from(expected))).toBe(0);
  });

  it("refuses a directory's descriptor", () => {
    const fd = openSync(dir, "r");
    try {
      expect(() => createDescriptorSink(fd, "dir")).toThrow(expect.objectContaining({ code: "Io", rule: expect.stringMatching(/is a directory/) }));
    } finally {
      closeSync(fd);
    }
  });
});

describe("small writes are gathered", () => {
  it("a small chunk is copied and kept back, a large one is written through before write() settles", async () => {
    const target = join(dir, "out.bin");
    const sink = await createFileSink(target);
    if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
    const expected: number[] = [];
    const small = Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8);
    await sink.write(small);
    expected.push(...small);
    small.fill(0xee); // reused by the caller, as pipeTensor does: the copy keeps the bytes written
    // Nothing has left the buffer, so no file was made yet.
    expect(existsSync(sink.tempPath)).toBe(false);

    const big = Uint8Array.from({ length: DEFAULT_CHUNK_SIZE }, (_, i) => (i * 13) & 0xff);
    await sink.write(big);
    for (const b of big) expected.push(b);
    expect(statSync(sink.tempPath).size).toBe(8 + DEFAULT_CHUNK_SIZE);

    // 3 MB of 1000-byte chunks: the buffer fills and is written out several times.
    for (let i = 0; i < 3000; i++) {
      const part = new Uint8Array(1000).fill(i & 0xff);
      await sink.write(part);
      expected.push(...part);
    }
    await sink.close();
    expect(Buffer.compare(readFileSync(target), Buffer.from(expected))).toBe(0);
    expect(readdirSync(dir)).toEqual(["out.bin"]);
  });

  it("a gathered write that fails when written out fails close()", async (context) => {
    // /dev/full takes no byte: every write fails with ENOSPC.
    if (!existsSync("/dev/full")) context.skip();
    const sink = await createFileSink("/dev/full");
    await sink.write(encode("gathered"));
    await expect(sink.close()).rejects.toMatchObject({ code: "Io", rule: expect.stringMatching(/no space left/) });
    await sink.abort();
    expect(lstatSync("/dev/full").isCharacterDevice()).toBe(true);
  });
});
