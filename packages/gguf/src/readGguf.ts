/** Reading GGUF files (work in progress: the skeleton's placeholder). */
import { type ByteSource, StConvertError, type TensorSource } from "@st-convert/core";

export interface GgufReadOptions {
  /** Keep quantized tensors as their blocks (U8 `[rows, bytes per row]`). */
  readonly keepQuantized?: boolean;
  readonly onWarning?: (message: string) => void;
  /** Path or label of the file, for messages and for finding the rest of a split set. */
  readonly fileName?: string;
  /** Opens a file named relative to this one (the other files of a split set). */
  readonly openSibling?: (name: string) => Promise<ByteSource>;
}

export async function readGguf(_source: ByteSource, _options: GgufReadOptions = {}): Promise<TensorSource> {
  throw new StConvertError("Unsupported", "GGUF reading is not implemented yet");
}
