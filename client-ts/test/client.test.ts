import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Client, drawPeriods, JsonFloat, MemoryStore, PlanError, resolvePlan, seededRandomForTests, type ClientOptions, type Json, type Outcome } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { Clock, DAY, krrConfig, noSleep, NOW, quiet, scratchDir, ScriptedTransport } from "./support.js";

type Obj = { [key: string]: Json };
const f = (x: number) => new JsonFloat(x);

function make(options: Partial<Omit<ClientOptions, "clock">> & { clock?: Clock } = {}): Promise<Client> {
  const { clock, ...rest } = options;
  return Client.create({
    url: "http://collector.test", store: new MemoryStore(), transport: new ScriptedTransport(), sendDelay: 0,
    sleep: noSleep, log: quiet, autoSend: false, clock: (clock ?? new Clock()).read, ...rest,
  });
}

const VALUES: unknown[] = ["light", "dark", "not-a-theme", Number.NaN, { lat: 51.5 }, null, "\ud800", 10n ** 30n, Symbol("s"), ["x"]];

test("a report over a budget is suppressed after the same count whatever the values", async () => {
  const sequences: Outcome[][] = [];
  for (const shift of [0, 3, 7]) {
    const client = await make({ campaigns: { theme: krrConfig("theme", { privacy: { unit: "lifetime", budget: f(3), max_reports: 3 } }) } });
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 6; i++) outcomes.push(await client.report("theme", VALUES[(i + shift) % VALUES.length]));
    sequences.push(outcomes.map((o) => (o === "substituted" ? "queued" : o)));
    assert.equal(await client.spent("theme"), 3);
    assert.equal(await client.pending(), 3);
  }
  assert.deepEqual(sequences[0], ["queued", "queued", "queued", "suppressed", "suppressed", "suppressed"]);
  assert.deepEqual(sequences[1], sequences[0]);
  assert.deepEqual(sequences[2], sequences[0]);
});

test("the lifetime budget holds a campaign whose policy allows a million reports a day", async () => {
  const clock = new Clock();
  const greedy = krrConfig("greedy", { epsilon: 2, privacy: { unit: "day", budget: f(1e6), max_reports: 1_000_000 } });
  const client = await make({ clock, campaigns: { greedy } });
  let queued = 0;
  for (let day = 0; day < 365; day++, clock.now += DAY) {
    for (let i = 0; i < 5; i++) if ((await client.report("greedy", "dark")) === "queued") queued++;
  }
  assert.equal(queued, 4);
  assert.equal(await client.spent(), 8);
  assert.equal(client.suppressed.get("lifetime-budget"), 365 * 5 - 4);
});

test("a value outside the domain is sent as a substitute, and no log line quotes it", async () => {
  const lines: string[] = [];
  const transport = new ScriptedTransport();
  const client = await make({ transport, log: (_l, m) => lines.push(m), campaigns: { theme: krrConfig("theme", { privacy: { unit: "lifetime", budget: f(10), max_reports: 10 } }) } });
  assert.equal(await client.report("theme", "hiv-clinic-visit"), "substituted");
  assert.equal(await client.report("theme", { secret: "hiv-clinic-visit" }), "substituted");
  assert.equal(await client.report("theme", "dark"), "queued");
  await client.flush();
  assert.equal(transport.reports().length, 3);
  for (const r of transport.reports()) assert.ok(Number.isInteger(r.payload) && (r.payload as number) >= 0 && (r.payload as number) < 4);
  assert.ok(lines.length > 0 && lines.every((l) => !l.includes("hiv") && !l.includes("secret")), lines.join("\n"));
  // An `other` category takes the value instead of a substitute.
  const other = await make({ campaigns: { t: krrConfig("t", { values: ["a", "b", "other"], other: "other" }) } });
  assert.equal(await other.report("t", "zzz"), "queued");
});

test("the privacy plan shares the lifetime budget, and refuses plans that overspend or name unpinned campaigns", async () => {
  const browser = krrConfig("browser", { epsilon: 2, privacy: { unit: "lifetime", budget: f(6), max_reports: 3 }, schedule: { cadence: "week", start: "2026-01-01", periods: 52 } });
  const latency = krrConfig("latency", { epsilon: 1, privacy: { unit: "lifetime", budget: f(2), max_reports: 2 } });
  const client = await make({ campaigns: { browser, latency }, plan: { budgets: { browser: 6, latency: 2 } } });
  const plan = await client.plan();
  assert.deepEqual(plan.map((p) => [p.campaign, p.reports, p.epsilon, p.budget]), [["browser", 3, 2, 6], ["latency", 2, 1, 2]]);
  assert.equal(plan[0]?.periods?.length, 3);
  // Without a plan the pinned campaigns share equally: 4 each pays for 2 browser reports.
  const equal = await make({ campaigns: { browser, latency } });
  assert.deepEqual((await equal.plan()).map((p) => p.reports), [2, 2]);
  assert.throws(() => resolvePlan({ budgets: { a: 6, b: 3 } }, 8, ["a", "b"], false), PlanError);
  assert.throws(() => resolvePlan({ budgets: { x: 1 } }, 8, ["a"], false), /not pinned/);
  assert.deepEqual(resolvePlan({ shares: { a: 3, b: 1 } }, 8, ["a", "b"], true), { pinned: new Map([["a", 5.25], ["b", 1.75]]), unpinned: 1 });
  assert.deepEqual(resolvePlan({}, 8, [], true), { pinned: new Map(), unpinned: 8 });
});

const daily = (periods: number, start = "2026-01-01"): Obj =>
  krrConfig("daily", { epsilon: 1, privacy: { unit: "lifetime", budget: f(4), max_reports: 4 }, schedule: { cadence: "day", start, periods } });

/** One install over `days` days, calling report() at a few hours each day; outcomes and due times. */
async function history(seed: number, values: (day: number, call: number) => unknown, days = 30) {
  const clock = new Clock();
  const transport = new ScriptedTransport();
  const client = await make({ clock, transport, rng: seededRandomForTests(seed), allowInsecureRng: true, sendDelay: undefined, campaigns: { daily: daily(30) } });
  const outcomes: string[] = [];
  for (let day = 0; day < days; day++) {
    for (const [call, hour] of [3, 9, 20].entries()) {
      clock.now = NOW + day * DAY + hour * 3600 + 17;
      const outcome = await client.report("daily", values(day, call));
      outcomes.push(outcome === "substituted" ? "queued" : outcome);
    }
  }
  const plan = await client.plan();
  return { outcomes, plan, spent: await client.spent() };
}

test("with the same coins, different value histories report in exactly the same periods", async () => {
  const histories = [
    () => "light",
    (d: number) => (d % 2 === 0 ? "dark" : "light"),
    (d: number, c: number) => VALUES[(d * 3 + c) % VALUES.length],
    () => Number.NaN,
  ];
  const runs = [];
  for (const values of histories) runs.push(await history(7, values));
  const first = runs[0] as Awaited<ReturnType<typeof history>>;
  assert.equal(first.outcomes.filter((o) => o === "queued").length, 4);
  assert.equal(first.spent, 4);
  for (const run of runs) {
    assert.deepEqual(run.outcomes, first.outcomes);
    assert.deepEqual(run.plan, first.plan);
  }
  // One report per drawn day, at the first call of that day; every other call is skipped.
  const queuedDays = first.outcomes.flatMap((o, i) => (o === "queued" ? [Math.floor(i / 3)] : []));
  assert.deepEqual(queuedDays.map((d) => new Date((NOW + d * DAY) * 1000).toISOString().slice(0, 10)), first.plan[0]?.periods);
  assert.ok(first.outcomes.every((o, i) => o !== "queued" || i % 3 === 0));
  // Negative control: other coins draw other days.
  const other = await history(8, () => "light");
  assert.notDeepEqual(other.plan[0]?.periods, first.plan[0]?.periods);
});

test("drawn periods before the install arrived are forfeited and never charged", async () => {
  const clock = new Clock(NOW + 20 * DAY + 5);
  let forfeited = 0;
  let reports = 0;
  for (let seed = 1; seed <= 40; seed++) {
    const client = await make({ clock, rng: seededRandomForTests(seed), allowInsecureRng: true, campaigns: { daily: daily(30) } });
    const [plan] = await client.plan();
    assert.ok(plan !== undefined && plan.forfeited + plan.reports === 4);
    forfeited += plan.forfeited;
    reports += plan.reports;
    let queued = 0;
    for (let day = 20; day < 32; day++) {
      clock.now = NOW + day * DAY + 5;
      if ((await client.report("daily", "dark")) === "queued") queued++;
    }
    assert.equal(queued, plan.reports);
    assert.equal(await client.spent(), plan.reports);
    clock.now = NOW + 20 * DAY + 5;
  }
  // 20 of 30 days were past: E[forfeited] = 4·20/30 per install.
  assert.ok(forfeited > reports, `${forfeited} forfeited, ${reports} kept`);
});

test("a period is charged once, and one before the latest asked never reopens when the clock goes back", async () => {
  const clock = new Clock();
  const client = await make({ clock, rng: seededRandomForTests(3), allowInsecureRng: true, campaigns: { daily: daily(30) } });
  const slots = (await client.plan())[0]?.periods?.map((d) => (Date.parse(d) / 1000 - NOW) / DAY) as number[];
  const [a, b] = slots as [number, number];
  clock.now = NOW + b * DAY + 60;
  assert.equal(await client.report("daily", "dark"), "queued");
  assert.equal(await client.report("daily", "dark"), "skipped"); // its report was made
  clock.now = NOW + a * DAY + 60; // back to an earlier drawn day
  assert.equal(await client.report("daily", "dark"), "skipped");
  assert.equal(await client.spent(), 1);
});

test("the draw is stored before any report and kept across restarts", async () => {
  const path = join(scratchDir("chorus-plan-"), "state.json");
  const first = await make({ store: await FileStore.open(path), campaigns: { daily: daily(365) } });
  const plan = await first.plan();
  await first.close();
  for (let i = 0; i < 3; i++) {
    const again = await make({ store: await FileStore.open(path), campaigns: { daily: daily(365) } });
    assert.deepEqual(await again.plan(), plan);
    await again.close();
  }
});

test("drawPeriods draws every subset equally often (χ² over the 20 subsets of 3 of 6)", () => {
  const rng = seededRandomForTests(20261202);
  const counts = new Map<string, number>();
  const n = 40_000;
  for (let i = 0; i < n; i++) {
    const key = drawPeriods(rng, 3, 6).join(",");
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  assert.equal(counts.size, 20);
  const expected = n / 20;
  const chi2 = [...counts.values()].reduce((s, c) => s + (c - expected) ** 2 / expected, 0);
  assert.ok(chi2 < 63.68, `χ² = ${chi2} (19 df, α = 1e-6)`); // scipy.stats.chi2.isf(1e-6, 19)
  // Negative control: the same statistic catches a draw that favours period 0 by 10%.
  const biased = new Map(counts);
  for (const [key, c] of biased) if (key.startsWith("0,")) biased.set(key, c * 1.1);
  const total = [...biased.values()].reduce((s, c) => s + c, 0);
  const chi2b = [...biased.values()].reduce((s, c) => s + (c - total / 20) ** 2 / (total / 20), 0);
  assert.ok(chi2b > 63.68, `χ² = ${chi2b}`);
});

test("configs: a shipped config that fails the checks throws, one above the caps is refused, an insecure rng needs an opt-in", async () => {
  const loose = krrConfig("loose", { epsilon: 2.5, privacy: { unit: "lifetime", budget: f(2.5), max_reports: 1 } });
  await assert.rejects(make({ campaigns: { loose } }), /cap/);
  await assert.rejects(make({ campaigns: { fine: krrConfig("fine", { precision: 60 }) } }), /finer/);
  await assert.rejects(make({ campaigns: { other: krrConfig("theme") } }), /another campaign/);
  const lying = { ...krrConfig("theme"), digest: "0".repeat(64) };
  await assert.rejects(make({ campaigns: { theme: lying } }), /digest/);
  await assert.rejects(make({ rng: seededRandomForTests(1) }), /CSPRNG/);
  assert.ok(await make({ caps: { maxEpsilon: 3 }, campaigns: { loose } }));
});

test("an unpinned campaign draws from its own allowance and never takes a pinned campaign's reports", async () => {
  const clock = new Clock();
  const hostile = krrConfig("hostile", { epsilon: 1, privacy: { unit: "day", budget: f(1e6), max_reports: 1_000_000 } });
  const { canonicalJson } = await import("../src/index.js");
  const transport = new ScriptedTransport([], { hostile: canonicalJson(hostile) });
  const pinned = krrConfig("pinned", { epsilon: 0.5, privacy: { unit: "day", budget: f(0.5), max_reports: 1 } });
  const client = await make({ clock, transport, allowUnpinned: true, campaigns: { pinned } });
  const counts = { pinned: 0, hostile: 0 };
  for (let day = 0; day < 30; day++, clock.now += DAY) {
    for (let i = 0; i < 5; i++) if ((await client.report("hostile", "dark")) === "queued") counts.hostile++;
    if ((await client.report("pinned", "dark")) === "queued") counts.pinned++;
  }
  // The unpinned allowance is 1/8 of 8: one report at ε 1; the pinned campaign keeps 7: 14 at 0.5.
  assert.deepEqual(counts, { pinned: 14, hostile: 1 });
  assert.equal(await client.spent(), 8);
});

test("a config version with another ε draws again only what the share has left, after the latest period asked", async () => {
  const clock = new Clock(NOW + 3 * DAY + 60);
  const store = new MemoryStore();
  const v1 = daily(30);
  const first = await make({ clock, store, rng: seededRandomForTests(11), allowInsecureRng: true, campaigns: { daily: v1 } });
  const [plan1] = await first.plan();
  // Report on every day until the first drawn report is made.
  let reportedOn = -1;
  for (let day = 3; day < 30 && reportedOn < 0; day++) {
    clock.now = NOW + day * DAY + 60;
    if ((await first.report("daily", "dark")) === "queued") reportedOn = day;
  }
  assert.ok(reportedOn >= 0 && plan1 !== undefined);
  // The collector's next version halves ε (and doubles the count): the plan is drawn again.
  const v2 = krrConfig("daily", { epsilon: 0.5, privacy: { unit: "lifetime", budget: f(4), max_reports: 8 }, schedule: { cadence: "day", start: "2026-01-01", periods: 30 } });
  const second = await make({ clock, store, rng: seededRandomForTests(12), allowInsecureRng: true, campaigns: { daily: v2 } });
  const [plan2] = await second.plan();
  assert.ok(plan2 !== undefined);
  assert.equal(plan2.epsilon, 0.5);
  // The share (all 8: one pinned campaign) less what was spent (1) pays for 14 at 0.5; the policy
  // allows 8, drawn in periods after the one asked in. The campaign's own lifetime budget (4)
  // still holds in the ledger: 1 + 6 · 0.5.
  assert.equal(plan2.reports, 8);
  assert.ok((plan2.periods as string[]).every((d) => Date.parse(d) / 1000 > NOW + reportedOn * DAY));
  let queued = 0;
  for (let day = 0; day < 31; day++) {
    clock.now = NOW + day * DAY + 120;
    if ((await second.report("daily", "dark")) === "queued") queued++;
  }
  assert.equal(queued, 6);
  assert.equal(await second.spent(), 4);
  await second.close();
  assert.equal(await second.report("daily", "dark"), "unavailable"); // closed
});

test("a discovery campaign's group comes from the install's key, not from the value or the report", async () => {
  const { keyedGroup, mechanismFor, recomputeEpsilon, typeConfigFloats } = await import("../src/index.js");
  const campaigns = (JSON.parse(readFileSync(new URL("../../../docs/vectors/campaigns.json", import.meta.url), "utf8")) as {
    campaigns: { name: string; public_config: Obj }[];
  }).campaigns;
  const pem = typeConfigFloats(campaigns.find((c) => c.name === "pem-0")!.public_config) as Obj;
  const mechanism = mechanismFor(pem, recomputeEpsilon(pem));
  const weights = mechanism.groupWeights!;
  const total = weights.reduce((a, b) => a + b, 0);
  const counts = weights.map(() => 0);
  const installs = 600;
  for (let i = 0; i < installs; i++) {
    const store = new MemoryStore();
    const transport = new ScriptedTransport();
    const client = await make({ store, transport, campaigns: { "pem-0": pem } });
    assert.equal(await client.report("pem-0", i % 2 === 0 ? "a" : "z"), "queued");
    await client.flush();
    const body = JSON.parse(transport.sent.find((s) => s.method === "POST")!.body!) as { reports: { digest: string; payload: { g: number } }[] };
    const report = body.reports[0]!;
    // The very group keyedGroup gives for this install's stored key, campaign, version and period.
    const hex = await store.read((s) => s.assignmentKey!);
    const key = Uint8Array.from(hex.match(/../g)!, (b) => parseInt(b, 16));
    assert.equal(report.payload.g, await keyedGroup(mechanism as never, key, "pem-0", report.digest, "lifetime"));
    counts[report.payload.g]! += 1;
    await client.close();
  }
  // Installs fall in the groups by their weights (χ², α = 1e-6, 2 degrees of freedom).
  const chi2 = counts.reduce((s, o, g) => s + (o - (installs * weights[g]!) / total) ** 2 / ((installs * weights[g]!) / total), 0);
  assert.ok(chi2 < 27.63, `groups ${counts} against weights ${weights}: χ² = ${chi2}`);
});
