/**
 * Runs `fn` over `items` with at most `lanes` at once, in the order given (a lane takes
 * the next item when its current one settles). Every item settles: a rejection is
 * returned as that item's outcome, never thrown, so one failed mode does not cost the
 * others their results.
 */
export async function inLanes<T, R>(
  items: readonly T[],
  lanes: number,
  fn: (item: T) => Promise<R>,
): Promise<PromiseSettledResult<R>[]> {
  const out: PromiseSettledResult<R>[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        out[i] = { status: 'fulfilled', value: await fn(items[i] as T) };
      } catch (reason) {
        out[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(lanes, items.length)) }, lane));
  return out;
}
