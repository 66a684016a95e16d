/**
 * A kernel thread of a conversion (see kernelPool.ts): runs the formats' kernels it is sent, one at
 * a time, and answers each with its result (the buffers of the typed arrays in it moved back).
 */
import { parentPort } from "node:worker_threads";
import { FORMATS } from "./formats.js";
import { type KernelAnswer, type KernelCall, READY, findKernel, returnedBuffers } from "./kernelPool.js";

const port = parentPort;
if (port === null) throw new Error("kernelWorker.js runs as a worker thread of a conversion");

port.on("message", (call: KernelCall) => {
  findKernel(FORMATS, call.format, call.kernel).then(
    (kernel) => {
      let answer: KernelAnswer;
      try {
        const result = kernel(...call.args);
        answer = { id: call.id, result };
        port.postMessage(answer, returnedBuffers(result));
      } catch (error) {
        answer = { id: call.id, error: error instanceof Error ? error.message : String(error) };
        port.postMessage(answer);
      }
    },
    (error: unknown) => port.postMessage({ id: call.id, error: error instanceof Error ? error.message : String(error) } satisfies KernelAnswer),
  );
});

port.postMessage({ id: READY, result: undefined } satisfies KernelAnswer);
