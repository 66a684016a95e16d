/**
 * V8's code cache for the command's own code (the bundle's chunks in dist/chunks/). Compiling them
 * is most of what a conversion costs before it reads a byte: of a small GGUF's conversion (70 ms),
 * 14 ms went to compiling about 490 KB of them, and with their code read back from a cache a run
 * took 10–12 ms less (2026-12-07, 10 interleaved runs). Node 22.1 and later keep such a cache
 * themselves (`module.enableCompileCache`), which is used where it exists; on Node 20 the chunks are
 * compiled here, through the CommonJS loader's compile step, with the cached code V8 accepts.
 *
 * The cache lives in a folder of the user's own (`$XDG_CACHE_HOME/st-convert`, else
 * `~/.cache/st-convert`), one folder per Node version, made private (0700): V8 trusts the code it
 * reads back, so a folder that another user could write, a link or anything else amiss leaves the
 * cache off. Any failure leaves it off too: the code compiles as it always did. `ST_CONVERT_CODE_CACHE=0`
 * turns it off. A run writes only what V8 rejected or lacked (after a new build or a Node upgrade),
 * once it ends, each file to a temporary name and then renamed, so that runs at once never read half
 * a file; files not read for 30 days (by their access time) go then.
 *
 * This module is the executable's entry's own (scripts/bundle.mjs): it imports only Node's modules.
 */
import { closeSync, fstatSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import Module from "node:module";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join } from "node:path";
import { Script, constants } from "node:vm";

/** An `import("…")` call (a mention of `import()` in a comment is not one). */
const IMPORT_CALL = /\bimport\(\s*["'`]/;

/** Files of the cache left unread for this long are removed by a run that writes. */
const STALE_AFTER_MS = 30 * 24 * 3600 * 1000;

interface CompilingModule {
  exports: unknown;
  require(id: string): unknown;
  _compile(content: string, filename: string, ...rest: unknown[]): unknown;
}

type ModuleInternals = {
  prototype: CompilingModule;
  wrap(script: string): string;
  _resolveFilename(request: string, parent: CompilingModule, isMain: boolean, options?: unknown): string;
  _cache: Record<string, unknown>;
  enableCompileCache?: (directory?: string) => unknown;
};

/** Compiles the chunks in `chunksDir` with the cache, from now on in this thread, where the cache can be on. */
export function enableCodeCache(chunksDir: string, env: NodeJS.ProcessEnv = process.env): void {
  try {
    if (env.ST_CONVERT_CODE_CACHE === "0") return;
    const folder = privateFolder(env);
    if (folder === undefined) return;
    const internals = Module as unknown as ModuleInternals;
    if (typeof internals.enableCompileCache === "function") internals.enableCompileCache(folder);
    else if (
      typeof internals.prototype._compile === "function" &&
      typeof internals.wrap === "function" &&
      constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER !== undefined
    ) {
      hookCompile(internals, chunksDir, folder);
    }
  } catch {
    // The cache stays off: the chunks compile as they always did.
  }
}

/** The cache folder, made if missing, or undefined unless it is a folder of this user's that only this user can enter. */
function privateFolder(env: NodeJS.ProcessEnv): string | undefined {
  const xdg = env.XDG_CACHE_HOME;
  const base = xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), ".cache");
  const folder = join(base, "st-convert", `code-${process.version}-${process.arch}`);
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  const stats = lstatSync(folder);
  if (!stats.isDirectory()) return undefined;
  // Windows has no owners and modes here; its profile folder is the user's own.
  if (process.platform !== "win32" && (stats.uid !== process.getuid?.() || (stats.mode & 0o077) !== 0)) return undefined;
  return folder;
}

function hookCompile(internals: ModuleInternals, chunksDir: string, folder: string): void {
  const compile = internals.prototype._compile;
  /** Scripts compiled without usable cached code: their code is written once the run ends. */
  const fresh: [path: string, script: Script][] = [];
  internals.prototype._compile = function (this: CompilingModule, content: string, filename: string, ...rest: unknown[]) {
    // A chunk that imports a module by name compiles as usual: Node 20 loses a script's import()
    // callback when V8 builds it from cached code ("A dynamic import callback was not specified").
    if (dirname(filename) !== chunksDir || IMPORT_CALL.test(content)) return compile.call(this, content, filename, ...rest);
    const path = join(folder, `${basename(filename)}.v8`);
    const cached = readCached(path);
    let script: Script;
    try {
      script = new Script(internals.wrap(content), {
        filename,
        cachedData: cached,
        importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
      });
    } catch {
      // What the loader would make of it, errors included.
      return compile.call(this, content, filename, ...rest);
    }
    if (cached === undefined || script.cachedDataRejected === true) fresh.push([path, script]);
    const wrapper = script.runInThisContext({ displayErrors: true }) as (...args: unknown[]) => unknown;
    const require = Object.assign((id: string) => this.require(id), {
      resolve: (request: string, options?: unknown) => internals._resolveFilename(request, this, false, options),
      cache: internals._cache,
    });
    return wrapper.call(this.exports, this.exports, require, this, filename, dirname(filename));
  };
  process.once("exit", () => {
    if (fresh.length === 0) return;
    try {
      for (const [path, script] of fresh) {
        const temporary = `${path}.${process.pid}.tmp`;
        writeFileSync(temporary, script.createCachedData(), { mode: 0o600 });
        renameSync(temporary, path);
      }
      const now = Date.now();
      for (const name of readdirSync(folder)) {
        const stale = join(folder, name);
        if (now - lstatSync(stale).atimeMs > STALE_AFTER_MS) rmSync(stale, { force: true });
      }
    } catch {
      // A cache that cannot be written is a cache not kept: the next run compiles again.
    }
  });
}

/** The cached code at `path`, if it is a file there. */
function readCached(path: string): Buffer | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    if (!fstatSync(fd).isFile()) return undefined;
    return readFileSync(fd);
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
