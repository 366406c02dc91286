import assert from "node:assert/strict";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  BudgetExceededError, CampaignUnavailableError, canonicalJson, Client, JsonFloat, MemoryStore, RollingWindow, ValueDomainError, worstCase,
  type ClientOptions, type Json, type SpendCounter, type Store,
} from "../src/index.js";
import { FileSpendCounter, FileStore } from "../src/node.js";
import { Clock, DAY, krrConfig, noSleep, NOW, quiet, scratchDir, ScriptedTransport } from "./support.js";

type Obj = { [key: string]: Json };
const f = (x: number) => new JsonFloat(x);
const daily = krrConfig("daily", { privacy: { unit: "day", budget: f(1), max_reports: 1 } });
const many = krrConfig("many", { privacy: { unit: "lifetime", budget: f(100), max_reports: 100 } });
const once = krrConfig("once", { privacy: { unit: "lifetime", budget: f(1), max_reports: 1 } });
const tmp = (name: string) => join(scratchDir("chorus-policy-"), name);

function make(options: Partial<Omit<ClientOptions, "clock">> & { clock?: Clock } = {}): Promise<Client> {
  const { clock, ...rest } = options;
  return Client.create({
    url: "http://collector.test", store: new MemoryStore(), transport: new ScriptedTransport(), sendDelay: 0, sleep: noSleep,
    log: quiet, autoSend: false, clock: (clock ?? new Clock()).read, ...rest,
  });
}

// -- the rolling window (tests/client/test_client_plan.py, "a weaker unit, only on request") ------

test("a rolling window is an explicit rate and says it is weaker than a lifetime bound", async () => {
  const clock = new Clock(NOW + 3600);
  const client = await make({ clock, campaigns: { daily }, caps: { lifetimeBudget: Infinity }, rollingWindow: new RollingWindow(2, 3) });
  const made: boolean[] = [];
  for (let day = 0; day < 12; day++) {
    clock.now = NOW + day * DAY + 3600;
    made.push((await client.report("daily", "dark")) === "queued");
  }
  // One a day by the campaign, at most 2 in any 3 days by the window: 2 of every 3 days.
  assert.deepEqual(made, [true, true, false, true, true, false, true, true, false, true, true, false]);
  assert.equal(client.suppressed.get("window-budget"), 4);
  clock.now -= 5 * DAY; // the clock goes back: later charges still count in every window
  assert.equal(await client.report("daily", "dark"), "suppressed");
  const bound = await worstCase(client, "daily");
  assert.match(bound.window, /weaker than a lifetime bound/);
  assert.match(bound.window, /nothing caps the total/);
  assert.equal(bound.lifetime, Infinity);
  const capped = await make({ clock, campaigns: { daily }, rollingWindow: new RollingWindow(2, 3) });
  assert.match((await worstCase(capped, "daily")).window, /the lifetime budget of 8 still caps the total/);
  assert.equal((await worstCase(await make({ clock, campaigns: { daily } }), "daily")).window, "");
  assert.throws(() => new RollingWindow(1, 0), /whole number of days/);
  assert.throws(() => new RollingWindow(Infinity, 3), /positive finite/);
  await assert.rejects(make({ campaigns: { daily }, caps: { lifetimeBudget: Infinity } }), /Infinity needs a rollingWindow/);
});

test("the rolling window holds across restarts, and a damaged day's entry spends it all", async () => {
  const path = tmp("state.json");
  const clock = new Clock(NOW + 3600);
  // No lifetime budget: the plan's part is ∞, and must stay ∞ in the state file (JSON has no ∞).
  // Every commit writes the whole state (journalLimit 0), so the snapshot can be read and edited
  // here; file-store.test.ts shows ∞ kept through the journal too.
  const open = async () => make({
    clock, store: await FileStore.open(path, { journalLimit: 0 }), campaigns: { daily }, caps: { lifetimeBudget: Infinity }, rollingWindow: new RollingWindow(2, 7),
  });
  for (let day = 0; day < 2; day++) {
    const client = await open();
    clock.now = NOW + day * DAY + 3600;
    assert.equal(await client.report("daily", "dark"), "queued");
    await client.close();
  }
  clock.now = NOW + 2 * DAY + 3600;
  let client = await open();
  assert.equal(await client.report("daily", "dark"), "suppressed"); // 2 in these 7 days already
  await client.close();
  clock.now = NOW + 7 * DAY + 3600; // day 0 has left the window
  client = await open();
  assert.equal(await client.report("daily", "dark"), "queued");
  await client.close();
  const snapshot = JSON.parse(readFileSync(path, "utf8")) as { state: { dailySpend: Record<string, unknown>; plans: Record<string, { budget: unknown }> } };
  const state = snapshot.state;
  assert.deepEqual(Object.values(state.dailySpend), [1, 1, 1]);
  assert.equal(state.plans.daily?.budget, "Infinity");
  state.dailySpend[String(Math.floor(NOW / DAY) - 400)] = "lots"; // long ago, but unreadable
  writeFileSync(path, JSON.stringify(snapshot));
  clock.now += DAY;
  client = await open();
  assert.equal(await client.report("daily", "dark"), "suppressed");
  await client.close();
});

// -- the app's spend counter -----------------------------------------------------------------------

/** A counter in memory, recording what the client's store held when it was charged. */
class CountingCounter implements SpendCounter {
  total = 0;
  readonly outboxAtCharge: number[] = [];
  failSpent = false;
  failCharge = false;
  constructor(private readonly store?: Store) {}
  spent(): number {
    if (this.failSpent) throw new Error("unreadable");
    return this.total;
  }
  async charge(epsilon: number): Promise<void> {
    if (this.failCharge) throw new Error("disk full");
    if (this.store !== undefined) this.outboxAtCharge.push(await this.store.read((s) => s.outbox.length));
    this.total += epsilon;
  }
}

test("the spend counter is charged before the report is stored, and only for reports made", async () => {
  const store = new MemoryStore();
  const counter = new CountingCounter(store);
  const clock = new Clock(NOW);
  const client = await make({ clock, store, campaigns: { once, many }, spendCounter: counter, caps: { lifetimeBudget: 3 }, plan: { budgets: { once: 1, many: 2 } } });
  assert.equal(await client.report("once", "dark"), "queued");
  assert.equal(await client.report("once", "dark"), "suppressed"); // the campaign's own cap: never charged there
  assert.deepEqual(counter.outboxAtCharge, [0]);
  assert.equal(counter.total, 1);
  assert.equal(await client.report("many", "dark"), "queued");
  assert.deepEqual(counter.outboxAtCharge, [0, 1]);
  counter.total = 2.5; // charged elsewhere (a restored state does not know)
  assert.equal(await client.spent(), 2.5);
  assert.equal(await client.report("many", "dark"), "suppressed");
  assert.equal(client.suppressed.get("lifetime-budget"), 1);
  assert.equal(await client.pending(), 2);
});

test("restoring an old copy of the state does not renew the budget when the app keeps a spend counter", async () => {
  const dir = scratchDir("chorus-restore-");
  const path = join(dir, "state.json");
  const counterPath = join(dir, "no-backup", "spent");
  const run = async (counter: SpendCounter | undefined, values: number) => {
    const client = await make({ store: await FileStore.open(path), campaigns: { many }, caps: { lifetimeBudget: 2 }, ...(counter ? { spendCounter: counter } : {}) });
    const outcomes = [];
    for (let i = 0; i < values; i++) outcomes.push(await client.report("many", "dark"));
    await client.close();
    return outcomes;
  };
  // A backup holds the state's files: the snapshot and its journal.
  const files = [path, `${path}.journal`];
  const backup = () => files.forEach((file, i) => copyFileSync(file, join(dir, `backup-${i}`)));
  const restore = () => files.forEach((file, i) => copyFileSync(join(dir, `backup-${i}`), file));
  await run(new FileSpendCounter(counterPath), 0); // the state as a backup would hold it: nothing spent
  backup();
  assert.deepEqual(await run(new FileSpendCounter(counterPath), 3), ["queued", "queued", "suppressed"]);
  restore(); // the backup restored: the ledger forgets
  assert.deepEqual(await run(new FileSpendCounter(counterPath), 1), ["suppressed"]);
  assert.equal(readFileSync(counterPath, "ascii"), "2");
  // The negative control: without the counter the restored install spends its budget again.
  restore();
  assert.deepEqual(await run(undefined, 1), ["queued"]);
});

test("a failing spend counter refuses the report and never throws", async () => {
  for (const failure of ["failSpent", "failCharge"] as const) {
    const counter = new CountingCounter();
    counter[failure] = true;
    const client = await make({ campaigns: { many }, spendCounter: counter });
    assert.equal(await client.report("many", "dark"), "suppressed");
    assert.equal(client.suppressed.get("spend-counter"), 1);
    assert.equal(await client.pending(), 0);
    assert.equal(await client.spent("many"), 0);
    if (failure === "failSpent") assert.equal(await client.spent(), Infinity);
  }
  const path = tmp("spent");
  writeFileSync(path, "-3");
  await assert.rejects(new FileSpendCounter(path).spent(), /does not hold a spend count/);
  assert.equal(await new FileSpendCounter(tmp("missing")).spent(), 0);
});

// -- ingestKey and strict ----------------------------------------------------------------------------

test("the ingest key goes with report uploads only, the same for every install", async () => {
  const transport = new ScriptedTransport([], { many: canonicalJson(many) });
  const digest = (await (await make({ campaigns: { many } })).campaign("many")).digest;
  for (let install = 0; install < 2; install++) {
    const client = await make({ transport, campaigns: { many: digest }, ingestKey: "app-key-1" });
    await client.prepare(); // a config fetch
    await client.report("many", "dark");
    await client.flush();
  }
  const gets = transport.sent.filter((s) => s.method === "GET");
  assert.ok(gets.length >= 2);
  for (const get of gets) assert.ok(!Object.keys(get.headers).some((h) => h.toLowerCase() === "authorization"));
  assert.deepEqual(transport.posts().map((p) => p.headers.Authorization), ["Bearer app-key-1", "Bearer app-key-1"]);
  for (const bad of ["two words", "line\nbreak", ""]) await assert.rejects(make({ ingestKey: bad }), /ingestKey/);
});

test("strict mode throws what the default answers in words, and still queues the substitute", async () => {
  const clock = new Clock(NOW);
  const client = await make({ clock, campaigns: { once }, strict: true });
  await assert.rejects(client.report("unknown", "dark"), (e: unknown) => e instanceof CampaignUnavailableError && e.campaign === "unknown");
  await assert.rejects(client.report("once", "a secret value"), (e: unknown) => e instanceof ValueDomainError && !String(e).includes("secret"));
  assert.equal(await client.pending(), 1); // the substitute was queued
  await assert.rejects(client.report("once", "dark"), (e: unknown) => e instanceof BudgetExceededError && e.reason === "budget");
  await client.close();
  await assert.rejects(client.report("once", "dark"), (e: unknown) => e instanceof CampaignUnavailableError && e.reason === "closed");
  const lenient = await make({ campaigns: { once } });
  assert.equal(await lenient.report("unknown", "dark"), "unavailable");
  assert.equal(await lenient.report("once", "a secret value"), "substituted");
  assert.equal(await lenient.report("once", "dark"), "suppressed");
});

// -- the worst case ------------------------------------------------------------------------------------

test("the worst case follows from the policies, the plan and the caps, in total and in words", async () => {
  const clock = new Clock(NOW);
  const client = await make({ clock, campaigns: { once, daily }, allowUnpinned: true });
  // Lifetime 8: 1 for unpinned campaigns, 3.5 for each pinned one.
  const first = await worstCase(client, "once");
  assert.deepEqual({ ...first, words: undefined }, {
    campaign: "once", pinned: true, unit: "lifetime", perReport: 1, perPeriod: 1, perYear: 1, lifetime: 1,
    holdsAcrossRestarts: false, window: "", words: undefined,
  });
  const second = await worstCase(client, "daily");
  assert.equal(second.perPeriod, 1);
  assert.equal(second.perYear, 3.5); // 366 days at 1 a day, within its part of the plan
  assert.equal(second.lifetime, 3.5);
  const all = await worstCase(client);
  assert.equal(all.unpinned, 1);
  assert.equal(all.lifetime, 1 + 3.5 + 1);
  assert.equal(all.perYear, 1 + 3.5 + 1);
  assert.deepEqual(all.campaigns.map((c) => c.campaign), ["daily", "once"]);
  assert.match(all.words, /^This install can lose at most ε 5.5 in all, ever, and 5.5 in any year/);
  assert.match(all.words, /"once": at most ε 1 ever/);
  assert.match(all.words, /campaigns the app did not pin: ε 1 in all/);
  assert.match(all.words, /every start is a new install with a fresh budget/); // a memory store
  // An unpinned campaign: only the caps and the allowance bound it, whatever its config says.
  const transport = new ScriptedTransport([], { other: canonicalJson(krrConfig("other")) });
  const open = await make({ clock, transport, allowUnpinned: true, store: await FileStore.open(tmp("state.json")) });
  const other = await worstCase(open, "other");
  assert.deepEqual([other.pinned, other.perReport, other.lifetime, other.holdsAcrossRestarts], [false, 2, 8, true]);
  assert.match(other.words, /not pinned: only the caps bound it/);
  await open.close();
});
