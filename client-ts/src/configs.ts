/**
 * Campaign configs on the device: pinned, verified, kept, and fetched on a schedule of their
 * own (docs/client.md, "Pinning by digest"; docs/threat-model.md, rule 1).
 *
 * An app pins each campaign: the public config shipped with it (never fetched), or the digest
 * the fetched config must have; `allowUnpinned` accepts what the collector serves. Every config
 * is verified ({@link adoptCampaign}) and kept in the state once fetched: a pinned one is never
 * fetched again, an unpinned one again a day later. {@link Configs.forReport} makes no request
 * (unless `sendDelay` is 0, which gives report times away anyway): a request naming the
 * campaign at the second of a report would time-stamp it, so a missing config is fetched by
 * the sender at a random moment of the next hour, like a report made then.
 */
import { adoptCampaign, DIGEST, type Campaign, type Caps, type Pin } from "./campaign.js";
import { ConfigError } from "./config.js";
import { uniform01, type RandomSource } from "./random.js";
import type { Log } from "./sender.js";
import type { Store } from "./store.js";
import { DEFAULT_RETRY, sendWithRetries, type RetryPolicy, type Sleep, type Transport } from "./transport.js";

/** A campaign whose config could not be had is not asked for again before this many seconds. */
const UNAVAILABLE_HOLD_OFF = 60;
/** A held unpinned config is fetched again after a day (a pinned one never). */
const CONFIG_REFRESH = 86400;
const ONE_ATTEMPT: RetryPolicy = { ...DEFAULT_RETRY, maxAttempts: 1 };

export interface ConfigsOptions {
  url: string;
  store: Store;
  transport: Transport;
  caps: Caps;
  allowUnpinned: boolean;
  sendDelay: number | undefined;
  timeoutMs: number;
  rng: RandomSource;
  clock: () => number;
  sleep: Sleep;
  log: Log;
  /** Logs once per campaign and reason. */
  warnOnce: (campaign: string, reason: string, message: string) => void;
}

export class Configs {
  readonly pinned: ReadonlySet<string>;
  private readonly campaigns = new Map<string, Campaign>();
  private readonly pinnedDigests = new Map<string, string>();
  private readonly fetchDue = new Map<string, number>();
  private readonly refreshDue = new Map<string, number>();
  private readonly unavailableUntil = new Map<string, number>();

  private constructor(private readonly o: ConfigsOptions, pins: Record<string, Pin>) {
    this.pinned = new Set(Object.keys(pins));
  }

  /** Verifies every shipped config now (one that fails the checks throws {@link ConfigError}) and schedules the fetches. */
  static async create(o: ConfigsOptions, pins: Record<string, Pin>): Promise<Configs> {
    const configs = new Configs(o, pins);
    for (const [name, pin] of Object.entries(pins)) {
      if (typeof pin === "string" && !pin.trimStart().startsWith("{")) {
        if (!DIGEST.test(pin)) throw new ConfigError(`campaign ${JSON.stringify(name)} is pinned by something that is not a SHA-256 digest`);
        configs.pinnedDigests.set(name, pin);
      } else {
        configs.campaigns.set(name, await adoptCampaign(name, pin, undefined, o.caps));
      }
    }
    const now = o.clock();
    for (const name of configs.pinnedDigests.keys()) {
      if ((await configs.held(name)) === undefined) configs.fetchDue.set(name, configs.fetchTime(now));
    }
    if (o.allowUnpinned) {
      const held = await o.store.read((s) => Object.entries(s.configs).map(([n, c]) => [n, c.refresh] as const));
      for (const [name, refresh] of held) if (!configs.pinned.has(name)) configs.refreshDue.set(name, refresh);
    }
    return configs;
  }

  /** The config shipped with the app or kept from an earlier fetch; never a request. */
  async onDevice(name: string): Promise<Campaign | undefined> {
    return this.campaigns.get(name) ?? (await this.held(name));
  }

  /** A config kept from an earlier fetch, verified again (the caps may have changed). */
  private async held(name: string): Promise<Campaign | undefined> {
    const body = await this.o.store.read((s) => s.configs[name]?.body);
    if (body === undefined) return undefined;
    try {
      const campaign = await adoptCampaign(name, body, this.pinnedDigests.get(name), this.o.caps);
      if (!this.campaigns.has(name)) this.campaigns.set(name, campaign);
      return this.campaigns.get(name);
    } catch {
      return undefined;
    }
  }

  /** When a fetch asked for now is made: a random moment of the next hour, like a report made now. */
  private fetchTime(now: number): number {
    const window = this.o.caps.minTimePrecision;
    return (Math.floor(now / window) + 1) * window + uniform01(this.o.rng) * (this.o.sendDelay ?? window);
  }

  /** Fetches, verifies and keeps a campaign's config; throws with the reason (never a value) if it cannot. */
  async fetch(name: string, replace = false): Promise<Campaign> {
    const digest = this.pinnedDigests.get(name);
    if (digest === undefined && !this.o.allowUnpinned) throw new ConfigError(`campaign ${JSON.stringify(name)} is not pinned by this app`);
    const response = await sendWithRetries(
      this.o.transport, "GET", `${this.o.url}/v1/campaigns/${encodeURIComponent(name)}`,
      { headers: { Accept: "application/json" }, timeoutMs: this.o.timeoutMs }, ONE_ATTEMPT, this.o.sleep, this.o.rng,
    );
    if (response.status !== 200) throw new ConfigError(`the collector answered ${response.status} for the config`);
    const campaign = await adoptCampaign(name, response.body, digest, this.o.caps);
    const refresh = this.fetchTime(this.o.clock() + CONFIG_REFRESH);
    await this.o.store.update((draft) => {
      draft.configs[name] = { body: response.body, refresh };
    });
    this.fetchDue.delete(name);
    if (!this.pinned.has(name)) this.refreshDue.set(name, refresh);
    if (replace || !this.campaigns.has(name)) this.campaigns.set(name, campaign);
    return this.campaigns.get(name) as Campaign;
  }

  /** When the next config fetch is due (Infinity: none): the automatic sender wakes for it too. */
  nextFetch(): number {
    return Math.min(...this.fetchDue.values(), ...this.refreshDue.values());
  }

  /** The sender's round: the fetches whose time has come (held unpinned configs refreshed a day later). */
  async fetchDueConfigs(): Promise<void> {
    const now = this.o.clock();
    for (const [due, replace] of [[this.fetchDue, false], [this.refreshDue, true]] as const) {
      for (const [name, when] of [...due].sort()) {
        if (when > now) continue;
        try {
          await this.fetch(name, replace);
        } catch (error) {
          this.o.log("warn", `chorus: campaign ${JSON.stringify(name)} config not fetched: ${(error as Error).message}`);
          due.set(name, this.fetchTime(now));
        }
      }
    }
  }

  /** The config a report is made with, or undefined (logged once). */
  async forReport(name: string): Promise<Campaign | undefined> {
    const onDevice = await this.onDevice(name);
    if (onDevice !== undefined) return onDevice;
    if (!this.pinned.has(name) && !this.o.allowUnpinned) {
      this.o.warnOnce(name, "not-pinned", `chorus: campaign ${JSON.stringify(name)} is not pinned by this app (campaigns); no report made`);
      return undefined;
    }
    const now = this.o.clock();
    if (now < (this.unavailableUntil.get(name) ?? -Infinity)) return undefined;
    if (this.o.sendDelay !== 0) {
      if (!this.fetchDue.has(name)) this.fetchDue.set(name, this.fetchTime(now));
      this.o.warnOnce(name, "config-pending", `chorus: campaign ${JSON.stringify(name)}'s config is not on this device yet; it is fetched at a random moment, not now (ship it, or call prepare() at start-up)`);
      return undefined;
    }
    try {
      return await this.fetch(name);
    } catch (error) {
      this.unavailableUntil.set(name, now + UNAVAILABLE_HOLD_OFF);
      this.o.warnOnce(name, "unavailable", `chorus: campaign ${JSON.stringify(name)} unavailable: ${(error as Error).message}`);
      return undefined;
    }
  }
}
