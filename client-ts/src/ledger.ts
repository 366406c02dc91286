/**
 * The privacy ledger, as pure functions over the stored state (docs/threat-model.md, rule 2).
 *
 * Every report costs the ε of one report, whatever the value, against, in this order: the
 * campaign's own count and budget per privacy period, the app's lifetime budget over
 * everything, and the campaign's part of the plan (and the app's per-campaign cap). All are
 * keyed by campaign name, so a collector that rotates config versions continues one ledger.
 * The charge and the report's place in the outbox are written in the same transaction
 * ({@link chargeAndQueue} runs inside `Store.update`).
 */
import { fits, reportsWithin } from "./campaign.js";
import type { OutboxEntry, PlanRow, StateData } from "./store.js";

export interface Limits {
  /** Reports of this ε the campaign's policy allows per period. */
  periodReports: number;
  /** The policy's report cap (to name the binding setting). */
  maxReports: number;
  periodBudget: number;
  /** The campaign's part of the plan, capped by the app's per-campaign budget. */
  campaignBudget: number;
  lifetimeBudget: number;
}

/** Why a report was not made, in words an app developer can act on. */
export const EXHAUSTED = {
  "max-reports": "the campaign's privacy.max_reports for this period is reached",
  budget: "the campaign's privacy.budget for this period is spent",
  "campaign-budget": "the campaign's part of the app's privacy plan (plan, campaignBudget) is spent",
  "lifetime-budget": "this install's lifetimeBudget (all campaigns) is spent",
  "spend-counter": "the app's spendCounter failed",
  "window-budget": "the app's rollingWindow is spent",
} as const;
export type Exhausted = keyof typeof EXHAUSTED;

export function spentOn(state: Readonly<StateData>, campaign: string, period?: string): number {
  const periods = state.ledger[campaign] ?? {};
  if (period !== undefined) return periods[period]?.epsilon ?? 0;
  return Object.values(periods).reduce((s, e) => s + e.epsilon, 0);
}

export function totalSpent(state: Readonly<StateData>): number {
  return Object.keys(state.ledger).reduce((s, c) => s + spentOn(state, c), 0);
}

export function reportsMade(state: Readonly<StateData>, campaign: string): number {
  return Object.values(state.ledger[campaign] ?? {}).reduce((s, e) => s + e.reports, 0);
}

/** ε reserved by the unpinned campaigns other than `campaign`. */
export function reservedByOthers(state: Readonly<StateData>, campaign: string): number {
  return Object.values(state.plans)
    .filter((p) => p.pool === "unpinned" && p.campaign !== campaign)
    .reduce((s, p) => s + p.budget, 0);
}

export function slotUsed(state: Readonly<StateData>, plan: PlanRow, slot: number): boolean {
  return state.slotsUsed[plan.campaign]?.[plan.basis]?.includes(slot) ?? false;
}

/** Whether one more report of `cost` fits every limit; the binding setting if not. */
export function refusal(state: Readonly<StateData>, campaign: string, period: string, cost: number, limits: Limits): Exhausted | null {
  const entry = state.ledger[campaign]?.[period] ?? { epsilon: 0, reports: 0 };
  if (entry.reports + 1 > limits.periodReports) {
    const byBudget = reportsWithin(limits.periodBudget, cost, limits.maxReports + 1);
    return limits.maxReports < byBudget ? "max-reports" : "budget";
  }
  if (!fits(entry.epsilon, cost, limits.periodBudget)) return "budget";
  // The lifetime first: when it is what ran out, it is the setting to name.
  if (!fits(totalSpent(state), cost, limits.lifetimeBudget)) return "lifetime-budget";
  if (!fits(spentOn(state, campaign), cost, limits.campaignBudget)) return "campaign-budget";
  return null;
}

/** Charges one report and queues it in `draft` (inside a store transaction); marks the plan's slot used. */
export function chargeAndQueue(
  draft: StateData,
  entry: Omit<OutboxEntry, "seq">,
  period: string,
  slot: { plan: PlanRow; index: number } | null,
): void {
  const periods = (draft.ledger[entry.campaign] ??= {});
  const spent = (periods[period] ??= { epsilon: 0, reports: 0 });
  spent.epsilon += entry.epsilon;
  spent.reports += 1;
  if (slot !== null) {
    const bases = (draft.slotsUsed[entry.campaign] ??= {});
    (bases[slot.plan.basis] ??= []).push(slot.index);
  }
  draft.outbox.push({ seq: draft.nextSeq, ...entry });
  draft.nextSeq += 1;
}
