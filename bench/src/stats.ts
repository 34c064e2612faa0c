/**
 * Shared statistics for Sandpit's benchmarks (local now; docker and kubernetes later): a
 * nearest-rank percentile and a one-call summary of a list of samples. No interpolation, so every
 * reported value is a value that was actually measured.
 */

export interface Summary {
  n: number;
  min: number;
  mean: number;
  p50: number;
  p99: number;
  max: number;
}

/**
 * Nearest-rank percentile of samples sorted ascending: the smallest sample with at least p% of
 * all samples at or below it. p is in (0, 100]. (With 30 samples, p99 is the maximum.)
 */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) throw new RangeError("percentile of no samples");
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile must be in (0, 100], got ${p}`);
  // p * n / 100 rather than p / 100 * n: exact for integer p and n, so no off-by-one from 0.99 * 300.
  const rank = Math.ceil((p * sorted.length) / 100);
  return sorted[rank - 1]!;
}

/** Nearest-rank median (the lower middle value for an even count). */
export function median(samples: readonly number[]): number {
  return percentile(ascending(samples), 50);
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = ascending(samples);
  return {
    n: sorted.length,
    min: sorted[0] ?? NaN,
    mean: sorted.reduce((a, b) => a + b, 0) / sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1) ?? NaN,
  };
}

/** p50, p95 and p99 with the count: what the headline parts report. */
export interface Percentiles {
  n: number;
  p50: number;
  p95: number;
  p99: number;
}

export function percentiles(samples: readonly number[]): Percentiles {
  const s = ascending(samples);
  return { n: s.length, p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99) };
}

function ascending(samples: readonly number[]): number[] {
  return [...samples].sort((a, b) => a - b);
}
