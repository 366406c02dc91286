/**
 * When a report may leave (docs/protocol.md, step 9): at a uniformly random moment of the
 * time bucket after its own, drawn from the CSPRNG, never from the value. So the moment it
 * reaches the collector says nothing about when in its bucket it was made.
 */

/**
 * The due time of a report made at `now` in a campaign of `precision`-second buckets:
 * the end of its bucket plus a uniform delay of up to `sendDelay` seconds (default: one
 * bucket). `sendDelay` 0 sends at once, which gives the report's second away: tests only.
 */
export function dueTime(now: number, precision: number, sendDelay: number | undefined, jitter: number): number {
  if (sendDelay === 0) return now;
  const bucket = Math.floor(now / precision) * precision;
  return bucket + precision + jitter * (sendDelay ?? precision);
}
