/**
 * A campaign's calendar and the periods one install reports in (docs/protocol.md, step 6,
 * "Keep to the plan"; the semantics of `chorus_shared/schedule.py`).
 *
 * An install draws, once, when it first sees the campaign, a uniformly random r-subset of
 * *all* the periods 0..periods−1 from the CSPRNG, and stores it before any report. Drawn
 * periods already past are forfeited (never charged, never made up). Whether a report is made
 * in a period is decided from the clock and the stored draw alone, before the value is looked
 * at, so *when* an install reports says nothing about its values.
 */
import { ConfigError } from "./config.js";
import type { Json } from "./json.js";
import { uniformInt, type RandomSource } from "./random.js";

export const CADENCES = { day: 86400, week: 7 * 86400 } as const;
export type Cadence = keyof typeof CADENCES;
/** The longest horizon a config may state (ten years of days), as the Python side. */
export const MAX_PERIODS = 3660;

export class Schedule {
  constructor(
    readonly cadence: Cadence,
    /** Unix seconds of the first period's start (a UTC midnight). */
    readonly start: number,
    readonly periods: number,
  ) {}

  get seconds(): number {
    return CADENCES[this.cadence];
  }

  /** The first second after the horizon. */
  get end(): number {
    return this.start + this.periods * this.seconds;
  }

  /** The period holding this time: negative before the start, `periods` or more after the end. */
  index(unixSeconds: number): number {
    return Math.floor((unixSeconds - this.start) / this.seconds);
  }

  /** The UTC date a period starts on, e.g. `2026-01-05`. */
  date(index: number): string {
    return new Date((this.start + index * this.seconds) * 1000).toISOString().slice(0, 10);
  }

  toJson(): { [key: string]: Json } {
    return { cadence: this.cadence, periods: this.periods, start: this.date(0) };
  }
}

/** A config's `schedule` (absent: a campaign without a calendar), checked as the collector checks it. */
export function scheduleOf(config: { [key: string]: Json }, timePrecision: number): Schedule | null {
  const raw = config.schedule;
  if (raw === undefined) return null;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new ConfigError("schedule must be an object");
  const s = raw as { [key: string]: Json };
  const cadence = s.cadence;
  if (cadence !== "day" && cadence !== "week") throw new ConfigError("schedule.cadence must be day or week");
  const date = typeof s.start === "string" ? /^(\d{4})-(\d{2})-(\d{2})$/.exec(s.start) : null;
  if (date === null) throw new ConfigError("schedule.start must be a UTC date YYYY-MM-DD");
  const start = Date.UTC(Number(date[1]), Number(date[2]) - 1, Number(date[3])) / 1000;
  if (!Number.isFinite(start) || new Date(start * 1000).toISOString().slice(0, 10) !== s.start) {
    throw new ConfigError("schedule.start is not a calendar date");
  }
  const periods = s.periods;
  if (typeof periods !== "number" || !Number.isSafeInteger(periods) || periods < 1 || periods > MAX_PERIODS) {
    throw new ConfigError(`schedule.periods must be an integer in [1, ${MAX_PERIODS}]`);
  }
  if (CADENCES[cadence] % timePrecision !== 0 || start % timePrecision !== 0) {
    throw new ConfigError("time_precision must divide the schedule's period and its start");
  }
  return new Schedule(cadence, start, periods);
}

/**
 * `reports` distinct period indexes out of `periods`, every subset of that size equally
 * likely, sorted: a partial Fisher–Yates shuffle with rejection-sampled (unbiased) indexes.
 */
export function drawPeriods(rng: RandomSource, reports: number, periods: number): number[] {
  if (!(Number.isSafeInteger(reports) && Number.isSafeInteger(periods) && 0 <= reports && reports <= periods)) {
    throw new RangeError(`cannot draw ${reports} of ${periods} periods`);
  }
  const pool = Array.from({ length: periods }, (_, i) => i);
  for (let i = 0; i < reports; i++) {
    const j = i + uniformInt(rng, periods - i);
    [pool[i], pool[j]] = [pool[j] as number, pool[i] as number];
  }
  return pool.slice(0, reports).sort((a, b) => a - b);
}
