/**
 * The worst case the caps and the plan allow, per campaign and for the install, in numbers and
 * words (the Python client's `worst_case()`).
 */
import type { Campaign, Caps } from "./campaign.js";
import type { Client } from "./client.js";
import { shareOf } from "./plan.js";

/** One campaign's part of what the worst case follows from. */
interface CampaignFacts {
  name: string;
  campaign: Campaign | undefined;
  pinned: boolean;
  /** The campaign's part of the plan (its pool's, for an unpinned one). */
  share: number;
}

/** The most ε this install can lose to one campaign, whatever its values (Python's `PrivacyBound`). */
export interface PrivacyBound {
  campaign: string;
  pinned: boolean;
  /** The campaign's privacy period; null: its config is not on the device (only the caps bound it). */
  unit: "lifetime" | "day" | null;
  perReport: number;
  /** Per privacy period (a scheduled campaign: per scheduled period). */
  perPeriod: number;
  /** In any window of 366 days. */
  perYear: number;
  /** Ever (Infinity only without a lifetime budget). */
  lifetime: number;
  /** False for a store that keeps nothing across restarts: every start is then a new install. */
  holdsAcrossRestarts: boolean;
  /** The app's rolling window in words ("" without one). */
  window: string;
  words: string;
}

/** The install's worst case over every campaign: pinned ones by their bounds, unpinned ones by the unpinned allowance. */
export interface InstallWorstCase {
  lifetime: number;
  perYear: number;
  /** ε all unpinned campaigns together may spend (0 unless allowUnpinned). */
  unpinned: number;
  campaigns: PrivacyBound[];
  window: string;
  words: string;
}

const DAYS_PER_YEAR_WINDOW = 366;
const g = (x: number): string => (Number.isFinite(x) ? String(Number(x.toPrecision(4))) : "unbounded");

function bound(caps: Caps, f: CampaignFacts, persistent: boolean, window: string): PrivacyBound {
  const cap = Math.min(caps.campaignBudget, caps.lifetimeBudget, f.share);
  const c = f.pinned ? f.campaign : undefined; // an unpinned campaign's policy may change tomorrow
  let b: Omit<PrivacyBound, "words">;
  if (c === undefined) {
    b = { campaign: f.name, pinned: f.pinned, unit: f.campaign?.policy.unit ?? null, perReport: caps.maxEpsilon,
      perPeriod: cap, perYear: cap, lifetime: cap, holdsAcrossRestarts: persistent, window };
  } else {
    const perPeriod = c.reportsPerPeriod * c.epsilon;
    const once = c.policy.unit === "lifetime";
    b = {
      campaign: f.name, pinned: true, unit: c.policy.unit, perReport: c.epsilon,
      perPeriod: Math.min(c.schedule === null ? perPeriod : c.epsilon, cap),
      perYear: Math.min(perPeriod * (once ? 1 : DAYS_PER_YEAR_WINDOW), cap),
      lifetime: once ? Math.min(perPeriod, cap) : cap, holdsAcrossRestarts: persistent, window,
    };
  }
  const period = b.unit === "day" ? "UTC day" : c?.schedule ? "scheduled period" : null;
  let words = `${JSON.stringify(f.name)}${f.pinned ? "" : " (not pinned: only the caps bound it)"}: at most ε ${g(b.lifetime)} ever, `
    + `${g(b.perYear)} in any year, ${g(b.perReport)} per report${period === null ? "" : `, ${g(b.perPeriod)} per ${period}`}`;
  if (!persistent) words += "; the store keeps nothing across restarts, so every start is a new install with a fresh budget";
  return { ...b, words };
}

/**
 * The most ε this install can lose, whatever it reports (the Python client's `worst_case()`;
 * docs/threat-model.md, "Worst-case loss with the defaults"): to one campaign (for a pinned
 * one its policy within its part of the plan and the caps; for an unpinned one only the caps
 * and the unpinned allowance, since the collector may serve another policy tomorrow), or in
 * total over every pinned campaign and the unpinned allowance, in numbers and in `words`.
 * Its own module (exported by the package, chorus-extras.min.js and chorus-full.min.js), so
 * that the core browser bundle stays small.
 */
export async function worstCase(client: Client, campaignName: string): Promise<PrivacyBound>;
export async function worstCase(client: Client): Promise<InstallWorstCase>;
export async function worstCase(client: Client, campaignName?: string): Promise<PrivacyBound | InstallWorstCase> {
  const names = campaignName === undefined ? [...client.configs.pinned].sort() : [campaignName];
  const facts: CampaignFacts[] = [];
  for (const name of names) {
    const { pool, budget } = shareOf(client.shares, name);
    // One campaign: fetched now if need be (the app's call); the install: what is on the device.
    const campaign = campaignName === undefined ? await client.configs.onDevice(name) : await client.campaign(name);
    const plan = await client.o.store.read((s) => s.plans[name]?.budget);
    facts.push({ name, campaign, pinned: pool === "pinned", share: pool === "pinned" ? Math.min(budget, plan ?? budget) : budget });
  }
  const { caps, shares: { unpinned }, o: { store: { persistent }, rollingWindow: rolling } } = client;
  const window = rolling?.describe(caps.lifetimeBudget) ?? "";
  const campaigns = facts.map((f) => bound(caps, f, persistent, window));
  if (campaignName !== undefined) return campaigns[0] as PrivacyBound;
  const sum = (k: "lifetime" | "perYear") => campaigns.reduce((s, b) => s + b[k], unpinned);
  const lifetime = Math.min(caps.lifetimeBudget, sum("lifetime"));
  const windowYear = rolling === undefined ? Infinity : Math.ceil(DAYS_PER_YEAR_WINDOW / rolling.days) * rolling.budget;
  const perYear = Math.min(lifetime, sum("perYear"), windowYear);
  const parts = campaigns.map((b) => b.words);
  if (unpinned > 0) parts.push(`campaigns the app did not pin: ε ${g(unpinned)} in all`);
  let words = `This install can lose at most ε ${g(lifetime)} in all, ever, and ${g(perYear)} in any year, whatever it reports`
    + (parts.length > 0 ? `. ${parts.join(". ")}` : "");
  if (window !== "") words += `. Rolling window: ${window}`;
  return { lifetime, perYear, unpinned, campaigns, window, words: `${words}.` };
}
