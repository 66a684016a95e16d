/**
 * The converter page: wires the form to {@link inspectFiles} and {@link convertFiles}. Stable hooks
 * for automated use: the file input is `input[name=file]`, the target format `select[name=to]`,
 * the convert button `button[type=submit]`, and the result a download (an `<a download>` clicked
 * for the user, or a file written through the File System Access API).
 */
import type { ByteSink, FormatOptionValues, TensorFormat } from "@st-convert/core";
import { tensorTree } from "@st-convert/core";
import {
  type FileInfo,
  type NamedBlob,
  type PageSettings,
  compileSettings,
  convertFiles,
  diffFiles,
  inspectFiles,
  lookAtTensor,
  mainFile,
  plannedBytes,
} from "./convertInPage.js";
import { drawHistogram, renderDiff, renderStats, renderTree } from "./explore.js";
import { FORMATS, OUTPUT_FORMATS, formatByName, outputFileName } from "./formats.js";
import { BlobSink, writableSink } from "./sinks.js";
import "./style.css";
import { describeError, formatSize, groupDigits, plural } from "./text.js";

/**
 * Outputs whose tensors hold more than this stream to disk when the browser can (`save: auto`);
 * held in memory until the download, they cost as much memory as they are large.
 */
export const LARGE_OUTPUT = 256 * 1024 * 1024;

/**
 * Outputs whose tensors hold this much or more are not offered as a download: Chromium cancels a
 * download of a page-made blob of about 600 MiB or more, while the page saw nothing of it. Where
 * the browser can write a file as it converts, such an output goes there instead; elsewhere the
 * download is offered with a plain note of what the browser may do. (`ST_CONVERT_DOWNLOAD_LIMIT`
 * on the page's window replaces it, for the browser tests.)
 */
export const DOWNLOAD_LIMIT = 512 * 1024 * 1024;

/** Rows of the tensor table drawn (the totals count every tensor): a table of 50,000 rows takes seconds to lay out. */
export const MAX_TABLE_ROWS = 2000;

/** What the page needs of `window.showSaveFilePicker` (Chromium's File System Access API). */
type SaveFilePicker = (options: { suggestedName?: string }) => Promise<{
  createWritable(): Promise<{ write(data: Uint8Array): Promise<void>; close(): Promise<void>; abort(reason?: unknown): Promise<void> }>;
}>;

const form = element("form#convert", HTMLFormElement);
const fileInput = element("input[name=file]", HTMLInputElement);
const toSelect = element("select[name=to]", HTMLSelectElement);
const saveSelect = element("select[name=save]", HTMLSelectElement);
const submit = element("button[type=submit]", HTMLButtonElement);
const cancel = element("button#cancel", HTMLButtonElement);
const progress = element("progress#progress", HTMLProgressElement);
const errorLine = element("p#error", HTMLElement);
const warningList = element("ul#warnings", HTMLUListElement);
const result = element("p#result", HTMLElement);
const infoSection = element("section#info", HTMLElement);
const formatOptionsBox = element("div#format-options", HTMLElement);

let files: NamedBlob[] = [];
let info: FileInfo | undefined;
let running: AbortController | undefined;
let downloadUrl: string | undefined;
/** Counts inspections, so that a slow one finishing after a newer one is dropped. */
let inspection = 0;

/**
 * Where the page is, on the form's `data-state` (for scripts and tests): `idle` (no file), `reading`
 * (listing a file), `ready` (listed), `converting`, `done` (output saved or offered) or `failed`
 * (the line in `#error` says why).
 */
type PageState = "idle" | "reading" | "ready" | "converting" | "done" | "failed";

function setState(state: PageState): void {
  form.dataset.state = state;
}
setState("idle");

for (const format of OUTPUT_FORMATS) toSelect.append(new Option(`${format.name} (${format.extensions.join(", ")})`, format.name));
const pickSaveFile = (globalThis as { showSaveFilePicker?: SaveFilePicker }).showSaveFilePicker;
if (pickSaveFile === undefined) {
  const disk = saveSelect.querySelector<HTMLOptionElement>("option[value=disk]");
  if (disk !== null) {
    disk.disabled = true;
    disk.textContent += " (not in this browser)";
  }
}
buildFormatOptions();
showFormatOptions();

fileInput.addEventListener("change", () => {
  files = [...(fileInput.files ?? [])];
  void inspect();
});
toSelect.addEventListener("change", showFormatOptions);
formatOptionsBox.addEventListener("change", (event) => {
  // A reading option (a torch --key, an npy --dtype) changes what the file holds: list it again.
  const control = event.target as HTMLElement;
  if (control.dataset.reads === "true" && files.length > 0) void inspect();
});
form.addEventListener("submit", (event) => {
  event.preventDefault();
  void convert();
});
cancel.addEventListener("click", () => running?.abort());
for (const type of ["dragenter", "dragover"]) {
  document.addEventListener(type, (event) => {
    event.preventDefault();
    document.body.classList.add("dragging");
  });
}
document.addEventListener("dragleave", (event) => {
  if (event.relatedTarget === null) document.body.classList.remove("dragging");
});
document.addEventListener("drop", (event) => {
  event.preventDefault();
  document.body.classList.remove("dragging");
  const dropped = event.dataTransfer?.files;
  if (dropped === undefined || dropped.length === 0) return;
  // Through the input, so that a drop and a pick are one path (and the input shows the name).
  fileInput.files = dropped;
  fileInput.dispatchEvent(new Event("change"));
});

/** Lists the picked file as `st-convert info` does. */
async function inspect(): Promise<void> {
  const turn = ++inspection;
  clearStatus();
  info = undefined;
  infoSection.hidden = true;
  if (files.length === 0) {
    setState("idle");
    return;
  }
  setState("reading");
  if (files.length > 1 && !mainFile(files).name.toLowerCase().endsWith(".index.json") && mainFile(files).name !== ".metadata") {
    addWarning(`${files.length} files were picked and none is an index or a .metadata: ${mainFile(files).name} is the one converted`);
  }
  const warnings: string[] = [];
  try {
    const found = await inspectFiles(files, { formatOptions: formatOptionValues() }, (line) => warnings.push(line));
    if (turn !== inspection) return;
    info = found;
    renderInfo(found);
    showFormatOptions();
    setState("ready");
  } catch (error) {
    if (turn !== inspection) return;
    showError(error);
    setState("failed");
  } finally {
    if (turn === inspection) for (const line of warnings) addWarning(line);
  }
}

/** Converts the picked file with the form's settings, into a download or a file on disk. */
async function convert(): Promise<void> {
  if (running !== undefined) return;
  clearStatus();
  if (files.length === 0) {
    showErrorLine("pick a file to convert first");
    setState("failed");
    return;
  }
  const to = formatByName(toSelect.value);
  const outputName = outputFileName(mainFile(files).name, to);
  const settings = pageSettings();
  const planned = plannedOutput(settings);
  const downloadLimit = (globalThis as { ST_CONVERT_DOWNLOAD_LIMIT?: number }).ST_CONVERT_DOWNLOAD_LIMIT ?? DOWNLOAD_LIMIT;
  const tooLargeToDownload = planned >= downloadLimit;
  const toDisk =
    saveSelect.value === "disk" ||
    (saveSelect.value === "auto" && planned > LARGE_OUTPUT && pickSaveFile !== undefined) ||
    (saveSelect.value === "download" && tooLargeToDownload && pickSaveFile !== undefined);
  if (toDisk && saveSelect.value === "download") {
    addWarning(
      `${outputName}: the output (${formatSize(planned)} of tensors) is too large for a download made in the page (Chromium cancels those of about 600 MiB or more): choose where to write it as it converts`,
    );
  }
  let sink: ByteSink;
  let blobSink: BlobSink | undefined;
  if (toDisk) {
    if (pickSaveFile === undefined) {
      showErrorLine("this browser cannot write a file as it converts (no File System Access API); save as a download instead");
      setState("failed");
      return;
    }
    try {
      // Asked first, while the click still counts as the user's gesture.
      const handle = await pickSaveFile({ suggestedName: outputName });
      sink = writableSink(await handle.createWritable(), outputName);
    } catch (error) {
      if ((error as { name?: string }).name === "AbortError") return; // the user closed the dialog
      showErrorLine(`${outputName}: cannot open the file for writing: ${error instanceof Error ? error.message : String(error)} [Io]`);
      setState("failed");
      return;
    }
  } else {
    blobSink = new BlobSink(outputName);
    sink = blobSink;
    if (tooLargeToDownload) {
      addWarning(
        `${outputName}: the output (${formatSize(planned)} of tensors) may be too large for the browser to download: Chromium cancels a download made in the page of about 600 MiB or more, and this page cannot see whether it did (this browser cannot write a file as it converts); check the browser's downloads`,
      );
    } else if (planned > LARGE_OUTPUT) {
      addWarning(
        `${outputName}: the output (${formatSize(planned)} of tensors) is held in memory until the download${pickSaveFile === undefined ? ": this browser cannot write it to disk as it converts" : "; save it to a file on disk to stream it instead"}`,
      );
    }
  }
  running = new AbortController();
  setRunning(true);
  setState("converting");
  try {
    const done = await convertFiles(files, to.name, sink, outputName, settings, {
      signal: running.signal,
      onWarning: addWarning,
      onProgress: (bytes, total) => {
        progress.max = Math.max(total, 1);
        progress.value = bytes;
      },
    });
    const summary = `${done.input} (${done.inputFormat}) -> ${done.output} (${done.outputFormat}): ${plural(done.tensors, "tensor")}, ${formatSize(done.bytes)}`;
    if (blobSink === undefined) {
      result.textContent = `${summary}, saved.`;
    } else {
      offerDownload(blobSink.blob(), outputName, summary);
    }
    setState("done");
  } catch (error) {
    showError(error);
    setState("failed");
  } finally {
    running = undefined;
    setRunning(false);
  }
}

/** Shows the link to the output and clicks it for the user. */
function offerDownload(blob: Blob, name: string, summary: string): void {
  if (downloadUrl !== undefined) URL.revokeObjectURL(downloadUrl);
  downloadUrl = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = downloadUrl;
  link.download = name;
  link.textContent = `${name} (${formatSize(blob.size)})`;
  // The page hands the file to the browser and sees nothing after: it says so, and claims no more.
  result.replaceChildren(`${summary}. Offered as a download: `, link, " (the browser saves it; check its downloads)");
  link.click();
}

/** The form's settings, for the formats at hand. */
function pageSettings(): PageSettings {
  const field = (name: string) => (form.elements.namedItem(name) as HTMLInputElement | HTMLTextAreaElement | null)?.value ?? "";
  return {
    filter: field("filter"),
    exclude: field("exclude"),
    cast: field("cast"),
    metadata: field("metadata"),
    allowEmpty: (form.elements.namedItem("allow-empty") as HTMLInputElement).checked,
    recordCast: !(form.elements.namedItem("no-record") as HTMLInputElement).checked,
    formatOptions: formatOptionValues(),
  };
}

/** Tensor bytes the conversion will write, when the file was listed and the settings are valid; else 0. */
function plannedOutput(settings: PageSettings): number {
  if (info === undefined) return 0;
  try {
    return plannedBytes(info, compileSettings(settings));
  } catch {
    return 0; // the conversion reports the bad setting
  }
}

/** One control per format option (an option several formats share, such as --dtype, once). */
function buildFormatOptions(): void {
  const seen = new Set<string>();
  for (const format of FORMATS) {
    for (const option of format.options ?? []) {
      if (seen.has(option.name)) continue;
      seen.add(option.name);
      const label = document.createElement("label");
      label.dataset.option = option.name;
      label.title = option.description;
      const input = document.createElement("input");
      input.name = `option.${option.name}`;
      input.dataset.option = option.name;
      input.dataset.multiple = String(option.multiple === true);
      input.spellcheck = false;
      if (option.type === "boolean") {
        input.type = "checkbox";
        label.className = "check";
        label.append(input, ` ${option.description}`);
      } else {
        input.placeholder = option.valueName ?? "";
        label.append(`${option.name} `, input);
        const hint = document.createElement("small");
        hint.textContent = option.description;
        label.append(hint);
      }
      formatOptionsBox.append(label);
    }
  }
}

/** Shows the options that reading the listed file or writing the chosen format takes. */
function showFormatOptions(): void {
  const input = info === undefined ? undefined : FORMATS.find((f) => f.name === info?.format);
  const output = OUTPUT_FORMATS.find((f) => f.name === toSelect.value);
  for (const label of formatOptionsBox.querySelectorAll<HTMLLabelElement>("label[data-option]")) {
    const name = label.dataset.option ?? "";
    const reads = takes(input, name, "read");
    label.hidden = !reads && !takes(output, name, "write");
    const control = label.querySelector("input");
    if (control !== null) control.dataset.reads = String(reads);
  }
}

function takes(format: TensorFormat | undefined, option: string, side: "read" | "write"): boolean {
  return (format?.options ?? []).some((o) => o.name === option && (o.appliesTo === side || o.appliesTo === "both"));
}

/** The values of the shown format options, as the command would parse them. */
function formatOptionValues(): FormatOptionValues {
  const values: Record<string, string | boolean | string[]> = {};
  for (const control of formatOptionsBox.querySelectorAll<HTMLInputElement>("input[data-option]")) {
    if ((control.closest("label") as HTMLLabelElement | null)?.hidden === true) continue;
    const name = control.dataset.option ?? "";
    if (control.type === "checkbox") {
      if (control.checked) values[name] = true;
    } else if (control.value !== "") {
      values[name] = control.dataset.multiple === "true" ? control.value.split(/\s+/).filter((v) => v !== "") : control.value;
    }
  }
  return values;
}

const lookSection = element("section#tensor-look", HTMLElement);
const compareSection = element("section#compare", HTMLElement);
const compareInput = element("input[name=compare]", HTMLInputElement);
const compareError = element("p#compare-error", HTMLElement);
/** Counts looks at tensors, so that a slow one finishing after a newer click is dropped. */
let look = 0;

element("button#compare-run", HTMLButtonElement).addEventListener("click", () => void compare());
compareInput.addEventListener("change", () => void compare());

/**
 * Shows a tensor's statistics and histogram; `section#tensor-look` has `data-state` `reading`,
 * `ready` or `failed` and `data-name` the tensor's name.
 */
async function lookAt(name: string): Promise<void> {
  const turn = ++look;
  lookSection.hidden = false;
  lookSection.dataset.name = name;
  lookSection.dataset.state = "reading";
  element("#look-title", HTMLElement).textContent = name;
  const lookError = element("p#look-error", HTMLElement);
  lookError.hidden = true;
  try {
    const found = await lookAtTensor(files, name, { formatOptions: formatOptionValues() });
    if (turn !== look) return;
    renderStats(element("table#look-stats", HTMLTableElement), found.stats);
    drawHistogram(element("canvas#histogram", HTMLCanvasElement), found.histogram);
    lookSection.dataset.state = "ready";
  } catch (error) {
    if (turn !== look) return;
    lookError.textContent = describeError(error);
    lookError.hidden = false;
    lookSection.dataset.state = "failed";
  }
}

/** Compares the picked file with the other one; `section#compare` has `data-state` `comparing`, `ready` or `failed`. */
async function compare(): Promise<void> {
  const other = [...(compareInput.files ?? [])];
  compareError.hidden = true;
  if (files.length === 0 || other.length === 0) return;
  compareSection.dataset.state = "comparing";
  try {
    const tolerance = (field: string) => {
      const text = (document.querySelector<HTMLInputElement>(`input[name=${field}]`)?.value ?? "").trim();
      if (text === "") return undefined;
      const value = Number(text);
      if (!Number.isFinite(value) || value < 0) throw new Error(`${field} ${JSON.stringify(text)}: expected a number of at least 0`);
      return value;
    };
    const settings = pageSettings();
    const found = await diffFiles(files, other, settings, { atol: tolerance("atol"), rtol: tolerance("rtol") });
    const table = element("table#diff", HTMLTableElement);
    renderDiff(table, element("ul#diff-metadata", HTMLUListElement), element("p#diff-summary", HTMLElement), found);
    table.hidden = false;
    compareSection.dataset.state = "ready";
  } catch (error) {
    compareError.textContent = error instanceof Error && !("code" in error) ? error.message : describeError(error);
    compareError.hidden = false;
    compareSection.dataset.state = "failed";
  }
}

/** Draws what the file holds, as `st-convert info` prints it. */
function renderInfo(found: FileInfo): void {
  renderTree(element("div#tree", HTMLElement), tensorTree(found.tensors), (name) => void lookAt(name));
  lookSection.hidden = true;
  compareSection.hidden = false;
  element("#info-title", HTMLElement).textContent = `${found.file}: ${found.format}`;
  const metadataTable = element("table#metadata", HTMLTableElement);
  const metadataLine = element("p#metadata-line", HTMLElement);
  const entries = found.metadata === null ? [] : Object.entries(found.metadata);
  metadataLine.textContent = found.metadata === null ? "metadata: none" : entries.length === 0 ? "metadata: {}" : "metadata:";
  metadataTable.hidden = entries.length === 0;
  metadataTable.tBodies[0]!.replaceChildren(...(found.metadataShown ?? entries).map(([key, value]) => row([key, value])));
  // A "stored" column where the format says how it stores tensors (a GGUF's ggml types).
  const stored = found.tensors.some((t) => t.stored !== undefined);
  const headers = ["name", "dtype", "shape", "bytes", ...(stored ? ["stored"] : [])];
  element("table#tensors thead tr", HTMLTableRowElement).replaceChildren(
    ...headers.map((text, i) => {
      const th = document.createElement("th");
      th.textContent = text;
      if (i === 3) th.className = "number";
      return th;
    }),
  );
  const rows = found.tensors
    .slice(0, MAX_TABLE_ROWS)
    .map((t) => row([t.name, t.dtype, `[${t.shape.join(", ")}]`, groupDigits(t.byteLength), ...(stored ? [t.stored ?? ""] : [])], 3));
  if (found.tensors.length > MAX_TABLE_ROWS) {
    const more = row([`… and ${plural(found.tensors.length - MAX_TABLE_ROWS, "more tensor")} (counted in the totals)`]);
    more.cells[0]!.colSpan = headers.length;
    rows.push(more);
  }
  element("table#tensors", HTMLTableElement).tBodies[0]!.replaceChildren(...rows);
  const t = found.totals;
  element("p#totals", HTMLElement).textContent =
    `${plural(t.tensors, "tensor")}, ${plural(t.parameters, "parameter")}, ${formatSize(t.bytes)} (${plural(t.bytes, "byte")})`;
  infoSection.hidden = false;
}

function row(cells: readonly string[], numberColumn = -1): HTMLTableRowElement {
  const tr = document.createElement("tr");
  cells.forEach((text, i) => {
    const td = tr.insertCell();
    td.textContent = text;
    if (i === numberColumn) td.className = "number";
  });
  return tr;
}

function setRunning(on: boolean): void {
  submit.disabled = on;
  cancel.hidden = !on;
  progress.hidden = !on;
  if (on) progress.value = 0;
}

function clearStatus(): void {
  errorLine.hidden = true;
  errorLine.textContent = "";
  warningList.replaceChildren();
  result.replaceChildren();
}

function showError(error: unknown): void {
  if (!(typeof error === "object" && error !== null && "code" in error)) console.error(error);
  showErrorLine(describeError(error));
}

function showErrorLine(line: string): void {
  errorLine.textContent = line;
  errorLine.hidden = false;
}

function addWarning(line: string): void {
  const item = document.createElement("li");
  item.textContent = `warning: ${line}`;
  warningList.append(item);
}

function element<T extends Element>(selector: string, type: abstract new () => T): T {
  const found = document.querySelector(selector);
  if (!(found instanceof type)) throw new Error(`the page has no ${selector}`);
  return found;
}
