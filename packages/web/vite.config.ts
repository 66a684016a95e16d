import { defineConfig } from "vite";

/**
 * The converter page: a static build (`dist/`), served as files by any host. `base: "./"` lets it
 * work from any folder of a site. The adapters' readers and writers are separate chunks, loaded
 * when a file needs them (the `./format` entry points import them lazily).
 */
export default defineConfig({
  root: import.meta.dirname,
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, target: "es2022", reportCompressedSize: false },
  server: { host: "127.0.0.1" },
});
