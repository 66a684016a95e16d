/** Writing GGUF files (work in progress: the skeleton's placeholder). */
import { type ByteSink, StConvertError, type TensorSource } from "@st-convert/core";

export interface GgufWriteOptions {
  /** `TYPE` or `NAME_REGEX:TYPE` rules, as `--quantize` gives them. */
  readonly quantize?: readonly string[];
  readonly onWarning?: (message: string) => void;
}

export async function writeGguf(_tensors: TensorSource, _sink: ByteSink, _options: GgufWriteOptions = {}): Promise<void> {
  throw new StConvertError("Unsupported", "GGUF writing is not implemented yet");
}
