/**
 * Small statistics helpers for the benchmark: percentiles over samples and a compact summary.
 */

/** A latency distribution in milliseconds. */
export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/**
 * The p-th percentile (0–100) of `samples`, linearly interpolated between the closest ranks.
 * Returns NaN for an empty sample.
 */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  return percentileSorted(sorted, p);
}

function percentileSorted(sorted: readonly number[], p: number): number {
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

/** The median of `samples` (NaN when empty). */
export function median(samples: readonly number[]): number {
  return percentile(samples, 50);
}

/** min, p50, p90, p99, max and mean of `samples`. */
export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = sorted.reduce((s, x) => s + x, 0) / (sorted.length || 1);
  return {
    n: sorted.length,
    min: sorted[0] ?? Number.NaN,
    p50: percentileSorted(sorted, 50),
    p90: percentileSorted(sorted, 90),
    p99: percentileSorted(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean,
  };
}

/** Rounds to `digits` decimals, keeping the JSON report readable. */
export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** `summary` with every field rounded by `round`, for the JSON report. */
export function roundSummary(summary: Summary, digits = 3): Summary {
  return Object.fromEntries(Object.entries(summary).map(([k, v]) => [k, round(v, digits)])) as unknown as Summary;
}
