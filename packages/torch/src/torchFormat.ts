/**
 * The PyTorch checkpoint format as registered with the `st-convert` command: how it is
 * recognised, its options, and the reader and writer behind it (loaded on first use). Also the
 * package's `./format` entry point.
 */
import { StConvertError, type TensorFormat, fileStem, lazyModule, stringOption } from "@st-convert/core";
import { firstZipMemberName } from "@st-convert/npy/format";

/** Loaded on first use, then kept. */
const readerModule = lazyModule(() => import("./readTorch.js"));
const writerModule = lazyModule(() => import("./writeTorch.js"));
const indexModule = lazyModule(() => import("./readTorchIndex.js"));

/** `8a 0a` + the legacy magic number's bytes (LONG1 of `0x1950a86a20f9469cfc6c`). */
const MAGIC_LONG = [0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/**
 * True when `head` (the first bytes of a file) starts like a PyTorch checkpoint: a zip whose
 * first member is `data.pkl` or `<folder>/data.pkl` (torch.save writes it first), or a legacy
 * stream whose first pickle is torch's magic number (after PROTO, and FRAME from protocol 4).
 */
export function sniffTorch(head: Uint8Array): boolean {
  if (head[0] === 0x50 && head[1] === 0x4b && head[2] === 3 && head[3] === 4) {
    // The name as the npz sniff reads it, so that the two never both claim a file.
    const name = firstZipMemberName(head);
    return name !== undefined && (name === "data.pkl" || name.endsWith("/data.pkl"));
  }
  if (head[0] === 0x80 && head.byteLength >= 2) {
    const at = head[1]! >= 4 && head[2] === 0x95 ? 11 : 2;
    return MAGIC_LONG.every((b, i) => head[at + i] === b);
  }
  return false;
}

/**
 * PyTorch checkpoints (`torch.save`, zip and legacy), as registered with the `st-convert` command.
 * Options: `key` (read the tensors under one entry of the top-level dict).
 */
export const torchFormat: TensorFormat = {
  name: "torch",
  description: "PyTorch checkpoints (torch.save: zip and legacy; read without running pickle)",
  extensions: [".bin", ".pt", ".pth", ".ckpt"],
  // .bin is also safetensors, LFS pointers, tokenizers' data…: folder walks take only what sniffs as a checkpoint.
  ambiguousExtension: true,
  options: [
    {
      name: "key",
      type: "string",
      multiple: false,
      valueName: "KEY",
      description: "torch: read the tensors under this entry of the checkpoint's dict (dotted for nested: model.ema)",
      appliesTo: "read",
    },
  ],
  sniff: sniffTorch,
  // The reader and writer load on first use: a command that touches no checkpoint does not pay for them.
  async open(source, context) {
    const { readTorch } = await readerModule();
    return readTorch(source, {
      key: stringOption(context.options, "key"),
      onWarning: context.onWarning,
      rootName: fileStem(context.fileName),
      include: context.include,
    });
  },
  async write(tensors, sink, context) {
    const { writeTorch } = await writerModule();
    await writeTorch(tensors, sink, { onWarning: context.onWarning, rootFolder: fileStem(context.fileName) });
  },
};

/** Sharded PyTorch checkpoints as the `st-convert` command reads them: give it `pytorch_model.bin.index.json`. */
export const torchIndexFormat: TensorFormat = {
  name: "torch-index",
  description: "a sharded PyTorch checkpoint, read through its pytorch_model.bin.index.json (read only)",
  extensions: [".bin.index.json", ".pt.index.json", ".pth.index.json"],
  namedOnly: true,
  readOnly: true,
  async open(source, context) {
    if (context.openSibling === undefined) {
      throw new StConvertError("InvalidArgument", "a sharded checkpoint's shards cannot be opened here (no openSibling in the context)", { file: source.name });
    }
    const { readTorchIndex } = await indexModule();
    return readTorchIndex(source, context.openSibling, { onWarning: context.onWarning, include: context.include });
  },
  async write() {
    throw new StConvertError(
      "Unsupported",
      "writing a sharded checkpoint is not supported; write one .pt file (the shards of an index convert on their own too)",
    );
  },
};

const dcpReaderModule = lazyModule(() => import("./readDcp.js"));
const dcpWriterModule = lazyModule(() => import("./writeDcp.js"));

/** The module DCP's metadata classes live in, as the `.metadata` pickle names it first. */
const DCP_METADATA_MODULE = new TextEncoder().encode("torch.distributed.checkpoint.metadata");

/** True when `head` is a pickle (PROTO) that names DCP's metadata module in its first bytes: a `.metadata` file. */
export function sniffDcpMetadata(head: Uint8Array): boolean {
  if (head[0] !== 0x80 || head.byteLength < 64) return false;
  const end = Math.min(head.byteLength, 256) - DCP_METADATA_MODULE.byteLength;
  for (let at = 2; at <= end; at++) {
    let i = 0;
    while (i < DCP_METADATA_MODULE.byteLength && head[at + i] === DCP_METADATA_MODULE[i]) i++;
    if (i === DCP_METADATA_MODULE.byteLength) return true;
  }
  return false;
}

/**
 * Distributed checkpoints (`torch.distributed.checkpoint`: FSDP2, torchtitan, Megatron's
 * `torch_dist`), as registered with the `st-convert` command: a folder holding `.metadata` and
 * `__R_N.distcp` files, read consolidated; written as a single-rank folder.
 */
export const dcpFormat: TensorFormat = {
  name: "dcp",
  description: "distributed checkpoints (torch.distributed.checkpoint: a folder with .metadata; consolidated as read)",
  extensions: [".metadata"],
  folderEntry: ".metadata",
  // A folder walk takes the folder's own checkpoints one by one; a DCP is converted when named.
  namedOnly: true,
  sniff: sniffDcpMetadata,
  async open(source, context) {
    if (context.openSibling === undefined) {
      throw new StConvertError("InvalidArgument", "a distributed checkpoint's files cannot be opened here (no openSibling in the context)", {
        file: source.name,
      });
    }
    const { readDcp } = await dcpReaderModule();
    return readDcp(source, context.openSibling, { onWarning: context.onWarning, include: context.include });
  },
  async write() {
    throw new StConvertError("Unsupported", "a distributed checkpoint is a folder: it is written through writeFolder, not into one file");
  },
  async writeFolder(tensors, open, context) {
    const { writeDcp } = await dcpWriterModule();
    await writeDcp(tensors, open, { onWarning: context.onWarning });
  },
};
