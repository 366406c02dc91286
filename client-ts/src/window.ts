/**
 * A weaker unit, only on the app's request ({@link ClientOptions.rollingWindow}): at most
 * `budget` ε in any `days` consecutive UTC days, over all campaigns (the Python client's
 * `RollingWindow`). It bounds a rate, not a total: a value that persists longer than `days` is
 * exposed again in every window. It adds to the lifetime budget, which still holds; it
 * replaces it only if the app also sets `lifetimeBudget: Infinity` (allowed only with a window).
 *
 * Its own module, so that a browser bundle carries it only when the app uses it: the client
 * calls {@link RollingWindow.refuses} and {@link RollingWindow.charge} inside the report's
 * transaction, and the state keeps the ε charged per UTC day only for an app that set one.
 */
import { fits } from "./campaign.js";
import type { StateData } from "./store.js";

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`;
const g = (x: number): string => String(Number(x.toPrecision(6)));

export class RollingWindow {
  constructor(readonly budget: number, readonly days: number) {
    if (!(Number.isFinite(budget) && budget > 0)) throw new RangeError("rolling window budget must be a positive finite ε");
    if (!Number.isSafeInteger(days) || days < 1) throw new RangeError("rolling window days must be a whole number of days >= 1");
  }

  /**
   * ε charged in the window of `days` UTC days that ends with day number `day`; charges dated
   * later (the clock went back) count in every window. A damaged entry (not a number ≥ 0, on
   * any day) spends everything: a damaged state must not hand out budget.
   */
  spentIn(state: Readonly<StateData>, day: number): number {
    let spent = 0;
    for (const [d, e] of Object.entries(state.dailySpend ?? {})) {
      if (!(typeof e === "number" && e >= 0)) return Infinity;
      if (!(Number(d) <= day - this.days)) spent += e;
    }
    return spent;
  }

  /** Whether one more report of `cost` on day number `day` would spend more than the window allows. */
  refuses(state: Readonly<StateData>, day: number, cost: number): boolean {
    return !fits(this.spentIn(state, day), cost, this.budget);
  }

  /** Charges a report to its UTC day (inside the report's store transaction). */
  charge(draft: StateData, day: number, cost: number): void {
    const daily = (draft.dailySpend ??= {});
    daily[day] = (daily[day] ?? 0) + cost;
  }

  /** The window in words, as the worst case states it. */
  describe(lifetime: number): string {
    const year = Math.ceil(365 / this.days) * this.budget;
    const text = `at most ${g(this.budget)} in any ${plural(this.days, "UTC day")}: a rate, weaker than a lifetime bound; `
      + `it protects what lasts less than ${plural(this.days, "day")}, not values that persist (over a year up to ${g(year)})`;
    return Number.isFinite(lifetime)
      ? `${text}; the lifetime budget of ${g(lifetime)} still caps the total`
      : `${text}; with no lifetime budget nothing caps the total`;
  }
}
