/**
 * Settings every vitest project shares. The suite must pass on a busy 2-core machine (CI runs it
 * beside other work): no test may rely on how fast the machine is, so the per-test budget is far
 * above what any test needs when idle (the slowest take a few seconds), and it only catches hangs.
 * Tests that spawn many processes (the CLI's) get more: one `npx st-convert` costs 0.6 s on a
 * loaded machine, and a test may run a dozen.
 */
export const TEST_TIMEOUT_MS = 60_000;
export const SPAWNING_TEST_TIMEOUT_MS = 180_000;
export const HOOK_TIMEOUT_MS = 300_000;
