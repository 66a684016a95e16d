/**
 * Inputs by URL: `hf://` and URL parsing, then the command against servers this file starts on
 * 127.0.0.1 (never a public address): traffic of `info` measured by the server's byte counts,
 * conversions from a URL byte-identical to those of the local file, the token kept on the Hub's
 * origin, and the one-line refusals.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HTTP_READ_AHEAD, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { formatSize, main } from "st-convert";
import {
  CLI_PATH,
  type CliRun,
  type RangeServer,
  fixturePath,
  makeTempDir,
  pseudoRandomBytes,
  safetensorsFile,
  servedBytes,
  sparseFile,
  startRangeServer,
} from "@st-convert/testing";
import { hubResolveUrl, isRemoteInput, locateRemoteInput, parseHubPath, remoteSibling } from "../src/remoteInput.js";

describe("remote inputs: names", () => {
  it("recognises http://, https:// and hf:// inputs, and nothing else", () => {
    expect(["http://h/a", "HTTPS://h/a", "hf://o/r/f"].map(isRemoteInput)).toEqual([true, true, true]);
    expect(["model.safetensors", "./http://x", "ftp://h/a", "hf:/o/r/f", "-"].map(isRemoteInput)).toEqual([false, false, false, false, false]);
  });

  it("maps hf://ORG/REPO[@REV]/PATH to the endpoint's resolve URL", () => {
    expect(hubResolveUrl(parseHubPath("hf://org/repo/model.safetensors"))).toBe("https://huggingface.co/org/repo/resolve/main/model.safetensors");
    expect(hubResolveUrl(parseHubPath("hf://org/repo@v1.0/sub dir/model.safetensors"))).toBe(
      "https://huggingface.co/org/repo/resolve/v1.0/sub%20dir/model.safetensors",
    );
    expect(hubResolveUrl(parseHubPath("hf://org/repo@refs%2Fpr%2F1/model.safetensors"), { HF_ENDPOINT: "http://127.0.0.1:8080/mirror/" })).toBe(
      "http://127.0.0.1:8080/mirror/org/repo/resolve/refs%2Fpr%2F1/model.safetensors",
    );
    expect(hubResolveUrl(parseHubPath("hf://datasets/org/data/train.safetensors"))).toBe(
      "https://huggingface.co/datasets/org/data/resolve/main/train.safetensors",
    );
  });

  it.each([
    ["no file path", "hf://org/repo"],
    ["an empty revision", "hf://org/repo@/model.safetensors"],
    ["a climbing path", "hf://org/repo/../other/model.safetensors"],
    ["an odd repository name", "hf://org/re?po/model.safetensors"],
    ["an empty path part", "hf://org/repo//model.safetensors"],
  ])("refuses an hf:// input with %s (InvalidOption)", (_what, input) => {
    expect(() => parseHubPath(input)).toThrow(expect.objectContaining({ code: "InvalidOption" }));
  });

  it("sends HF_TOKEN to the Hub endpoint's origin only, however the URL is written", () => {
    const env = { HF_TOKEN: "hf_secret" };
    expect(locateRemoteInput("hf://org/repo/m.safetensors", env).headers).toEqual({ Authorization: "Bearer hf_secret" });
    expect(locateRemoteInput("https://huggingface.co/org/repo/resolve/main/m.safetensors", env).headers).toEqual({ Authorization: "Bearer hf_secret" });
    expect(locateRemoteInput("https://example.com/m.safetensors", env).headers).toEqual({});
    expect(locateRemoteInput("http://huggingface.co/org/repo/resolve/main/m.safetensors", env).headers).toEqual({});
    const local = { HF_TOKEN: "hf_secret", HF_ENDPOINT: "http://127.0.0.1:1234" };
    expect(locateRemoteInput("hf://org/repo/m.safetensors", local)).toMatchObject({
      url: "http://127.0.0.1:1234/org/repo/resolve/main/m.safetensors",
      headers: { Authorization: "Bearer hf_secret" },
    });
    expect(locateRemoteInput("https://huggingface.co/org/repo/resolve/main/m.safetensors", local).headers).toEqual({});
    expect(locateRemoteInput("hf://org/repo/m.safetensors", {}).headers).toEqual({});
  });

  it("names siblings beside a URL or an hf:// input", () => {
    expect(remoteSibling("https://h/a/b/model.safetensors.index.json?x=1", "model-00001-of-00002.safetensors")).toBe(
      "https://h/a/b/model-00001-of-00002.safetensors",
    );
    expect(remoteSibling("https://h/a/model.safetensors.index.json", "sub/x #1.safetensors")).toBe("https://h/a/sub/x%20%231.safetensors");
    expect(remoteSibling("hf://org/repo@v2/dir/model.safetensors.index.json", "model-1.safetensors")).toBe("hf://org/repo@v2/dir/model-1.safetensors");
    for (const hostile of ["../secret.safetensors", "/etc/passwd", "https://elsewhere/x.safetensors", "a/./b.safetensors"]) {
      expect(() => remoteSibling("https://h/a/model.safetensors.index.json", hostile)).toThrow(expect.objectContaining({ code: "InvalidIndex" }));
    }
  });
});

/**
 * Runs the command without blocking this process, whose servers must answer it. `started` gets
 * the child as soon as it runs (to signal it).
 */
function runCliAsync(args: readonly string[], env: Record<string, string> = {}, started?: (child: ReturnType<typeof spawn>) => void): Promise<CliRun> {
  const childEnv: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", ...env };
  for (const name of ["HF_TOKEN", "HF_ENDPOINT"]) if (!(name in env)) delete childEnv[name];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI_PATH, ...args], { env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
    started?.(child);
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.on("error", reject);
    child.on("close", (status) => resolve({ status: status ?? -1, stdout, stderr }));
  });
}

/** A safetensors head (length and header) for `count` F32 tensors of `elements` each, the size of the whole file, and the names. */
function bigHead(count: number, elements: number, prefix = ""): { head: Uint8Array; size: number; names: string[] } {
  const bytes = elements * 4;
  const names = Array.from({ length: count }, (_, i) => `${prefix}layer.${i}.weight`);
  const entries = names.map((name, i) => `${JSON.stringify(name)}:{"dtype":"F32","shape":[${elements}],"data_offsets":[${i * bytes},${(i + 1) * bytes}]}`);
  const head = safetensorsFile(`{"__metadata__":{"format":"pt"},${entries.join(",")}}`);
  return { head, size: head.byteLength + count * bytes, names };
}

const GiB = 2 ** 30;

describe("the command over HTTP", () => {
  let s: RangeServer;
  let temp: ReturnType<typeof makeTempDir>;
  const local = (name: string) => join(temp.dir, name);

  beforeAll(async () => {
    s = await startRangeServer();
    temp = makeTempDir("st-convert-remote-");
    // A checkpoint of several MB (larger than the read-ahead window, so that it takes many
    // requests): one big tensor, a mid one and many small ones, in several dtypes.
    const tensors = [
      tensorFromBytes({ name: "big", dtype: "F32", shape: [700, 1000] }, pseudoRandomBytes(1, 2_800_000)),
      tensorFromBytes({ name: "mid", dtype: "I64", shape: [50_000] }, pseudoRandomBytes(2, 400_000)),
      ...Array.from({ length: 300 }, (_, i) => tensorFromBytes({ name: `small.${i}`, dtype: "F16", shape: [37] }, pseudoRandomBytes(10 + i, 74))),
    ];
    const checkpoint = await serializeSafetensors({ metadata: { format: "pt" }, tensors });
    writeFileSync(local("model.safetensors"), checkpoint);
    s.files.set("/files/model.safetensors", servedBytes(checkpoint));
    // The same checkpoint in other formats, made locally, to be read back by URL.
    for (const extension of ["npz", "json", "msgpack", "pt"]) {
      const run = await runCliAsync([local("model.safetensors"), local(`model.${extension}`), "--quiet"]);
      expect(run.stderr).toBe("");
      s.files.set(`/files/model.${extension}`, servedBytes(readFileSync(local(`model.${extension}`))));
    }
    for (const name of [
      "model.safetensors.index.json",
      "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors",
    ]) {
      s.files.set(`/hub/${name}`, servedBytes(readFileSync(fixturePath("sharded", "hub", name))));
    }
  });

  afterAll(async () => {
    await s?.close();
    temp?.cleanup();
  });

  it("info of a 1 GiB safetensors file fetches its header and at most one read-ahead window more", async () => {
    // 8,192 tensors of 128 KiB: a header of about 650 KB, more than two windows.
    const { head, size } = bigHead(8192, 32 * 1024);
    expect(size).toBeGreaterThan(GiB);
    s.files.set("/big/model.safetensors", sparseFile(head, size));
    s.reset();
    const run = await runCliAsync(["info", s.url("/big/model.safetensors"), "--json"]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    const report = JSON.parse(run.stdout) as { totals: { tensors: number; bytes: number }; fetched: number };
    expect(report.totals).toMatchObject({ tensors: 8192, bytes: size - head.byteLength });
    const served = s.bytesServed("/big/model.safetensors");
    expect(served).toBeGreaterThanOrEqual(head.byteLength);
    expect(served).toBeLessThanOrEqual(head.byteLength + HTTP_READ_AHEAD);
    expect(report.fetched).toBe(served);

    // A header smaller than the window: one request, one window.
    const small = bigHead(64, 4 * 1024 * 1024);
    s.files.set("/big/small-header.safetensors", sparseFile(small.head, small.size));
    s.reset();
    const again = await runCliAsync(["info", s.url("/big/small-header.safetensors")]);
    expect(again.status, again.stderr).toBe(0);
    expect(s.log).toHaveLength(1);
    expect(s.bytesServed()).toBeLessThanOrEqual(small.head.byteLength + HTTP_READ_AHEAD);
  });

  it("info of a sharded index by URL fetches each shard's header only", async () => {
    // Three shards of 256–264 MiB each, with their own tensor names.
    const shards = [1, 2, 3].map((i) => {
      const name = `model-0000${i}-of-00003.safetensors`;
      const { head, size, names } = bigHead(63 + i, 1024 * 1024, `s${i}.`);
      s.files.set(`/sharded/${name}`, sparseFile(head, size));
      return { name, head, names };
    });
    const weightMap = Object.fromEntries(shards.flatMap(({ name, names }) => names.map((tensor) => [tensor, name])));
    s.files.set("/sharded/model.safetensors.index.json", servedBytes(new TextEncoder().encode(JSON.stringify({ metadata: {}, weight_map: weightMap }))));
    s.reset();
    const run = await runCliAsync(["info", s.url("/sharded/model.safetensors.index.json"), "--json"]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect((JSON.parse(run.stdout) as { totals: { tensors: number } }).totals.tensors).toBe(64 + 65 + 66);
    for (const { name, head } of shards) {
      expect(s.log.filter((r) => r.path === `/sharded/${name}`).map((r) => r.headers.range)).toEqual([`bytes=0-${HTTP_READ_AHEAD - 1}`]);
      expect(s.bytesServed(`/sharded/${name}`)).toBeLessThanOrEqual(head.byteLength + HTTP_READ_AHEAD);
    }
  });

  it.each([
    ["model.safetensors", "npz"],
    ["model.safetensors", "json"],
    ["model.safetensors", "msgpack"],
    ["model.safetensors", "pt"],
    ["model.npz", "safetensors"],
    ["model.json", "safetensors"],
    ["model.msgpack", "safetensors"],
    ["model.pt", "safetensors"],
  ])("converts %s by URL to .%s byte for byte as the local file converts", async (input, to) => {
    // The same file name in two folders: a torch archive is named after its file.
    mkdirSync(local("from-file"), { recursive: true });
    mkdirSync(local("from-url"), { recursive: true });
    const fromFile = local(`from-file/${input}.${to}`);
    const fromUrl = local(`from-url/${input}.${to}`);
    const [a, b] = await Promise.all([runCliAsync([local(input), fromFile, "--quiet"]), runCliAsync([s.url(`/files/${input}`), fromUrl, "--quiet"])]);
    expect(b.stderr).toBe(a.stderr);
    expect([a.status, b.status]).toEqual([0, 0]);
    expect(readFileSync(fromUrl).equals(readFileSync(fromFile))).toBe(true);
  });

  it("converts URLs in a batch (--out-dir), each named after its path, byte for byte as the local files", async () => {
    s.files.set("/batch/first.npz", servedBytes(readFileSync(local("model.npz"))));
    s.files.set("/batch/second%20one.pt", servedBytes(readFileSync(local("model.pt"))));
    const out = local("batch-by-url");
    const run = await runCliAsync([
      s.url("/batch/first.npz"),
      `${s.url("/batch/second%20one.pt")}?download=1`,
      "--out-dir",
      out,
      "--to",
      "safetensors",
      "--quiet",
    ]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(readdirSync(out).sort()).toEqual(["first.safetensors", "second one.safetensors"]);
    for (const [name, source] of [
      ["first.safetensors", "model.npz"],
      ["second one.safetensors", "model.pt"],
    ] as const) {
      const expected = local(`expected-${name}`);
      expect((await runCliAsync([local(source), expected, "--quiet"])).status).toBe(0);
      expect(readFileSync(join(out, name)).equals(readFileSync(expected))).toBe(true);
    }
  });

  it("converts a sharded index by URL, its shards fetched beside it by URL", async () => {
    const out = local("merged-by-url.safetensors");
    s.reset();
    const run = await runCliAsync([s.url("/hub/model.safetensors.index.json"), out, "--quiet"]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(readFileSync(out).equals(readFileSync(fixturePath("sharded", "merged.safetensors")))).toBe(true);
    expect(new Set(s.log.map((r) => r.path))).toEqual(
      new Set([
        "/hub/model.safetensors.index.json",
        "/hub/model-00001-of-00003.safetensors",
        "/hub/model-00002-of-00003.safetensors",
        "/hub/model-00003-of-00003.safetensors",
      ]),
    );
  });

  it("reads hf:// from HF_ENDPOINT with HF_TOKEN, and the token does not follow the redirect to the CDN", async () => {
    const cdn = await startRangeServer();
    const hub = await startRangeServer({
      handle(request, response) {
        const match = /^\/org\/repo\/resolve\/(v1|main)\/(.+)$/.exec(request.url ?? "");
        if (match === null) return false;
        response.writeHead(302, { Location: cdn.url(`/blobs/${match[2]}?signature=abc`), "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    try {
      cdn.files.set("/blobs/model.safetensors", servedBytes(readFileSync(local("model.safetensors"))));
      mkdirSync(local("from-hub"), { recursive: true });
      mkdirSync(local("from-disk"), { recursive: true });
      const [run, reference] = await Promise.all([
        runCliAsync(["hf://org/repo@v1/model.safetensors", local("from-hub/model.npz"), "--quiet"], { HF_ENDPOINT: hub.origin, HF_TOKEN: "hf_test_token" }),
        runCliAsync([local("model.safetensors"), local("from-disk/model.npz"), "--quiet"]),
      ]);
      expect(run.stderr).toBe("");
      expect([run.status, reference.status]).toEqual([0, 0]);
      expect(readFileSync(local("from-hub/model.npz")).equals(readFileSync(local("from-disk/model.npz")))).toBe(true);
      expect(hub.log.map((r) => [r.path, r.headers.authorization])).toEqual([["/org/repo/resolve/v1/model.safetensors", "Bearer hf_test_token"]]);
      expect(cdn.log.length).toBeGreaterThan(1);
      expect(cdn.log.every((r) => r.headers.authorization === undefined)).toBe(true);
    } finally {
      await Promise.all([hub.close(), cdn.close()]);
    }
  });

  it("refuses in one line, naming the URL: a missing file, a server without ranges, 500s past the retries", async () => {
    const plain = await startRangeServer({ ignoreRange: true });
    const broken = await startRangeServer({
      handle(_request, response) {
        response.writeHead(500, { "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    try {
      plain.files.set("/model.safetensors", servedBytes(readFileSync(local("model.safetensors"))));
      const cases = [
        [s.url("/files/missing.safetensors"), "HttpError", "HTTP 404"],
        [plain.url("/model.safetensors"), "RangeNotSupported", "does not serve byte ranges"],
        [broken.url("/model.safetensors"), "HttpError", "gave up after 4 attempts"],
      ] as const;
      const runs = await Promise.all(cases.map(([url]) => runCliAsync(["info", url])));
      for (const [i, [url, code, text]] of cases.entries()) {
        const run = runs[i]!;
        expect(run.status, run.stderr).toBe(1);
        expect(run.stdout).toBe("");
        expect(run.stderr).toBe(`${run.stderr.split("\n")[0]}\n`);
        expect(run.stderr).toContain(`st-convert: ${url}: `);
        expect(run.stderr).toContain(text);
        expect(run.stderr).toContain(`[${code}]`);
      }
      expect(broken.log).toHaveLength(4);
    } finally {
      await Promise.all([plain.close(), broken.close()]);
    }
  });

  it("asks for HF_TOKEN when the Hub answers 401", async () => {
    const hub = await startRangeServer({
      handle(_request, response) {
        response.writeHead(401, { "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    try {
      const run = await runCliAsync(["info", "hf://org/private/model.safetensors"], { HF_ENDPOINT: hub.origin });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("hf://org/private/model.safetensors: HTTP 401 Unauthorized");
      expect(run.stderr).toContain("needs HF_TOKEN");
    } finally {
      await hub.close();
    }
  });

  it("stops a conversion whose input changes on the server (SourceChanged), leaving no output", async () => {
    const original = readFileSync(local("model.safetensors"));
    const changed = new Uint8Array(original);
    changed[changed.byteLength - 1]! ^= 0xff;
    let requests = 0;
    const changing = await startRangeServer({
      handle(_request, _response, self) {
        // The new version appears after the first answer.
        if (++requests === 2) self.files.set("/model.safetensors", servedBytes(changed, { etag: '"v2"' }));
        return false;
      },
    });
    try {
      changing.files.set("/model.safetensors", servedBytes(original, { etag: '"v1"' }));
      const out = local("changed.npz");
      const run = await runCliAsync([changing.url("/model.safetensors"), out, "--quiet"]);
      expect(run.status).toBe(1);
      expect(run.stderr).toContain(`${changing.url("/model.safetensors")}: `);
      expect(run.stderr).toContain("[SourceChanged]");
      expect(existsSync(out)).toBe(false);
    } finally {
      await changing.close();
    }
  });
});

describe("a server that ignores ranges", () => {
  let temp: ReturnType<typeof makeTempDir>;
  let checkpoint: Uint8Array;
  const servers: RangeServer[] = [];
  const local = (name: string) => join(temp.dir, name);
  /** A server without ranges holding the checkpoint at /model.safetensors. */
  async function plainServer(options: Parameters<typeof startRangeServer>[0] = {}): Promise<RangeServer> {
    const started = await startRangeServer({ ignoreRange: true, ...options });
    started.files.set("/model.safetensors", servedBytes(checkpoint, { etag: '"v1"' }));
    servers.push(started);
    return started;
  }
  /** A fresh, empty TMPDIR for one run: the scratch file's folder, checked empty afterwards. */
  function scratchDir(name: string): string {
    const dir = local(`tmp-${name}`);
    mkdirSync(dir);
    return dir;
  }

  beforeAll(async () => {
    temp = makeTempDir("st-convert-no-range-");
    const tensors = [
      tensorFromBytes({ name: "big", dtype: "F32", shape: [500, 1000] }, pseudoRandomBytes(3, 2_000_000)),
      ...Array.from({ length: 40 }, (_, i) => tensorFromBytes({ name: `small.${i}`, dtype: "BF16", shape: [51] }, pseudoRandomBytes(40 + i, 102))),
    ];
    checkpoint = await serializeSafetensors({ metadata: { format: "pt" }, tensors });
    writeFileSync(local("model.safetensors"), checkpoint);
    const reference = await runCliAsync([local("model.safetensors"), local("reference.npz"), "--quiet"]);
    expect(reference.status, reference.stderr).toBe(0);
  });

  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    temp?.cleanup();
  });

  it("is refused without --allow-download, in one line that names it, writing nothing", async () => {
    const s = await plainServer();
    const out = local("refused.npz");
    const run = await runCliAsync([s.url("/model.safetensors"), out]);
    expect(run.status).toBe(1);
    expect(run.stderr).toBe(`${run.stderr.split("\n")[0]}\n`);
    expect(run.stderr).toContain(`st-convert: ${s.url("/model.safetensors")}: the server does not serve byte ranges`);
    expect(run.stderr).toContain("pass --allow-download");
    expect(run.stderr).toContain("[RangeNotSupported]");
    expect(existsSync(out)).toBe(false);
    expect(s.log).toHaveLength(1);
  });

  it("with --allow-download, converts from its one whole answer byte for byte as the local file, leaving no scratch file", async () => {
    const s = await plainServer({ chunkSize: 16 * 1024 });
    const tmp = scratchDir("ok");
    const out = local("downloaded.npz");
    const run = await runCliAsync([s.url("/model.safetensors"), out, "--allow-download", "--json"], { TMPDIR: tmp });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(readFileSync(out).equals(readFileSync(local("reference.npz")))).toBe(true);
    expect(s.log).toHaveLength(1);
    expect(s.bytesServed()).toBe(checkpoint.byteLength);
    expect((JSON.parse(run.stdout) as { fetched: number }).fetched).toBe(s.bytesServed());
    expect(readdirSync(tmp)).toEqual([]);

    s.reset();
    const info = await runCliAsync(["info", s.url("/model.safetensors"), "--allow-download", "--json"], { TMPDIR: tmp });
    expect(info.status, info.stderr).toBe(0);
    expect(JSON.parse(info.stdout)).toMatchObject({ ok: true, totals: { tensors: 41 }, fetched: checkpoint.byteLength });
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("gives up on a download that breaks off every time (HttpError), leaving no output and no scratch file", async () => {
    const s = await plainServer({ cut: { after: 700_000 } });
    const tmp = scratchDir("cut");
    const out = local("cut.npz");
    const run = await runCliAsync([s.url("/model.safetensors"), out, "--allow-download"], { TMPDIR: tmp });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(`st-convert: ${s.url("/model.safetensors")}: `);
    expect(run.stderr).toContain("gave up after 4 attempts");
    expect(run.stderr).toContain("[HttpError]");
    expect(s.log.slice(1).every((r) => r.headers.range === "bytes=700000-" && r.headers["if-range"] === '"v1"')).toBe(true);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("refuses a file that changes during the download (SourceChanged), leaving no output and no scratch file", async () => {
    const changed = new Uint8Array(checkpoint);
    changed[changed.byteLength - 1]! ^= 0xff;
    let requests = 0;
    const s = await plainServer({
      cut: { after: 1_000_000, times: 1 },
      handle(_request, _response, self) {
        // The new version appears after the first answer broke off.
        if (++requests === 2) self.files.set("/model.safetensors", servedBytes(changed, { etag: '"v2"' }));
        return false;
      },
    });
    const tmp = scratchDir("changed");
    const out = local("changed.npz");
    const run = await runCliAsync([s.url("/model.safetensors"), out, "--allow-download"], { TMPDIR: tmp });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain('changed on the server while it was downloaded (ETag "v1", now "v2")');
    expect(run.stderr).toContain("[SourceChanged]");
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("stops a download on SIGINT (status 130), leaving no output and no scratch file", async () => {
    const s = await plainServer({ chunkSize: 8 * 1024, chunkDelayMs: 20 });
    const tmp = scratchDir("sigint");
    const out = local("interrupted.npz");
    const run = await runCliAsync([s.url("/model.safetensors"), out, "--allow-download"], { TMPDIR: tmp }, (child) => {
      // Interrupted once the body is flowing: the server has sent a few chunks.
      const poll = setInterval(() => {
        if (s.bytesServed() < 64 * 1024) return;
        clearInterval(poll);
        child.kill("SIGINT");
      }, 10);
      child.on("close", () => clearInterval(poll));
    });
    expect(run.status, run.stderr).toBe(130);
    expect(s.bytesServed()).toBeLessThan(checkpoint.byteLength);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("shows the bytes fetched on the progress line, as many as the server sent", async () => {
    // Progress is drawn on a terminal after half a second: main() is told stderr is one, and a
    // server that waits before each chunk makes the conversion last longer than that.
    const s = await startRangeServer({ chunkSize: 32 * 1024, chunkDelayMs: 10 });
    servers.push(s);
    s.files.set("/model.safetensors", servedBytes(checkpoint));
    let stderr = "";
    const status = await main([s.url("/model.safetensors"), local("progress.npz")], {
      stdout: () => {},
      stderr: (text) => {
        stderr += text;
      },
      stderrIsTTY: true,
      columns: 100,
      term: "xterm",
    });
    expect(status, stderr).toBe(0);
    const lines = stderr
      .split("\r")
      .map((l) => l.replace("\x1b[K", ""))
      .filter((l) => l !== "" && !l.startsWith("st-convert:"));
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(line.length).toBeLessThan(100);
    const last = lines.at(-1)!;
    expect(last).toContain("100%");
    expect(last).toContain(`, ${formatSize(s.bytesServed())} fetched`);
    expect(readFileSync(local("progress.npz")).equals(readFileSync(local("reference.npz")))).toBe(true);
  });
});
