/** Percentile of an ascending array by linear interpolation (the same rule as bench/). */
export function percentile(sorted: number[], p: number): number {
  const rank = (p / 100) * (sorted.length - 1);
  const lo = sorted[Math.floor(rank)];
  const hi = sorted[Math.ceil(rank)];
  // Missing only for an empty array (or p outside 0..100).
  if (lo === undefined || hi === undefined) return NaN;
  return lo + (hi - lo) * (rank - Math.floor(rank));
}
