/** `info --tree` as text: core's tensor tree, one line per group or tensor. */
import type { TensorTreeNode } from "@st-convert/core";
import { formatSize } from "./progress.js";
import { groupDigits } from "./text.js";

/**
 * The tree as text: one line per group or tensor, indented by depth, with a tensor's dtype and
 * shape, and the parameters and bytes of each line (a folded group's totals, `×N`; its lines
 * below describe one of its groups).
 */
export function renderTensorTree(root: TensorTreeNode): string {
  const rows: [string, string, string][] = [];
  const walk = (node: TensorTreeNode, depth: number): void => {
    const indent = "  ".repeat(depth);
    const label =
      node.dtype !== undefined && node.children.length === 0
        ? `${indent}${node.name}  ${node.dtype} [${node.shape!.join(", ")}]`
        : `${indent}${node.name}${node.repeat === undefined ? "" : `  ×${node.repeat}`}${node.children.length > 0 ? ` (${groupDigits(node.tensors)} tensors)` : ""}`;
    rows.push([label, groupDigits(node.params), formatSize(node.bytes)]);
    for (const child of node.children) walk(child, depth + 1);
  };
  for (const child of root.children) walk(child, 0);
  const head: [string, string, string] = ["group", "params", "bytes"];
  const widths = [0, 1, 2].map((i) => Math.max(head[i]!.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: readonly string[]) => `${r[0]!.padEnd(widths[0]!)}  ${r[1]!.padStart(widths[1]!)}  ${r[2]!.padStart(widths[2]!)}`;
  return `${[line(head), ...rows.map(line)].join("\n")}\n`;
}
