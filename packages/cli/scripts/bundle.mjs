// Bundles the `st-convert` executable (after `tsc -b`): dist/bin.js (the code cache, then cli.js) and the workspace packages it
// imports become dist/st-convert.cjs (and dist/st-convert-worker.cjs, a batch's worker thread) plus
// one chunk per lazily loaded format in dist/chunks/.
// CommonJS, not ES modules: Node's ES module loader costs about 9 ms before the first line of an
// entry runs and half a millisecond per module it resolves, its CommonJS loader about 3 ms in all
// (`info` of 10,000 tensors: 28 ms from Node's bootstrap to the entry's first line as ES modules,
// 15 ms as CommonJS; docs/benchmarks.md). The library entry (dist/index.js) is not bundled: it
// imports the adapter packages as ES modules, as usual.
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "rolldown";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
rmSync(`${dist}chunks`, { recursive: true, force: true });
// The ES module bundle of earlier builds, gone so that nothing runs it by mistake.
for (const old of ["st-convert.js", "st-convert.js.map", "st-convert-worker.js", "st-convert-worker.js.map"]) rmSync(`${dist}${old}`, { force: true });

// @st-convert/native's loader is bundled too, but its `fastio.node` is the native package's
// own file, built at its set-up: the loader's `import.meta.url` (the file it finds fastio.json and
// fastio.node beside) becomes that package's dist/index.js, found when the loader first runs.
const nativeEntry = fileURLToPath(import.meta.resolve("@st-convert/native"));
const nativeLoader = {
  name: "st-convert-native-loader",
  transform(code, id) {
    if (id !== nativeEntry) return null;
    if (!code.includes("import.meta.url")) throw new Error(`${id}: no import.meta.url to redirect (scripts/bundle.mjs)`);
    // Lines are kept as they were (the function goes after the last), so no source map is needed.
    const redirected = `${code.replaceAll("import.meta.url", "nativePackageEntry()")}
/**
 * The native package's dist/index.js as a file URL, where its fastio.json and fastio.node lie:
 * looked for in the node_modules folders from this file's folder up, as Node's resolution looks
 * (a stat each, where require.resolve costs about 3 ms on first use), else found by require.resolve.
 */
function nativePackageEntry() {
  const { existsSync } = process.getBuiltinModule("node:fs");
  const { dirname, join } = process.getBuiltinModule("node:path");
  const { pathToFileURL } = process.getBuiltinModule("node:url");
  for (let dir = __dirname; ; dir = dirname(dir)) {
    const entry = join(dir, "node_modules", "@st-convert", "native", "dist", "index.js");
    if (existsSync(entry)) return pathToFileURL(entry).href;
    if (dirname(dir) === dir) break;
  }
  try {
    const { createRequire } = process.getBuiltinModule("node:module");
    const manifest = createRequire(__filename).resolve("@st-convert/native/package.json");
    return pathToFileURL(manifest.replace(/package\\.json$/, "dist/index.js")).href;
  } catch {
    // Not installed: this file, beside which no fastio.json lies, so the loader reports it absent.
    return pathToFileURL(__filename).href;
  }
}
`;
    return { code: redirected, map: null };
  },
};

await build({
  // The batch's worker thread is an entry of its own, sharing the chunks (convertMany picks it when
  // it runs from the bundle).
  input: { "st-convert": `${dist}bin.js`, "st-convert-worker": `${dist}batchWorker.js`, "st-convert-kernels": `${dist}kernelWorker.js` },
  platform: "node",
  // fflate is imported only where node:zlib is missing, never under Node: it stays the npy
  // package's dependency instead of being copied into this one.
  external: [/^node:/, "fflate"],
  plugins: [nativeLoader],
  logLevel: "warn",
  output: {
    dir: dist,
    format: "cjs",
    // Every file starts "use strict": the sources are ES modules, strict throughout.
    strict: true,
    entryFileNames: "[name].cjs",
    chunkFileNames: "chunks/[name]-[hash].cjs",
    sourcemap: true,
  },
});
