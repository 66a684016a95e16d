/**
 * The `.npy` and `.npz` formats as registered with the `st-convert` command: names, options and
 * content sniffing here, the readers and writers loaded on first use, so that a command that
 * touches no NumPy file does not pay for loading them. Also the package's `./format` entry point.
 */
import { type TensorFormat, fileStem, lazyModule, stringListOption, stringOption } from "@st-convert/core";

/** Loaded on first use, then kept. */
const npyModule = lazyModule(() => import("./npy.js"));
const npzModule = lazyModule(() => import("./npz.js"));

/** The `--dtype` option, shared by npy and npz. */
export const DTYPE_OPTION = {
  name: "dtype",
  type: "string",
  multiple: true,
  valueName: "V2=BF16",
  description: "what a raw void dtype holds when reading: V2=BF16, V1=F8_E4M3, or NAME:V2=BF16 for one tensor",
  appliesTo: "read",
} as const;

/** `\x93NUMPY`, the first bytes of every `.npy` file. */
const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];

/** The `.npy` format, as registered with the `st-convert` command. */
export const npyFormat: TensorFormat = {
  name: "npy",
  description: "NumPy .npy: one array (v1/v2/v3 headers, either byte order, C or Fortran order)",
  extensions: [".npy"],
  options: [
    {
      name: "name",
      type: "string",
      multiple: false,
      valueName: "NAME",
      description: "tensor name when reading a .npy (default: the file name without its extension)",
      appliesTo: "read",
    },
    DTYPE_OPTION,
  ],
  sniff: (head) => MAGIC.every((b, i) => head[i] === b),
  async open(source, context) {
    const { readNpy } = await npyModule();
    return readNpy(source, {
      // Else readNpy names it after the source, else "arr_0".
      name: stringOption(context.options, "name") ?? fileStem(context.fileName),
      dtypes: stringListOption(context.options, "dtype"),
      onWarning: context.onWarning,
    });
  },
  async write(tensors, sink, context) {
    const { writeNpy } = await npyModule();
    await writeNpy(tensors, sink, { onWarning: context.onWarning });
  },
};

/**
 * The name the first local header of a zip gives its member, cut at NUL as zipfile names a member
 * (so that a name ending in .npy only past a NUL is no array's); undefined when the header or the
 * name is not all in `head`. The npz and torch sniffs both judge a zip by it.
 */
export function firstZipMemberName(head: Uint8Array): string | undefined {
  if (head.byteLength < 30) return undefined;
  const nameLength = head[26]! | (head[27]! << 8);
  if (30 + nameLength > head.byteLength) return undefined;
  return String.fromCharCode(...head.subarray(30, 30 + nameLength)).split("\0")[0]!;
}

/** The `.npz` format, as registered with the `st-convert` command. */
export const npzFormat: TensorFormat = {
  name: "npz",
  description: "NumPy .npz: a zip of .npy arrays (stored or deflated, ZIP64); metadata kept in the archive comment",
  extensions: [".npz"],
  options: [
    DTYPE_OPTION,
    { name: "compress", type: "boolean", multiple: false, description: "deflate the members when writing, like np.savez_compressed", appliesTo: "write" },
  ],
  sniff(head) {
    // Any zip starts with PK\3\4; numpy names every member *.npy, so the first name tells when it is visible.
    if (head.byteLength < 4 || head[0] !== 0x50 || head[1] !== 0x4b || head[2] !== 3 || head[3] !== 4) return false;
    const name = firstZipMemberName(head);
    return name === undefined || name.endsWith(".npy");
  },
  async open(source, context) {
    const { readNpz } = await npzModule();
    return readNpz(source, {
      dtypes: stringListOption(context.options, "dtype"),
      onWarning: context.onWarning,
      scratch: context.scratch,
      include: context.include,
    });
  },
  async write(tensors, sink, context) {
    const { writeNpz } = await npzModule();
    await writeNpz(tensors, sink, { compress: context.options.compress === true });
  },
};
