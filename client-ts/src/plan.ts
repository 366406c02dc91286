/**
 * The app's privacy plan: how one install's lifetime budget is shared between campaigns and
 * spread over time (docs/client.md, "Planning the lifetime budget").
 *
 * The app states the split in code, as ε per pinned campaign (`budgets`) or as weights
 * (`shares`); pinned campaigns it does not name share what is left equally. Unpinned campaigns
 * (chosen by the collector, `allowUnpinned`) draw from a separate allowance, each reserving
 * what its policy may spend when first seen, so they never take a pinned campaign's ε.
 * A campaign's part is fixed and stored when the install first sees it; nothing in it
 * depends on a value.
 */
import { reportsWithin, type Campaign } from "./campaign.js";
import type { RandomSource } from "./random.js";
import { drawPeriods } from "./schedule.js";
import type { PlanRow } from "./store.js";

/** Without an explicit allowance, unpinned campaigns may use this share of the lifetime budget (all of it if nothing is pinned). */
export const DEFAULT_UNPINNED_SHARE = 1 / 8;
/** A per-day policy's count is bounded by the share alone: at most this many reports. */
const MANY = 1_000_000;

export interface PrivacyPlanOptions {
  /** ε per pinned campaign. */
  budgets?: Record<string, number>;
  /** Relative weights of the pinned campaigns over what the unpinned allowance leaves. */
  shares?: Record<string, number>;
  /** ε all unpinned campaigns together may use (default: 1/8 of the lifetime budget when unpinned campaigns are allowed, else 0). */
  unpinned?: number;
}

export class PlanError extends Error {
  override name = "PlanError";
}

/** The ε each part of the plan may spend over the install's life. */
export interface Shares {
  pinned: Map<string, number>;
  unpinned: number;
}

/** Which pool pays for a campaign, and its budget there. */
export function shareOf(shares: Shares, name: string): { pool: "pinned" | "unpinned"; budget: number } {
  const pinned = shares.pinned.get(name);
  return pinned === undefined ? { pool: "unpinned", budget: shares.unpinned } : { pool: "pinned", budget: pinned };
}

function checkAmounts(kind: string, amounts: Record<string, number>): void {
  for (const [name, v] of Object.entries(amounts)) {
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
      throw new PlanError(`the plan's ${kind} for ${JSON.stringify(name)} must be a finite number >= 0`);
    }
  }
}

/** The ε of every pinned campaign and of the unpinned allowance; refuses a plan naming an unpinned campaign or spending more than the lifetime budget. */
export function resolvePlan(plan: PrivacyPlanOptions, lifetime: number, pinned: string[], allowUnpinned: boolean): Shares {
  const budgets = plan.budgets ?? {};
  const weights = plan.shares ?? {};
  if (Object.keys(budgets).length > 0 && Object.keys(weights).length > 0) {
    throw new PlanError("give the plan budgets (ε per campaign) or shares, not both");
  }
  checkAmounts("budget", budgets);
  checkAmounts("share", weights);
  if (plan.unpinned !== undefined && !(Number.isFinite(plan.unpinned) && plan.unpinned >= 0)) {
    throw new PlanError("the plan's unpinned allowance must be a finite number >= 0");
  }
  const stray = [...Object.keys(budgets), ...Object.keys(weights)].filter((n) => !pinned.includes(n)).sort();
  if (stray.length > 0) {
    throw new PlanError(`the privacy plan names ${JSON.stringify(stray)}, which are not pinned; unpinned campaigns share the unpinned allowance`);
  }
  let unpinned: number;
  if (!allowUnpinned) unpinned = 0;
  else if (plan.unpinned !== undefined) unpinned = plan.unpinned;
  else unpinned = pinned.length > 0 ? lifetime * DEFAULT_UNPINNED_SHARE : lifetime;
  unpinned = Math.min(unpinned, lifetime);
  const left = Number.isFinite(lifetime) ? lifetime - unpinned : Infinity;
  const out = new Map<string, number>();
  if (Object.keys(weights).length > 0) {
    const missing = pinned.filter((n) => !(n in weights));
    if (missing.length > 0) throw new PlanError(`the privacy plan gives shares but none for ${JSON.stringify(missing)}`);
    const total = pinned.reduce((s, n) => s + (weights[n] as number), 0);
    for (const n of pinned) out.set(n, total > 0 ? (left * (weights[n] as number)) / total : 0);
  } else {
    const rest = pinned.filter((n) => !(n in budgets));
    const named = pinned.filter((n) => n in budgets);
    for (const n of named) out.set(n, budgets[n] as number);
    const spare = left - named.reduce((s, n) => s + (budgets[n] as number), 0);
    for (const n of rest) out.set(n, Math.max(spare, 0) / rest.length);
  }
  const spent = [...out.values()].reduce((s, v) => s + v, 0) + unpinned;
  if (Number.isFinite(lifetime) && spent > lifetime * (1 + 1e-9)) {
    throw new PlanError(`the privacy plan spends ${spent}, more than the lifetime budget of ${lifetime}`);
  }
  return { pinned: out, unpinned };
}

/**
 * A campaign's plan for its current version, drawn now (the semantics of the Python client's
 * `draw_plan`): as many reports as its policy allows and what is left of its share pays for;
 * a campaign with a calendar draws them over its whole horizon and forfeits the periods
 * already past. A later version with another basis (`held`) draws again only what the share
 * still pays for, over the periods after the latest one a report was asked in.
 */
export function drawPlan(
  campaign: Campaign,
  pool: "pinned" | "unpinned",
  share: number,
  now: number,
  rng: RandomSource,
  spent: number,
  reserved: number,
  held: PlanRow | undefined,
): PlanRow {
  const epsilon = campaign.epsilon;
  const available = pool === "unpinned" ? share - reserved : share;
  const left = Math.max(0, available - spent);
  const allowed = campaign.policy.unit === "lifetime" ? campaign.reportsPerPeriod : MANY;
  let reports = Math.min(allowed, left > 0 ? reportsWithin(left, epsilon, MANY) : 0);
  const schedule = campaign.schedule;
  const asked = held?.asked ?? null;
  let slots: number[] | null = null;
  let first = 0;
  if (schedule !== null && asked === null) {
    reports = Math.min(reports, schedule.periods);
    slots = drawPeriods(rng, reports, schedule.periods);
    first = Math.max(0, schedule.index(now));
  } else if (schedule !== null && asked !== null) {
    first = Math.max(0, schedule.index(now), schedule.index(asked) + 1);
    const remaining = Math.max(0, schedule.periods - first);
    reports = Math.min(reports, remaining);
    slots = drawPeriods(rng, reports, remaining).map((s) => first + s);
  }
  // An unpinned campaign reserves only what its plan may spend, leaving the rest to the others.
  const budget = pool === "unpinned" ? Math.min(available, spent + reports * epsilon) : share;
  return { campaign: campaign.name, pool, basis: campaign.basis, epsilon, budget, reports, slots, first, asked };
}
