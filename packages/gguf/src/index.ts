/**
 * `@st-convert/gguf`: GGUF files (llama.cpp, ggml) to and from the tensor model of st-convert,
 * streaming both ways.
 */
export { type GgufReadOptions, readGguf } from "./readGguf.js";
export { type GgufWriteOptions, writeGguf } from "./writeGguf.js";
export { ggufFormat, sniffGguf } from "./format.js";
