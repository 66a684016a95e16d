// Builds dist/fastio.node from src/fastio.c, src/json.c and src/cast.c with the machine's C compiler and Node's own headers
// (Node-API: one build serves every Node version from 18 on). No node-gyp, no download. Where
// there is no compiler, no headers or not Linux, it says so and builds nothing: st-convert then
// copies and checks through JavaScript (see README.md), so a set-up never fails here.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, "dist");
const target = join(dist, "fastio.node");
mkdirSync(dist, { recursive: true });

function skip(reason) {
  rmSync(target, { force: true });
  rmSync(join(dist, "fastio.json"), { force: true });
  console.log(`@st-convert/native: not built (${reason}); st-convert uses its JavaScript copy and CRC-32 instead`);
  process.exit(0);
}

if (process.platform !== "linux") skip(`copy_file_range is Linux's; this is ${process.platform}`);
const prefix = dirname(dirname(process.execPath));
const headers = [process.env.ST_CONVERT_NODE_HEADERS, join(prefix, "include", "node"), "/usr/include/node", "/usr/local/include/node"].find(
  (dir) => dir !== undefined && existsSync(join(dir, "node_api.h")),
);
if (headers === undefined) skip(`no node_api.h beside ${process.execPath} (set ST_CONVERT_NODE_HEADERS to Node's include/node folder)`);
const compiler = process.env.CC ?? "cc";
const temporary = `${target}.${process.pid}`;
const run = spawnSync(
  compiler,
  [
    "-O2",
    "-std=gnu11",
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-I",
    headers,
    // Symbol versions old enough for glibc 2.28 (see the header).
    "-include",
    join(here, "src", "glibc.h"),
    join(here, "src", "fastio.c"),
    join(here, "src", "json.c"),
    join(here, "src", "cast.c"),
    "-lm",
    "-o",
    temporary,
  ],
  { encoding: "utf8" },
);
if (run.error !== undefined || run.status !== 0) {
  rmSync(temporary, { force: true });
  skip(run.error !== undefined ? `${compiler}: ${run.error.message}` : `${compiler} failed:\n${run.stderr.trim()}`);
}
renameSync(temporary, target);
// What it was built for: the loader refuses a build for another platform or CPU (a package packed elsewhere).
writeFileSync(join(dist, "fastio.json"), `${JSON.stringify({ platform: process.platform, arch: process.arch })}\n`);
