/**
 * A kernel thread of a conversion (see kernelPool.ts): runs the formats' kernels it is sent, one at
 * a time, and answers each with its result (the buffers of the typed arrays in it moved back).
 */
import { parentPort } from "node:worker_threads";
import { FORMATS } from "./formats.js";
import { type KernelAnswer, type KernelCall, READY, findKernel, returnedBuffers } from "./kernelPool.js";

const port = parentPort;
if (port === null) throw new Error("kernelWorker.js runs as a worker thread of a conversion");

/** The answer to call `id` that failed with `error`. */
const failure = (id: number, error: unknown): KernelAnswer => ({ id, error: error instanceof Error ? error.message : String(error) });

port.on("message", (call: KernelCall) => {
  findKernel(FORMATS, call.format, call.kernel).then(
    (kernel) => {
      try {
        const result = kernel(...call.args);
        port.postMessage({ id: call.id, result } satisfies KernelAnswer, returnedBuffers(result));
      } catch (error) {
        port.postMessage(failure(call.id, error));
      }
    },
    (error: unknown) => port.postMessage(failure(call.id, error)),
  );
});

port.postMessage({ id: READY, result: undefined } satisfies KernelAnswer);
