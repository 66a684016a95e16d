// Bundles the `st-convert` executable (after `tsc -b`): dist/cli.js and the workspace packages it
// imports become dist/st-convert.js (and dist/st-convert-worker.js, a batch's worker thread) plus
// one chunk per lazily loaded format in dist/chunks/.
// Node's ES module loader pays about half a millisecond per module it resolves and reads; the
// ~35 modules of an npz conversion cost ~17 ms of start-up, the bundle ~6 ms (docs/benchmarks.md).
// The library entry (dist/index.js) is not bundled: it imports the adapter packages as usual.
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "rolldown";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
rmSync(`${dist}chunks`, { recursive: true, force: true });
await build({
  // The batch's worker thread is an entry of its own, sharing the chunks (convertMany picks it when
  // it runs from the bundle).
  input: { "st-convert": `${dist}cli.js`, "st-convert-worker": `${dist}batchWorker.js` },
  platform: "node",
  // fflate is imported only where node:zlib is missing, never under Node: it stays the npy
  // package's dependency instead of being copied into this one.
  // @st-convert/native stays a package of its own too: its loader finds fastio.node beside itself.
  external: [/^node:/, "fflate", "@st-convert/native"],
  logLevel: "warn",
  output: {
    dir: dist,
    format: "esm",
    entryFileNames: "[name].js",
    chunkFileNames: "chunks/[name]-[hash].js",
    sourcemap: true,
  },
});
