/**
 * A worker thread of a batch (see batchWorkers.ts): takes jobs from the shared counter until none
 * is left or the main thread says abort, and reports each one's start, progress, notices and outcome.
 */
import { parentPort, workerData } from "node:worker_threads";
import { type WorkerMessage, type WorkerSetup, sentOutcome } from "./batchWorkers.js";
import { JOBS_PER_TURN, attemptJob, eventLoopTurn } from "./convertMany.js";

const port = parentPort;
if (port === null) throw new Error("batchWorker.js runs as a worker thread of a batch");
const setup = workerData as WorkerSetup;
const controller = new AbortController();
port.on("message", (message: { type: string }) => {
  if (message.type === "abort") controller.abort();
});
const post = (message: WorkerMessage) => port.postMessage(message);
const options = { ...setup.options, signal: controller.signal };
const folders = new Set<string>();
/** Progress is sent at most this often: a message per chunk of thousands of small files would keep the main thread busy. */
const PROGRESS_EVERY_MS = 50;
let lastProgress = 0;

async function loop(): Promise<void> {
  for (let done = 0; ; done++) {
    // The main thread's abort message is taken in a turn of the event loop.
    if (done % JOBS_PER_TURN === JOBS_PER_TURN - 1) await eventLoopTurn();
    if (controller.signal.aborted) return;
    const index = Atomics.add(setup.next, 0, 1);
    if (index >= setup.jobs.length) return;
    post({ type: "start", index });
    const outcome = await attemptJob(
      setup.jobs[index]!,
      options,
      {
        progress: (done, total) => {
          const now = Date.now();
          if (now - lastProgress < PROGRESS_EVERY_MS) return;
          lastProgress = now;
          post({ type: "progress", index, done, total });
        },
        warning: (file, message) => post({ type: "warning", index, file, message }),
      },
      folders,
      setup.outputsAbsent,
    );
    post({ type: "outcome", index, outcome: sentOutcome(outcome) });
  }
}

// Not a top-level await: the bundle is CommonJS (scripts/bundle.mjs). A loop that throws (a bug)
// is an unhandled rejection, which ends the thread with an error event, as a thrown await did.
void Promise.all(Array.from({ length: setup.loops }, loop)).then(() => post({ type: "done" }));
