/**
 * Seeing a model, not a list: the page's tree of tensor groups (collapsible, repeated layers
 * folded), a tensor's statistics with a histogram drawn on a canvas, and a comparison of two files.
 * Numbers are written as `st-convert --json` writes them (JavaScript's shortest decimals, `NaN`,
 * `Infinity`), so that what the page shows can be checked against the command.
 */
import type { Histogram, TensorStats, TensorTreeNode } from "@st-convert/core";
import type { PageDiff } from "./convertInPage.js";
import { formatSize, groupDigits, plural } from "./text.js";

/** A number as the JSON report spells it: shortest decimals, `NaN`, `Infinity`, `-Infinity`, `null`. */
export function reportText(value: number | null): string {
  if (value === null) return "null";
  return Number.isFinite(value) ? String(value) : Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
}

/**
 * Draws `tree` into `container`: a `<details>` per group (the first two levels open), a button per tensor
 * carrying its full name in `data-name`; a folded group's tensors are those of its first repeat.
 */
export function renderTree(container: HTMLElement, tree: TensorTreeNode, onPick: (name: string) => void): void {
  const list = (nodes: readonly TensorTreeNode[], prefix: string, depth: number): HTMLElement => {
    const box = document.createElement("div");
    box.className = "tree-level";
    for (const node of nodes) box.append(item(node, prefix, depth));
    return box;
  };
  const item = (node: TensorTreeNode, prefix: string, depth: number): HTMLElement => {
    // `{0..31}` stands for its first repeat in the names below it.
    const segment = node.name.replace(/\{(\d+)\.\.\d+\}/g, "$1");
    const full = prefix === "" ? segment : `${prefix}.${segment}`;
    const figures = `${groupDigits(node.params)} params, ${formatSize(node.bytes)}`;
    if (node.children.length === 0) return tensorButton(node, full, figures, onPick);
    const details = document.createElement("details");
    details.className = "group";
    details.open = depth <= 1;
    details.dataset.group = full;
    const summary = document.createElement("summary");
    const label = document.createElement("span");
    label.className = "group-name";
    label.textContent = node.name;
    const extra = document.createElement("span");
    extra.className = "figures";
    extra.textContent = `${node.repeat === undefined ? "" : `×${node.repeat} · `}${plural(node.tensors, "tensor")} · ${figures}`;
    summary.append(label, extra);
    details.append(summary);
    // A group whose name is itself a tensor (`a` beside `a.b`) lists that tensor first.
    if (node.dtype !== undefined) details.append(tensorButton({ ...node, children: [] }, full, "", onPick));
    details.append(list(node.children, full, depth + 1));
    return details;
  };
  container.replaceChildren(list(tree.children, "", 0));
}

function tensorButton(node: TensorTreeNode, full: string, figures: string, onPick: (name: string) => void): HTMLButtonElement {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "tensor";
  button.dataset.name = full;
  const name = document.createElement("span");
  name.textContent = node.name;
  const kind = document.createElement("span");
  kind.className = "figures";
  kind.textContent = `${node.dtype} [${(node.shape ?? []).join(", ")}]${figures === "" ? "" : ` · ${figures}`}`;
  button.append(name, kind);
  button.addEventListener("click", () => onPick(full));
  return button;
}

/** The statistics `st-convert stats --json` reports, in its order. */
const STAT_KEYS = ["min", "max", "mean", "std", "nan", "posinf", "neginf", "zeros"] as const;

/** Fills `table` with one row per statistic: `td[data-stat=KEY]` holds the value as the JSON report spells it. */
export function renderStats(table: HTMLTableElement, stats: TensorStats): void {
  const body = table.tBodies[0] ?? table.createTBody();
  body.replaceChildren(
    ...STAT_KEYS.map((key) => {
      const row = document.createElement("tr");
      const head = document.createElement("th");
      head.textContent = key;
      const cell = document.createElement("td");
      cell.className = "number";
      cell.dataset.stat = key;
      cell.textContent = reportText(stats[key]);
      row.append(head, cell);
      return row;
    }),
  );
}

/**
 * Draws a histogram as bars on `canvas`, with its range and largest count as labels; the counts
 * go on `canvas.dataset.counts` (comma-separated) for scripts.
 */
export function drawHistogram(canvas: HTMLCanvasElement, histogram: Histogram | undefined): void {
  const context = canvas.getContext("2d");
  if (context === null) return;
  const { width, height } = canvas;
  const style = getComputedStyle(canvas);
  const ink = style.color || "#222";
  const accent = style.getPropertyValue("--accent").trim() || "#3b6fd8";
  context.clearRect(0, 0, width, height);
  context.font = "12px system-ui, sans-serif";
  context.fillStyle = ink;
  if (histogram === undefined) {
    canvas.dataset.counts = "";
    context.fillText("no finite value to draw", 8, height / 2);
    return;
  }
  canvas.dataset.counts = histogram.counts.join(",");
  const top = 18;
  const bottom = height - 20;
  const left = 8;
  const right = width - 8;
  const most = Math.max(1, ...histogram.counts);
  const step = (right - left) / histogram.counts.length;
  context.fillStyle = accent;
  histogram.counts.forEach((count, i) => {
    const h = ((bottom - top) * count) / most;
    context.fillRect(left + i * step + 0.5, bottom - h, Math.max(1, step - 1), h);
  });
  context.fillStyle = ink;
  context.fillRect(left, bottom, right - left, 1);
  context.textBaseline = "top";
  context.fillText(reportText(histogram.min), left, bottom + 4);
  const maxText = reportText(histogram.max);
  context.fillText(maxText, right - context.measureText(maxText).width, bottom + 4);
  context.textBaseline = "alphabetic";
  context.fillText(`${groupDigits(most)} in the fullest of ${histogram.counts.length} bins`, left, top - 5);
}

/** Fills the comparison's table (`tr[data-name]`, cells by `data-field`), metadata list and summary line. */
export function renderDiff(table: HTMLTableElement, metadataList: HTMLUListElement, summary: HTMLElement, found: PageDiff): void {
  const body = table.tBodies[0] ?? table.createTBody();
  body.replaceChildren(
    ...found.tensors.map((t) => {
      const row = document.createElement("tr");
      row.dataset.name = t.name;
      row.dataset.status = t.status;
      const cells: [string, string][] = [
        ["name", t.name],
        ["status", t.status],
        ["a", t.dtype.a === null ? "" : `${t.dtype.a} [${t.shape.a!.join(", ")}]`],
        ["b", t.dtype.b === null ? "" : `${t.dtype.b} [${t.shape.b!.join(", ")}]`],
        ["differing", t.differing === null ? "" : String(t.differing)],
        ["maxAbsDiff", t.maxAbsDiff === null ? "" : reportText(t.maxAbsDiff)],
        ["maxRelDiff", t.maxRelDiff === null ? "" : reportText(t.maxRelDiff)],
        ["firstIndex", t.firstIndex === null ? "" : `[${t.firstIndex.join(", ")}]`],
      ];
      for (const [field, text] of cells) {
        const cell = row.insertCell();
        cell.dataset.field = field;
        cell.textContent = text;
        if (["differing", "maxAbsDiff", "maxRelDiff"].includes(field)) cell.className = "number";
      }
      return row;
    }),
  );
  const m = found.metadata;
  metadataList.replaceChildren(
    ...[
      ...m.onlyInA.map((k) => `metadata ${JSON.stringify(k)}: only in A`),
      ...m.onlyInB.map((k) => `metadata ${JSON.stringify(k)}: only in B`),
      ...m.differ.map((k) => `metadata ${JSON.stringify(k)}: values differ`),
    ].map((text) => {
      const item = document.createElement("li");
      item.textContent = text;
      return item;
    }),
  );
  const { totals } = found;
  const rule = found.tolerance === null ? "exactly" : `within atol ${found.tolerance.atol}, rtol ${found.tolerance.rtol}`;
  summary.textContent = `${found.a.file} (${found.a.format}) against ${found.b.file} (${found.b.format}): ${found.same ? "same" : "different"} (${rule}): ${plural(totals.same, "tensor")} equal, ${totals.differ} differ, ${totals.onlyInA} only in A, ${totals.onlyInB} only in B`;
  summary.dataset.same = String(found.same);
}
