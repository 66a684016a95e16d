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
