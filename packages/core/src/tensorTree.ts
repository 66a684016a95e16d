/**
 * A checkpoint's tensor names grouped by their dotted prefixes (`model.layers.0.self_attn.q_proj`),
 * with the parameters and bytes of each group, and runs of numbered groups that hold the same
 * tensors (names, dtypes and shapes) folded into one: `layers.{0..31}`. A checkpoint of thousands
 * of tensors reads as the model's structure (`st-convert info --tree`, the page's tree).
 */
import { compareCodePoints } from "./Tensor.js";

/** One group (or tensor) of the tree. */
export interface TensorTreeNode {
  /** The name's segment(s) below the parent: `self_attn`, `embed_tokens.weight` (a chain of single groups joined), `{0..31}` (folded). */
  name: string;
  /** Tensors in the group (all repeats, for a folded group). */
  tensors: number;
  /** Elements in the group (all repeats). */
  params: number;
  /** Tensor bytes in the group (all repeats). */
  bytes: number;
  /** For a folded group: how many numbered groups it stands for; its children describe one of them. */
  repeat?: number;
  /** When the full name up to here is a tensor: its dtype and shape. */
  dtype?: string;
  shape?: number[];
  children: TensorTreeNode[];
}

interface Building {
  name: string;
  tensor?: { dtype: string; shape: number[]; params: number; bytes: number };
  children: Map<string, Building>;
}

/** The tree of `tensors`' names; the root's name is empty. */
export function tensorTree(tensors: readonly { name: string; dtype: string; shape: readonly number[]; byteLength: number }[]): TensorTreeNode {
  const root: Building = { name: "", children: new Map() };
  for (const t of tensors) {
    let node = root;
    for (const segment of t.name.split(".")) {
      let child = node.children.get(segment);
      if (child === undefined) {
        child = { name: segment, children: new Map() };
        node.children.set(segment, child);
      }
      node = child;
    }
    node.tensor = { dtype: t.dtype, shape: [...t.shape], params: t.shape.reduce((n, d) => n * d, 1), bytes: t.byteLength };
  }
  return finish(root, true);
}

const NUMBER = /^(0|[1-9]\d*)$/;

/** Natural order: numbered segments by number, before the others, which go in code-point order. */
function compareSegments(a: string, b: string): number {
  const x = NUMBER.test(a);
  const y = NUMBER.test(b);
  if (x && y) return Number(a) - Number(b);
  if (x !== y) return x ? -1 : 1;
  return compareCodePoints(a, b);
}

function finish(node: Building, isRoot: boolean): TensorTreeNode {
  const children = [...node.children.values()].sort((a, b) => compareSegments(a.name, b.name)).map((c) => finish(c, false));
  let out: TensorTreeNode = {
    name: node.name,
    tensors: (node.tensor === undefined ? 0 : 1) + children.reduce((n, c) => n + c.tensors, 0),
    params: (node.tensor?.params ?? 0) + children.reduce((n, c) => n + c.params, 0),
    bytes: (node.tensor?.bytes ?? 0) + children.reduce((n, c) => n + c.bytes, 0),
    ...(node.tensor === undefined ? {} : { dtype: node.tensor.dtype, shape: node.tensor.shape }),
    children: fold(children),
  };
  // A group with one group in it and no tensor of its own reads as one name: `embed_tokens.weight`,
  // `layers.{0..31}`.
  while (!isRoot && out.dtype === undefined && out.children.length === 1) {
    const only = out.children[0]!;
    out = { ...only, name: `${out.name}.${only.name}` };
  }
  return out;
}

/** What makes two groups the same: their tensors' relative names, dtypes and shapes. */
function signature(node: TensorTreeNode): string {
  const own = node.dtype === undefined ? "" : `${node.dtype}${JSON.stringify(node.shape)}`;
  return `${own}(${node.children.map((c) => `${c.name}${c.repeat === undefined ? "" : `*${c.repeat}`}:${signature(c)}`).join(",")})`;
}

/** Runs of consecutive numbered groups with the same signature, two or more, become one folded group. */
function fold(children: TensorTreeNode[]): TensorTreeNode[] {
  const out: TensorTreeNode[] = [];
  for (let i = 0; i < children.length; ) {
    const first = children[i]!;
    if (!NUMBER.test(first.name)) {
      out.push(first);
      i++;
      continue;
    }
    const sig = signature(first);
    let j = i + 1;
    while (j < children.length && children[j]!.name === String(Number(first.name) + (j - i)) && signature(children[j]!) === sig) j++;
    if (j - i < 2) {
      out.push(first);
      i++;
      continue;
    }
    const run = children.slice(i, j);
    out.push({
      ...first,
      name: `{${first.name}..${children[j - 1]!.name}}`,
      repeat: run.length,
      tensors: run.reduce((n, c) => n + c.tensors, 0),
      params: run.reduce((n, c) => n + c.params, 0),
      bytes: run.reduce((n, c) => n + c.bytes, 0),
    });
    i = j;
  }
  return out;
}
