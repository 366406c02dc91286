/**
 * A campaign as the client uses it: a config verified against its pin (steps 1–3 of
 * docs/protocol.md, through {@link verifyConfig}), held to the app's caps, with the facts the
 * ledger and the plan need (ε, time precision, privacy policy, schedule) read from it.
 */
import { ConfigError, configDigest, configOf, typeConfigFloats, verifyConfig } from "./config.js";
import { canonicalJson, JsonFloat, parseJsonExact, type Json } from "./json.js";
import { mechanismFor, type Mechanism } from "./mechanisms/index.js";
import { scheduleOf, type Schedule } from "./schedule.js";

type JsonObject = { [key: string]: Json };

/** `spent + cost ≤ budget`, with the Python client's relative slack for sums of equal float costs. */
export const SLACK = 1e-9;
export function fits(spent: number, cost: number, budget: number): boolean {
  return spent + cost <= budget * (1 + SLACK) + SLACK * cost;
}

/** The most reports of ε that fit `budget` (by the slack of {@link fits}), at most `cap`. */
export function reportsWithin(budget: number, epsilon: number, cap: number): number {
  const ratio = (budget * (1 + SLACK) + SLACK * epsilon) / epsilon;
  return ratio < cap ? Math.floor(ratio) : cap;
}

export interface PrivacyPolicy {
  unit: "lifetime" | "day";
  budget: number;
  maxReports: number;
}

/** The limits an app sets in code; the collector's config proposes, these decide. */
export interface Caps {
  /** Refuse campaigns whose one-report ε is above this (2). */
  maxEpsilon: number;
  /** ε this install may spend over its life, on all campaigns (8). */
  lifetimeBudget: number;
  /** ε any one campaign may spend over the install's life (∞: only its share limits it). */
  campaignBudget: number;
  /** Refuse campaigns whose report times are finer than this many seconds (3600). */
  minTimePrecision: number;
}

export const DEFAULT_CAPS: Caps = { maxEpsilon: 2, lifetimeBudget: 8, campaignBudget: Infinity, minTimePrecision: 3600 };

export class Campaign {
  constructor(
    readonly name: string,
    readonly digest: string,
    /** The public config, floats typed: what is kept on the device. */
    readonly publicConfig: JsonObject,
    readonly config: JsonObject,
    readonly epsilon: number,
    readonly mechanism: Mechanism,
    readonly timePrecision: number,
    readonly policy: PrivacyPolicy,
    readonly schedule: Schedule | null,
  ) {}

  /** Reports one install makes: per UTC day for a `day` policy, else in all. */
  get reportsPerPeriod(): number {
    return reportsWithin(this.policy.budget, this.epsilon, this.policy.maxReports);
  }

  /** The ledger period a report at this time is charged to. */
  period(unixSeconds: number): string {
    return this.policy.unit === "lifetime" ? "lifetime" : `day-${Math.floor(unixSeconds / 86400)}`;
  }

  /** The start of the report's time bucket. */
  bucket(unixSeconds: number): number {
    return Math.floor(unixSeconds / this.timePrecision) * this.timePrecision;
  }

  /** What a plan is drawn for: a new config version with the same basis keeps the plan. */
  get basis(): string {
    return canonicalJson({
      epsilon: new JsonFloat(this.epsilon),
      reports: this.reportsPerPeriod,
      schedule: this.schedule === null ? null : this.schedule.toJson(),
    });
  }
}

function number(v: Json | undefined): number | undefined {
  const x = v instanceof JsonFloat ? v.value : v;
  return typeof x === "number" && Number.isFinite(x) ? x : undefined;
}

function policyOf(config: JsonObject): PrivacyPolicy {
  const p = config.privacy;
  if (typeof p !== "object" || p === null || Array.isArray(p) || p instanceof JsonFloat) {
    throw new ConfigError("privacy must be an object");
  }
  const privacy = p as JsonObject;
  const unit = privacy.unit;
  const budget = number(privacy.budget);
  const maxReports = privacy.max_reports;
  if (unit !== "lifetime" && unit !== "day") throw new ConfigError("privacy.unit must be lifetime or day");
  if (budget === undefined || !(budget > 0)) throw new ConfigError("privacy.budget must be a positive finite number");
  if (typeof maxReports !== "number" || !Number.isSafeInteger(maxReports) || maxReports < 1) {
    throw new ConfigError("privacy.max_reports must be a positive integer");
  }
  return { unit, budget, maxReports };
}

/** How an app pins a campaign: its public config shipped with the app (an object or its JSON text), or the digest it must have. */
export type Pin = string | JsonObject;

export const DIGEST = /^[0-9a-f]{64}$/;

/**
 * Verifies a config for campaign `name`: its digest is recomputed and must be `pinnedDigest`
 * (for a shipped config: the digest it states, or its own), ε is re-derived from the
 * parameters, and the app's caps hold. Throws {@link ConfigError} with a message that says
 * which check failed.
 */
export async function adoptCampaign(
  name: string,
  served: JsonObject | string,
  pinnedDigest: string | undefined,
  caps: Caps,
): Promise<Campaign> {
  const parsed = typeof served === "string" ? parseJsonExact(served) : typeConfigFloats(served);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed) || parsed instanceof JsonFloat) {
    throw new ConfigError("a campaign config is a JSON object");
  }
  const publicConfig = parsed as JsonObject;
  let pin = pinnedDigest;
  if (pin === undefined) {
    // A shipped config: it is its own pin (and must match the digest it states, if any).
    pin = typeof publicConfig.digest === "string" ? publicConfig.digest : await configDigest(configOf(publicConfig));
  }
  const verified = await verifyConfig(publicConfig, { pinnedDigest: pin, epsilonCap: caps.maxEpsilon * (1 + 1e-9) });
  const config = verified.config;
  if (config.name !== name) throw new ConfigError(`the config is for another campaign, not ${JSON.stringify(name)}`);
  const precision = config.time_precision;
  if (typeof precision !== "number" || !Number.isSafeInteger(precision) || precision < 1) {
    throw new ConfigError("time_precision must be a positive integer");
  }
  if (precision < caps.minTimePrecision) {
    throw new ConfigError(`the campaign time-stamps reports to ${precision} s, finer than this client's limit of ${caps.minTimePrecision} s`);
  }
  const policy = policyOf(config);
  const schedule = scheduleOf(config, precision);
  if (schedule !== null && policy.unit !== "lifetime") throw new ConfigError("a campaign with a schedule has a lifetime privacy unit");
  const mechanism = mechanismFor(config, verified.epsilon);
  if (mechanism.groupWeights !== undefined) checkGroups(mechanism.groupWeights);
  return new Campaign(name, verified.digest, publicConfig, config, verified.epsilon, mechanism, precision, policy, schedule);
}

/** Most groups a discovery campaign may split installs into, and the smallest share one may
 * hold: one group then tells at most 7 bits about an install (docs/protocol.md, "The discovery
 * group"). */
export const MAX_GROUPS = 64;
export const MIN_GROUP_SHARE = 1 / 128;

function checkGroups(weights: number[]): void {
  const total = weights.reduce((a, b) => a + b, 0);
  if (weights.length > MAX_GROUPS || Math.min(...weights) < MIN_GROUP_SHARE * total) {
    throw new ConfigError(`the campaign splits installs into ${weights.length} groups, one of them under 1/128 `
      + `of the installs: at most ${MAX_GROUPS}, none that small`);
  }
}
