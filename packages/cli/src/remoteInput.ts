/**
 * Inputs named by URL: `http(s)://…` and the Hub's short form `hf://ORG/REPO[@REV]/PATH`, opened
 * as HTTP range sources (core's `openHttpSource`), with siblings (an index's shards) resolved
 * beside them. `HF_TOKEN` goes to the Hub endpoint's origin only (`HF_ENDPOINT`, default
 * https://huggingface.co), never across a redirect to another origin (the Hub's CDN). A server
 * that ignores ranges is refused unless a download is allowed: then its one whole-file answer is
 * spooled to a scratch file (stdio.ts's spool, as for a stdin pipe) and read from there.
 */
import { type HttpSource, type HttpSourceOptions, StConvertError, openHttpSource } from "@st-convert/core";
import { spoolToScratchFile } from "./stdio.js";

/** The Hub, unless `HF_ENDPOINT` names another (a mirror, a local test server). */
export const DEFAULT_HF_ENDPOINT = "https://huggingface.co";

/** The environment variables a remote input reads. */
export interface RemoteEnv {
  readonly HF_ENDPOINT?: string | undefined;
  readonly HF_TOKEN?: string | undefined;
}

export { isRemoteInput } from "./remotePath.js";

/** The parts of `hf://[datasets/|spaces/]ORG/REPO[@REV]/PATH`. */
export interface HubPath {
  /** `""` for a model, else `datasets/` or `spaces/`. */
  readonly kind: "" | "datasets/" | "spaces/";
  readonly repo: string;
  /** As written (a revision with `/`, such as `refs/pr/1`, is written `refs%2Fpr%2F1`). Default `main`. */
  readonly revision: string | undefined;
  readonly path: string;
}

/**
 * Parses an `hf://` input.
 * @throws StConvertError `InvalidOption` when it is not `hf://ORG/REPO[@REV]/PATH`.
 */
export function parseHubPath(input: string): HubPath {
  const bad = (rule: string): never => {
    throw new StConvertError("InvalidOption", `${JSON.stringify(input)} is not hf://ORG/REPO[@REVISION]/PATH: ${rule}`);
  };
  if (!/^hf:\/\//i.test(input)) bad("it does not start with hf://");
  let rest = input.slice("hf://".length);
  let kind: HubPath["kind"] = "";
  for (const prefix of ["datasets/", "spaces/"] as const) {
    if (rest.startsWith(prefix)) {
      kind = prefix;
      rest = rest.slice(prefix.length);
    }
  }
  const parts = rest.split("/");
  if (parts.length < 3) bad("it needs an organisation, a repository and a file path");
  const [org, repoAndRevision, ...pathParts] = parts as [string, string, ...string[]];
  const at = repoAndRevision.indexOf("@");
  const repoName = at < 0 ? repoAndRevision : repoAndRevision.slice(0, at);
  const revision = at < 0 ? undefined : repoAndRevision.slice(at + 1);
  // The Hub's repository names: letters, digits, `-`, `_` and `.`.
  for (const [what, name] of [
    ["organisation", org],
    ["repository", repoName],
  ] as const) {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) || name.includes("..")) bad(`${what} ${JSON.stringify(name)} is not a Hub name`);
  }
  if (revision !== undefined && (revision === "" || /[/?#]/.test(revision)))
    bad(`revision ${JSON.stringify(revision)} is empty or holds / ? # (write / as %2F)`);
  checkPath(pathParts, bad);
  return { kind, repo: `${org}/${repoName}`, revision, path: pathParts.join("/") };
}

function checkPath(parts: readonly string[], bad: (rule: string) => never): void {
  if (parts.length === 0 || parts.some((p) => p === "")) bad("the file path is empty or has an empty part");
  if (parts.some((p) => p === "." || p === "..")) bad('the file path has a "." or ".." part');
}

/** The endpoint `HF_ENDPOINT` names (default the Hub), as a URL without a trailing `/`. */
export function hubEndpoint(env: RemoteEnv): URL {
  const value = env.HF_ENDPOINT === undefined || env.HF_ENDPOINT === "" ? DEFAULT_HF_ENDPOINT : env.HF_ENDPOINT;
  let url: URL;
  try {
    url = new URL(value.replace(/\/+$/, ""));
  } catch {
    throw new StConvertError("InvalidOption", `HF_ENDPOINT ${JSON.stringify(value)} is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new StConvertError("InvalidOption", `HF_ENDPOINT ${JSON.stringify(value)} is not an http(s) URL`);
  return url;
}

/** `${endpoint}/[datasets/]ORG/REPO/resolve/REV/PATH`, as huggingface_hub's `hf_hub_url` builds it. */
export function hubResolveUrl(hub: HubPath, env: RemoteEnv = {}): string {
  const endpoint = hubEndpoint(env).href.replace(/\/+$/, "");
  const path = hub.path.split("/").map(encodeURIComponent).join("/");
  return `${endpoint}/${hub.kind}${hub.repo}/resolve/${hub.revision ?? "main"}/${path}`;
}

/** Where a remote input is fetched from, and with which headers. */
export interface RemoteLocation {
  /** The URL fetched first (an `hf://` input's resolve URL). */
  readonly url: string;
  /** Headers for the URL's origin: the token, when that origin is the Hub endpoint's. */
  readonly headers: Readonly<Record<string, string>>;
  /** Added to a 401 or 403 message. */
  readonly authHint: string | undefined;
}

/**
 * The URL of a remote input and the headers that go with it: `Authorization: Bearer $HF_TOKEN`
 * when the URL's origin is the Hub endpoint's (however the URL was written), none otherwise.
 * @throws StConvertError `InvalidOption` for a malformed `hf://` path, URL or `HF_ENDPOINT`.
 */
export function locateRemoteInput(input: string, env: RemoteEnv = process.env): RemoteLocation {
  const url = /^hf:\/\//i.test(input) ? hubResolveUrl(parseHubPath(input), env) : input;
  let origin: string;
  try {
    origin = new URL(url).origin;
  } catch {
    throw new StConvertError("InvalidOption", `${JSON.stringify(input)} is not a URL`);
  }
  const hub = origin === hubEndpoint(env).origin;
  const token = env.HF_TOKEN === undefined || env.HF_TOKEN === "" ? undefined : env.HF_TOKEN;
  return {
    url,
    headers: hub && token !== undefined ? { Authorization: `Bearer ${token}` } : {},
    authHint: hub ? (token === undefined ? "a private or gated repository needs HF_TOKEN" : "check that HF_TOKEN may read this repository") : undefined,
  };
}

/**
 * The input naming `sibling` beside `input` (a shard beside its index): `hf://` stays `hf://`
 * (same repository and revision), a URL is resolved against the input's (its query dropped).
 * @throws StConvertError `InvalidIndex` for a sibling name that is absolute or climbs with `..`.
 */
export function remoteSibling(input: string, sibling: string): string {
  const bad = (rule: string): never => {
    throw new StConvertError("InvalidIndex", `cannot open ${JSON.stringify(sibling)} beside ${input}: ${rule}`);
  };
  if (sibling.startsWith("/") || sibling.startsWith("\\") || /^[A-Za-z][A-Za-z0-9+.-]*:/.test(sibling)) bad("it is absolute");
  const parts = sibling.split("/");
  checkPath(parts, bad);
  if (/^hf:\/\//i.test(input)) {
    parseHubPath(input);
    return `${input.slice(0, input.lastIndexOf("/") + 1)}${sibling}`;
  }
  return new URL(parts.map(encodeURIComponent).join("/"), input).href;
}

/** Options of {@link openRemoteInput}: the source's own, the environment to read, and what to do without ranges. */
export interface RemoteInputOptions extends Pick<HttpSourceOptions, "onProgress" | "signal" | "fetch" | "readAhead" | "retryDelayMs"> {
  /** Where `HF_ENDPOINT` and `HF_TOKEN` are read. Default `process.env`. */
  env?: RemoteEnv;
  /**
   * When the server ignores ranges (answers with the whole file), read that one answer in order
   * into a scratch file and convert from it (the command line's `--allow-download`): disk the size
   * of the file, memory bounded. Default false: such a server is refused (`RangeNotSupported`),
   * since reading any part of the file then means downloading all of it.
   */
  allowDownload?: boolean;
  /** Folder of a download's scratch file. Default: the system's temporary folder (TMPDIR). */
  scratchDir?: string;
  /**
   * Called as bytes arrive over the network, with how many came (retried ones included) and the
   * input they are for: the sum over every call is the traffic of every remote input opened with
   * these options (an index and its shards).
   */
  onFetched?: (bytes: number, input: string) => void;
  /** Called while a whole file is downloaded (`allowDownload`): bytes in the scratch file so far, the size when the server told it. */
  onDownload?: (done: number, size: number | undefined, input: string) => void;
}

/** Where the refusal of a server without ranges points to. */
const DOWNLOAD_HINT = "pass --allow-download (or { remote: { allowDownload: true } }) to download it whole to a scratch file and read it from there";

/**
 * Opens a remote input (`http(s)://` or `hf://`) for range reads, or, with `allowDownload` and a
 * server that ignores ranges, downloaded into a scratch file that `close()` removes; its name in
 * messages is the input as written. Close it when done.
 * @throws StConvertError as `openHttpSource` does (`RangeNotSupported` naming --allow-download),
 *   `InvalidOption` for a malformed input, `Io` when the scratch file cannot be written.
 */
export async function openRemoteInput(input: string, options: RemoteInputOptions = {}): Promise<HttpSource> {
  const { env = process.env, allowDownload = false, scratchDir, onFetched, onDownload, onProgress, ...sourceOptions } = options;
  const location = locateRemoteInput(input, env);
  let counted = 0;
  return openHttpSource(location.url, {
    ...sourceOptions,
    name: input,
    headers: location.headers,
    authHint: location.authHint,
    onProgress: (fetched, size) => {
      onFetched?.(fetched - counted, input);
      counted = fetched;
      onProgress?.(fetched, size);
    },
    ...(allowDownload
      ? {
          spool: (body, size) =>
            spoolToScratchFile(body, input, {
              ...(scratchDir === undefined ? {} : { dir: scratchDir }),
              onSpooled: (done) => onDownload?.(done, size, input),
            }),
        }
      : { wholeFileHint: DOWNLOAD_HINT }),
  });
}
