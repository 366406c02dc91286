/**
 * The Chorus client runtime: perturb on the device, charge the budget durably, store the
 * report, send it later without regard to the value (docs/protocol.md, "What a client does";
 * docs/client.md; docs/threat-model.md). The app owns the policy: it pins the campaigns,
 * chooses the store and sets the caps; nothing the collector serves can make it spend more.
 *
 * ```ts
 * const client = await Client.create({
 *   url: "https://collector.example",
 *   store: await FileStore.open("/var/lib/myapp/chorus/state.json"),  // "@chorus-ldp/client/node"
 *   campaigns: { browser: SHIPPED_PUBLIC_CONFIG },                     // or { browser: "<digest>" }
 * });
 * await client.report("browser", "firefox");   // "queued": randomized, charged, stored
 * // it leaves by itself when due (a timer; autoSend: false leaves it to flush())
 * await client.close();                          // sends what is due; the rest waits
 * ```
 */
import { DEFAULT_CAPS, fits, type Campaign, type Caps, type Pin } from "./campaign.js";
import { Configs } from "./configs.js";
import type { Json } from "./json.js";
import { chargeAndQueue, EXHAUSTED, refusal, reportsMade, reservedByOthers, slotUsed, spentOn, totalSpent, type Exhausted } from "./ledger.js";
import { drawPlan, resolvePlan, shareOf, type PrivacyPlanOptions, type Shares } from "./plan.js";
import { encodeForReport, ValueDomainError } from "./mechanisms/index.js";
import { cryptoRandom, randomHex, uniform01, type RandomSource } from "./random.js";
import { buildReport, reportWire, truncateTime } from "./report.js";
import { consoleLog, Sender, type FlushResult, type Log } from "./sender.js";
import { unchanged, type PlanRow, type SentEntry, type StateData, type Store } from "./store.js";
import { dueTime } from "./timing.js";
import { DEFAULT_RETRY, fetchTransport, realSleep, type RetryPolicy, type Sleep, type Transport } from "./transport.js";
import { Waiting, type CampaignWaiting } from "./waiting.js";
import { SentLog } from "./sent-log.js";
import type { RollingWindow } from "./window.js";
import { platformTimers, type SpendCounter, type Timers } from "./policy.js";

/**
 * What {@link Client.report} did: `queued` (randomized, charged, stored; it leaves after its
 * time bucket); `skipped` (a campaign with a calendar, outside the install's drawn periods:
 * nothing charged, decided before the value was looked at); `substituted` (the value is outside
 * the domain: a report of a uniformly drawn domain value was queued instead); `suppressed` (a
 * budget is spent: after the same number of reports whatever the values); `unavailable` (not
 * pinned, its config not on the device yet, or refused by the checks).
 */
export type Outcome = "queued" | "skipped" | "substituted" | "suppressed" | "unavailable";

export interface ClientOptions {
  /** The collector's base URL. */
  url: string;
  /** Where the ledger and the outbox live: `FileStore` in Node, IndexedDB in a browser; `MemoryStore` makes every start a new install. */
  store: Store;
  /** The campaigns this app reports to: the public config shipped with the app (object or JSON text), or the digest the fetched config must have. */
  campaigns?: Record<string, Pin>;
  /** Also accept campaigns the app did not pin, in whatever version the collector serves, within the caps and the unpinned allowance. */
  allowUnpinned?: boolean;
  caps?: Partial<Caps>;
  /** How the lifetime budget is shared (default: the pinned campaigns equally). */
  plan?: PrivacyPlanOptions;
  /** Seconds of random delay after a report's bucket ends (default: one bucket). 0 sends at once: tests only. */
  sendDelay?: number;
  transport?: Transport;
  /** The randomness (default: the platform CSPRNG); another needs `allowInsecureRng`, for tests only. */
  rng?: RandomSource;
  allowInsecureRng?: boolean;
  timeoutMs?: number;
  /** Most reports per request (all of one campaign). */
  batchSize?: number;
  /** Answered reports kept for {@link Client.sentLog} (0: none). */
  sentLogSize?: number;
  retry?: RetryPolicy;
  /** Unix seconds now (tests move it). */
  clock?: () => number;
  sleep?: Sleep;
  log?: Log;
  /**
   * Send due reports without flush() (default true): a timer set to the next time a report or
   * a config fetch is due (never earlier; after a failure, not before the backoff or
   * Retry-After), `unref()`ed in Node so that it never keeps a process alive, stopped by
   * close(). In a browser it also tries once when the page is hidden. When it wakes depends
   * on due times only, never on a value.
   */
  autoSend?: boolean;
  /** The automatic sender's timers (default: the platform's setTimeout); tests pass fake ones. */
  timers?: Timers;
  /** Sent as `Authorization: Bearer <key>` with report uploads only; the same for every install, so it identifies the app, not the user. */
  ingestKey?: string;
  /** Throw {@link BudgetExceededError}, {@link CampaignUnavailableError} and `ValueDomainError` (after queuing the substitute) from report() instead of answering "suppressed", "unavailable" or "substituted". */
  strict?: boolean;
  /** A weaker unit on the app's explicit request: at most so much ε in any so many UTC days, on top of the lifetime budget (which it replaces only with `caps.lifetimeBudget: Infinity`). */
  rollingWindow?: RollingWindow;
  /**
   * A second lifetime counter the app keeps where backups do not restore it (see
   * {@link SpendCounter}): every report is charged there too, before it is stored, so that
   * restoring an old copy of the state cannot renew the lifetime budget.
   */
  spendCounter?: SpendCounter;
}

/** What one report transaction decided ("ok": every check passed, nothing written yet). */
type Decided = "queued" | "skipped" | "substituted" | "ok" | Exhausted;

/** What report() throws in strict mode instead of answering "suppressed" or "unavailable"; `reason` says why (never the value). */
export class ReportRefusedError extends Error {
  constructor(readonly campaign: string, readonly reason: string) {
    super(`no report made for ${JSON.stringify(campaign)}: ${reason}`);
  }
}

/** A budget or cap is spent (`reason`: its key in EXHAUSTED, the log line says it in words). */
export class BudgetExceededError extends ReportRefusedError {
  override name = "BudgetExceededError";
}

/** The campaign is not pinned, its config is not on the device or failed the checks, or the client is closed. */
export class CampaignUnavailableError extends ReportRefusedError {
  override name = "CampaignUnavailableError";
}


/** One campaign's part of the plan, as {@link Client.plan} shows it. */
export interface CampaignPlan {
  campaign: string;
  pinned: boolean;
  /** ε the campaign may spend over the install's life. */
  budget: number;
  epsilon: number;
  /** Reports the plan makes (drawn periods after the install arrived). */
  reports: number;
  /** UTC start dates of those periods; null: any time. */
  periods: string[] | null;
  reported: number;
  /** Drawn periods before the install first saw the campaign (never charged). */
  forfeited: number;
}

export class Client {
  readonly caps: Caps;
  /** @internal The plan's parts (worst-case.ts reads them). */
  readonly shares: Shares;
  readonly #sender: Sender;
  /** @internal The campaigns pinned and on the device (worst-case.ts reads them). */
  configs!: Configs;
  readonly #warned = new Set<string>();
  #closed = false;
  /** The automatic sender's timer and the clock time it is set for. */
  #timer: { handle: unknown; at: number } | null = null;
  #onHidden: (() => void) | undefined;
  /** Reports not made, by reason. */
  readonly suppressed = new Map<string, number>();
  substituted = 0;
  skipped = 0;

  private constructor(
    /** @internal The options as resolved (worst-case.ts reads the store and the rolling window). */
    readonly o: Required<Omit<ClientOptions, "campaigns" | "caps" | "plan" | "sendDelay" | "ingestKey" | "rollingWindow" | "spendCounter">>
      & Pick<ClientOptions, "ingestKey" | "rollingWindow" | "spendCounter"> & { sendDelay: number | undefined },
    caps: Caps,
    pinned: string[],
    plan: PrivacyPlanOptions,
  ) {
    this.caps = caps;
    this.shares = resolvePlan(plan, caps.lifetimeBudget, [...pinned].sort(), o.allowUnpinned);
    this.#sender = new Sender(o); // the options it needs, as resolved
  }

  /** A client; verifies every shipped config now (a shipped config that fails the checks throws {@link ConfigError}). */
  static async create(options: ClientOptions): Promise<Client> {
    const caps: Caps = { ...DEFAULT_CAPS, ...options.caps };
    for (const key of ["maxEpsilon", "lifetimeBudget", "campaignBudget", "minTimePrecision"] as const) {
      if (!(caps[key] > 0)) throw new RangeError(`${key} must be positive`);
    }
    if (caps.lifetimeBudget === Infinity && options.rollingWindow === undefined) {
      throw new RangeError("lifetimeBudget: Infinity needs a rollingWindow");
    }
    // A bearer token: printable ASCII, no spaces (a line break would split the header).
    if (options.ingestKey !== undefined && !/^[!-~]+$/.test(options.ingestKey)) throw new RangeError("ingestKey must be printable ASCII");
    if (options.rng !== undefined && options.rng !== cryptoRandom && !options.allowInsecureRng) {
      throw new RangeError("rng is not the platform CSPRNG: predictable coins undo the randomization. Pass allowInsecureRng in tests only.");
    }
    if (options.sendDelay !== undefined && !(options.sendDelay >= 0)) throw new RangeError("sendDelay must be a number of seconds >= 0");
    const batchSize = options.batchSize ?? 100;
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new RangeError("batchSize must be a positive integer");
    const sentLogSize = options.sentLogSize ?? 1000;
    if (!Number.isSafeInteger(sentLogSize) || sentLogSize < 0) throw new RangeError("sentLogSize must be an integer >= 0");
    const campaigns = options.campaigns ?? {};
    const client = new Client(
      {
        url: options.url.replace(/\/+$/, ""),
        store: options.store,
        allowUnpinned: options.allowUnpinned ?? false,
        sendDelay: options.sendDelay,
        transport: options.transport ?? fetchTransport,
        rng: options.rng ?? cryptoRandom,
        allowInsecureRng: options.allowInsecureRng ?? false,
        timeoutMs: options.timeoutMs ?? 10_000,
        batchSize,
        sentLogSize,
        retry: options.retry ?? DEFAULT_RETRY,
        clock: options.clock ?? (() => Date.now() / 1000),
        sleep: options.sleep ?? realSleep,
        log: options.log ?? consoleLog,
        autoSend: options.autoSend ?? true,
        timers: options.timers ?? platformTimers,
        strict: options.strict ?? false,
        ingestKey: options.ingestKey,
        rollingWindow: options.rollingWindow,
        spendCounter: options.spendCounter,
      },
      caps,
      Object.keys(campaigns),
      options.plan ?? {},
    );
    const o = client.o;
    client.configs = await Configs.create({
      ...o, caps, warnOnce: (campaign, reason, message) => client.#warnOnce(campaign, reason, message),
    }, campaigns);
    // A pinned campaign's part of the plan is fixed when it is first seen: now, if on the device.
    const now = o.clock();
    for (const name of [...client.configs.pinned].sort()) {
      const campaign = await client.configs.onDevice(name);
      if (campaign !== undefined) await o.store.update((draft) => client.#settlePlan(draft, name, campaign, now).plan);
    }
    if (o.autoSend && typeof document !== "undefined") {
      // A page being hidden may be the last chance to send: one try, of what is due anyway.
      client.#onHidden = () => void (document.visibilityState === "hidden" && client.flush().catch(() => undefined));
      document.addEventListener("visibilitychange", client.#onHidden);
    }
    await client.#schedule(); // what an earlier run left in the outbox
    return client;
  }

  // -- campaigns --------------------------------------------------------------------------------

  /**
   * The verified config of a campaign: shipped, kept from an earlier fetch, or fetched now and
   * checked against its pin (throws {@link ConfigError} with the reason). An app's call, at
   * start-up: {@link report} never fetches.
   */
  async campaign(name: string): Promise<Campaign> {
    return (await this.configs.onDevice(name)) ?? (await this.configs.fetch(name));
  }

  /** Fetches now every campaign pinned by digest whose config is not on the device: call it at start-up, a moment that says nothing about any report. */
  async prepare(): Promise<Record<string, boolean>> {
    const ready: Record<string, boolean> = {};
    const now = this.o.clock();
    for (const name of [...this.configs.pinned].sort()) {
      let campaign = await this.configs.onDevice(name);
      if (campaign === undefined) {
        try {
          campaign = await this.configs.fetch(name);
        } catch (error) {
          this.o.log("warn", `chorus: campaign ${JSON.stringify(name)} not ready: ${(error as Error).message}`);
        }
      }
      if (campaign !== undefined) {
        const c = campaign;
        await this.o.store.update((draft) => this.#settlePlan(draft, name, c, now).plan);
      }
      ready[name] = campaign !== undefined;
    }
    return ready;
  }

  // -- the plan ------------------------------------------------------------------------------------

  /** The campaign's part of the plan in `draft`: the one held for this basis, or one drawn now (stored by the same transaction). */
  #settlePlan(draft: StateData, name: string, campaign: Campaign, now: number): { plan: PlanRow; drawn: boolean } {
    const held = draft.plans[name];
    if (held !== undefined && held.basis === campaign.basis) return { plan: held, drawn: false };
    const { pool, budget } = shareOf(this.shares, name);
    const plan = drawPlan(campaign, pool, budget, now, this.o.rng, spentOn(draft, name), reservedByOthers(draft, name), held);
    draft.plans[name] = plan;
    return { plan, drawn: true };
  }

  /** This install's plan, per campaign on the device. */
  async plan(): Promise<CampaignPlan[]> {
    const out: CampaignPlan[] = [];
    const state = await this.o.store.read((s) => structuredClone(s) as StateData);
    for (const [name, row] of Object.entries(state.plans).sort(([a], [b]) => (a < b ? -1 : 1))) {
      const campaign = await this.configs.onDevice(name);
      const schedule = campaign?.schedule ?? null;
      const base = { campaign: name, pinned: this.configs.pinned.has(name), budget: row.budget, epsilon: row.epsilon };
      if (schedule === null || row.slots === null) {
        out.push({ ...base, reports: row.reports, periods: null, reported: reportsMade(state, name), forfeited: 0 });
        continue;
      }
      const ahead = row.slots.filter((s) => s >= row.first);
      out.push({
        ...base, reports: ahead.length, periods: ahead.map((s) => schedule.date(s)),
        reported: state.slotsUsed[name]?.[row.basis]?.length ?? 0, forfeited: row.slots.length - ahead.length,
      });
    }
    return out;
  }

  // -- reporting -----------------------------------------------------------------------------------

  /**
   * Randomizes `value` on the device, charges the ledger and queues the report, in one durable
   * transaction; see {@link Outcome}. Never throws for a value, a budget or the network, and no
   * message or log line it writes holds the value.
   */
  async report(campaignName: string, value: unknown): Promise<Outcome> {
    if (this.#closed) return this.#unavailable(campaignName, "closed");
    let campaign: Campaign | undefined;
    let why = "config-pending";
    try {
      campaign = await this.configs.forReport(campaignName);
    } catch (error) {
      why = (error as Error).name;
      this.o.log("warn", `chorus: campaign ${JSON.stringify(campaignName)} unavailable (${why})`);
    }
    if (campaign === undefined) {
      this.#count(this.suppressed, "unavailable");
      return this.#unavailable(campaignName, why);
    }
    const c = campaign;
    const now = this.o.clock();
    let outcome: Decided;
    try {
      // A discovery campaign's group: from the install's key, the campaign, its version and the
      // period, never the value (computed out here: the store's transaction cannot await).
      const group = c.mechanism.assignGroup === undefined ? undefined
        : await c.mechanism.assignGroup(await this.#assignmentKey(), campaignName, c.digest, c.period(now));
      const decide = (commit: boolean) => this.o.store.update((draft) => this.#decideAndQueue(draft, campaignName, c, value, now, group, commit));
      // With the app's spend counter: every check first, then the counter's charge (durable
      // before the report exists), then the report, checked again (a crash or a race in
      // between over-counts there, never under-counts).
      outcome = await decide(this.o.spendCounter === undefined);
      if (outcome === "ok") outcome = (await this.#chargeCounter(c.epsilon)) ?? (await decide(true));
    } catch (error) {
      // A store that cannot write (closed, locked, disk full): nothing was charged or queued.
      this.o.log("warn", `chorus: no report made for ${JSON.stringify(campaignName)}: ${(error as Error).name}: ${(error as Error).message}`);
      if (this.o.strict) throw error;
      return "unavailable";
    }
    if (outcome === "skipped") this.skipped++;
    else if (outcome === "substituted") {
      this.substituted++;
      this.#warnOnce(campaignName, "substituted", `chorus: a value for ${JSON.stringify(campaignName)} is outside the campaign's domain; a substitute report was queued instead`);
    } else if (outcome !== "queued") {
      const reason = outcome as Exhausted;
      this.#count(this.suppressed, reason);
      this.#warnOnce(campaignName, reason, `chorus: no more reports for ${JSON.stringify(campaignName)}: ${EXHAUSTED[reason]}`);
      if (this.o.strict) throw new BudgetExceededError(campaignName, reason);
      return "suppressed";
    }
    if (outcome !== "skipped") await this.#schedule().catch(() => undefined);
    // A fresh error, which holds no value: the substitute is queued already.
    if (outcome === "substituted" && this.o.strict) throw new ValueDomainError("outside the campaign's domain: a substitute was queued");
    return outcome as Outcome;
  }

  #unavailable(campaignName: string, kind: string): Outcome {
    if (this.o.strict) throw new CampaignUnavailableError(campaignName, kind);
    return "unavailable";
  }

  /** The app's spend counter: checked against the lifetime budget, then charged; a failure refuses the report (never throws: it is the app's code). */
  async #chargeCounter(cost: number): Promise<Exhausted | null> {
    const counter = this.o.spendCounter as SpendCounter;
    try {
      if (!fits(await counter.spent(), cost, this.caps.lifetimeBudget)) return "lifetime-budget";
      await counter.charge(cost);
      return null;
    } catch (error) {
      this.o.log("warn", `chorus: spendCounter failed (${(error as Error)?.name})`);
      return "spend-counter";
    }
  }

  /**
   * Inside one store transaction: the plan, the period's slot, the budgets (all from the clock
   * and the stored state, before the value is looked at), then the randomized report, charged
   * and queued. A skip or a refusal writes only what the plan needs (a first draw, the latest
   * time asked), never a charge.
   */
  #decideAndQueue(draft: StateData, name: string, campaign: Campaign, value: unknown, now: number,
    group: number | undefined, commit: boolean) {
    type R = Decided;
    const settled = this.#settlePlan(draft, name, campaign, now);
    const plan = settled.plan;
    let changed = settled.drawn;
    const done = (result: R) => (changed ? result : unchanged(result));
    let slot: { plan: PlanRow; index: number } | null = null;
    const schedule = campaign.schedule;
    if (schedule !== null && plan.slots !== null) {
      const index = schedule.index(now);
      const latest = plan.asked;
      if (latest === null || now > latest) {
        plan.asked = now;
        changed = true;
      }
      const closed = latest !== null && index < schedule.index(latest); // the clock went back
      if (closed || index < plan.first || !plan.slots.includes(index) || slotUsed(draft, plan, index)) return done("skipped");
      slot = { plan, index };
    }
    const period = campaign.period(now);
    const limits = {
      periodReports: campaign.reportsPerPeriod,
      maxReports: campaign.policy.maxReports,
      periodBudget: campaign.policy.budget,
      campaignBudget: Math.min(this.caps.campaignBudget, plan.budget),
      lifetimeBudget: this.caps.lifetimeBudget,
    };
    const refused = refusal(draft, name, period, campaign.epsilon, limits);
    if (refused !== null) return done(refused);
    const day = Math.floor(now / 86400);
    const window = this.o.rollingWindow;
    if (window?.refuses(draft, day, campaign.epsilon)) return done("window-budget");
    if (!commit) return done("ok");
    // When it leaves is drawn before the value is looked at (and never from it).
    const due = dueTime(now, campaign.timePrecision, this.o.sendDelay, uniform01(this.o.rng));
    const time = truncateTime(now, campaign.timePrecision);
    const { payload, substituted } = this.#randomize(campaign, value, group);
    const report = buildReport(campaign.digest, time, payload, this.o.rng);
    chargeAndQueue(draft, { campaign: name, wire: reportWire(report), bucket: time, due, epsilon: campaign.epsilon }, period, slot);
    window?.charge(draft, day, campaign.epsilon);
    return substituted ? "substituted" : "queued";
  }

  /** The install's secret assignment key (32 bytes from the CSPRNG, drawn once and kept in the
   * state): it places the install in a discovery campaign's group. Never sent anywhere. */
  async #assignmentKey(): Promise<Uint8Array<ArrayBuffer>> {
    const hex = await this.o.store.update((draft) => {
      if (draft.assignmentKey === undefined) {
        draft.assignmentKey = randomHex(this.o.rng, 32);
        return draft.assignmentKey;
      }
      return unchanged(draft.assignmentKey);
    });
    return Uint8Array.from(hex.match(/../g) ?? [], (byte) => parseInt(byte, 16));
  }

  /** The payload for the value, or for a substitute drawn uniformly from the domain when the
   * value has no encoding (docs/protocol.md, step 4); a discovery campaign's keyed group. */
  #randomize(campaign: Campaign, value: unknown, group: number | undefined): { payload: Json; substituted: boolean } {
    // Any failure (outside the domain, NaN, a type encode() did not foresee) gives a substitute,
    // so that no value can make the report raise or go missing; the reason is dropped: it may
    // describe the value.
    const { input, substituted } = encodeForReport(campaign.mechanism, value, this.o.rng);
    return { payload: campaign.mechanism.randomize(input, this.o.rng, group === undefined ? undefined : { group }), substituted };
  }

  // -- what was spent, what waits, what left -------------------------------------------------------

  /** ε this install has spent, on one campaign (all periods and versions) or in total. */
  async spent(campaignName?: string): Promise<number> {
    const ledger = await this.o.store.read((s) => (campaignName === undefined ? totalSpent(s) : spentOn(s, campaignName)));
    const counter = this.o.spendCounter;
    if (campaignName !== undefined || counter === undefined) return ledger;
    try {
      return Math.max(ledger, await counter.spent());
    } catch {
      return Infinity; // as report() does: an unreadable counter spends nothing more
    }
  }



  /** ε left of the lifetime budget. */
  async remaining(): Promise<number> {
    return Math.max(0, this.caps.lifetimeBudget - (await this.spent()));
  }

  /** Reports randomized and queued, not yet answered for by the collector. */
  pending(): Promise<number> {
    return this.o.store.read((s) => s.outbox.length);
  }

  /** What waits in the outbox, per campaign, and when it may leave; `String()` of it reads "3 reports wait (browser: 3 reports leaving from 14:00 UTC)". */
  async waiting(): Promise<Waiting> {
    const campaigns = await this.o.store.read((s) => {
      const out = new Map<string, CampaignWaiting>();
      for (const row of s.outbox) {
        const w = out.get(row.campaign);
        if (w === undefined) out.set(row.campaign, { reports: 1, firstDue: row.due, lastDue: row.due });
        else out.set(row.campaign, { reports: w.reports + 1, firstDue: Math.min(w.firstDue, row.due), lastDue: Math.max(w.lastDue, row.due) });
      }
      return out;
    });
    const now = this.o.clock();
    return new Waiting(now, campaigns, this.#sender.holdUntil > now ? this.#sender.holdUntil : null);
  }

  /** What this device sent, newest first: each report as it left, its ε, the collector's answer, and the budget spent and left. It holds nothing the collector does not get. */
  async sentLog(limit?: number): Promise<SentLog> {
    const [entries, spent, waiting] = await this.o.store.read(
      (s) => [s.sentLog.slice().reverse().slice(0, limit ?? s.sentLog.length), totalSpent(s), s.outbox.length] as [SentEntry[], number, number],
    );
    return new SentLog(entries, spent, this.caps.lifetimeBudget, waiting);
  }

  /** Everything acknowledged over this client's life. */
  get totals(): FlushResult {
    return { ...this.#sender.totals };
  }

  // -- sending -------------------------------------------------------------------------------------

  /** Fetches the configs that are due, then sends the due reports in batches of one campaign until none is left or the collector cannot take more. */
  async flush(): Promise<FlushResult> {
    if (!this.#closed) await this.configs.fetchDueConfigs();
    const result = await this.#sender.flush();
    await this.#schedule().catch(() => undefined);
    return result;
  }

  /**
   * Sets the automatic sender's timer for the next time something may leave: the earliest due
   * report or config fetch, not before a hold-off. A timer set earlier is kept (it sets the
   * next one when it fires); a closed client sets none.
   */
  async #schedule(): Promise<void> {
    if (this.#closed || !this.o.autoSend) return;
    const due = await this.o.store.read((s) => s.outbox.reduce((m, r) => Math.min(m, r.due), Infinity));
    const at = Math.max(Math.min(due, this.configs.nextFetch()), this.#sender.holdUntil);
    if (this.#closed || at === Infinity || this.#timer?.at as number <= at) return;
    this.#stopTimer();
    // Whole milliseconds, rounded up: never before the due time (and the sender sends only
    // what is due when it wakes); at most the platform's longest timer (~24 days).
    const ms = Math.min(Math.max(0, Math.ceil((at - this.o.clock()) * 1000)), 2 ** 31 - 1);
    this.#timer = { at, handle: this.o.timers.set(() => this.#wake(), ms) };
  }

  async #wake(): Promise<void> {
    this.#timer = null;
    try {
      await this.flush();
    } catch (error) {
      // The sender must outlive any surprise (a store that cannot be read): back off, retry later.
      this.o.log("warn", `chorus: automatic send failed (${(error as Error)?.name})`);
      this.#sender.holdOff();
      await this.#schedule().catch(() => undefined);
    }
  }

  #stopTimer(): void {
    if (this.#timer !== null) this.o.timers.clear(this.#timer.handle);
    this.#timer = null;
  }

  /**
   * Sends what is due (everything, for a store that does not persist: it has no next run),
   * then releases the store. Reports still unsent stay in the outbox for the next run, and
   * the log says when they leave. Closing again does nothing.
   */
  async close(): Promise<{ result: FlushResult; waiting: Waiting }> {
    if (this.#closed) return { result: { accepted: 0, duplicate: 0, rejected: 0, pending: 0 }, waiting: new Waiting(this.o.clock(), new Map(), null) };
    this.#closed = true;
    this.#stopTimer();
    if (this.#onHidden !== undefined) document.removeEventListener("visibilitychange", this.#onHidden);
    this.#sender.release();
    const result = await this.#sender.flush(!this.o.store.persistent);
    const waiting = await this.waiting();
    if (result.pending > 0) {
      this.o.log(this.#sender.totals.accepted === 0 ? "warn" : "info", `chorus: closing with ${waiting.explained()}`);
    }
    await this.o.store.close();
    return { result, waiting };
  }

  #count(counter: Map<string, number>, key: string): void {
    counter.set(key, (counter.get(key) ?? 0) + 1);
  }

  /** A warning the first time per campaign and reason, so that an app reporting in a loop does not flood its log. */
  #warnOnce(campaign: string, reason: string, message: string): void {
    const key = `${campaign}\0${reason}`;
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.o.log("warn", message);
  }
}

