/**
 * Like `Promise.all`, but waits for every promise to settle before throwing the first failure
 * (in array order), so that no rejection is left unobserved while the caller has moved on.
 */
export async function settleAll<T>(promises: readonly Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(promises);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed !== undefined) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}

/**
 * `map` over `items` with at most `batchSize` calls in flight: one batch at a time, each settled
 * (see {@link settleAll}) before the next starts. Results in the order of `items`.
 */
export async function settleInBatches<T, R>(items: readonly T[], batchSize: number, map: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += batchSize) results.push(...(await settleAll(items.slice(i, i + batchSize).map((item) => map(item)))));
  return results;
}
