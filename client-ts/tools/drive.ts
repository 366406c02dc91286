/**
 * Drives the TypeScript client from a JSON script, for the pytest end-to-end and
 * hostile-collector tests (tests/client_ts/). FOR TESTS ONLY: it moves the clock, and with
 * `seed` it uses the seeded generator, never used for real reports.
 *
 * usage: node drive.js <script.json> <out.json>
 *
 * script: {"url", "state": path or null (memory), "now": Unix seconds,
 *          "client": {campaigns, allowUnpinned, caps, plan, sendDelay, batchSize, seed},
 *          "steps": [step, ...]}
 * steps:  {"op": "report", "campaign", "value"}       → the outcome
 *         {"op": "flush"} → FlushResult    {"op": "prepare"} → ready    {"op": "close"} → waiting text
 *         {"op": "campaign", "campaign"} → its digest (the app fetches it at start-up)
 *         {"op": "restart"} (close, then a new client on the same state)
 *         {"op": "advance", "seconds"}    {"op": "spent", "campaign"?}    {"op": "plan"}    {"op": "waiting"}
 *         {"op": "worstCase", "campaign"?} → the bound (one campaign, or the install's)
 *         {"op": "sentLog"} → {text, html, reports}
 *         {"op": "untilSent", "ms"?} → what is left in the outbox once empty or after `ms` (no flush: autoSend's timer)
 *         {"op": "loop", "times", "advance", "steps"} → counts of the outcomes of its reports
 *         {"op": "installs", "installs": [[[campaign, value], ...], ...], "flushAfter", "parallel"}:
 *           one client (a new install, in memory) per entry, reporting its values, then flushing
 *           `flushAfter` seconds later → counts of outcomes and the summed FlushResult
 * out:    {"results": [...], "log": [lines the client logged]}
 * `caps.lifetimeBudget: null` means no lifetime budget (JSON has no ∞; allowed with `rollingWindow`).
 * `rollingWindow: {budget, days}` sets one; `ingestKey` and `strict` pass through (a strict
 * report that throws answers "error: <name>: <reason>").
 */
import { readFileSync, writeFileSync } from "node:fs";

import { Client, MemoryStore, RollingWindow, seededRandomForTests, sentLogHtml, sentLogText, worstCase, type ClientOptions, type FlushResult, type Store } from "../src/index.js";
import { FileStore } from "../src/node.js";

type Step = { op: string; [key: string]: unknown };
interface Script {
  url: string;
  state: string | null;
  now: number;
  client: Record<string, unknown> & { caps?: Record<string, number | null>; seed?: number };
  steps: Step[];
}

const [scriptPath, outPath] = process.argv.slice(2) as [string, string];
const script = JSON.parse(readFileSync(scriptPath, "utf8")) as Script;
let now = script.now;
const log: string[] = [];
const results: unknown[] = [];

function options(store: Store): ClientOptions {
  const { seed, caps, rollingWindow, ...rest } = script.client;
  const window = rollingWindow as { budget: number; days: number } | undefined;
  const fixedCaps = Object.fromEntries(Object.entries(caps ?? {}).map(([k, v]) => [k, v === null ? Infinity : v]));
  return {
    // Flushes are the script's steps (autoSend: true in the script turns the timer on).
    url: script.url, store, clock: () => now, log: (level, message) => log.push(`${level}: ${message}`), autoSend: false,
    ...(seed === undefined ? {} : { rng: seededRandomForTests(seed), allowInsecureRng: true }),
    ...rest, caps: fixedCaps,
    ...(window === undefined ? {} : { rollingWindow: new RollingWindow(window.budget, window.days) }),
  } as ClientOptions;
}

const openStore = async (): Promise<Store> => (script.state === null ? new MemoryStore() : FileStore.open(script.state));
let client = await Client.create(options(await openStore()));

const add = (a: FlushResult, b: FlushResult): FlushResult => ({
  accepted: a.accepted + b.accepted, duplicate: a.duplicate + b.duplicate, rejected: a.rejected + b.rejected, pending: a.pending + b.pending,
});

async function install(index: number, pairs: [string, unknown][], flushAfter: number): Promise<{ outcomes: string[]; flushed: FlushResult }> {
  let at = now; // each install's own clock: installs run side by side
  const seed = script.client.seed;
  const one = await Client.create({
    ...options(new MemoryStore()), clock: () => at,
    // Every install its own stream (one shared seed would give every install the same noise).
    ...(seed === undefined ? {} : { rng: seededRandomForTests(seed + 7919 * (index + 1)) }),
  });
  const outcomes: string[] = [];
  for (const [campaign, value] of pairs) outcomes.push(await one.report(campaign, value));
  at = now + flushAfter; // later: its reports are due
  const flushed = await one.flush();
  await one.close();
  return { outcomes, flushed };
}

async function run(step: Step, counts?: Map<string, number>): Promise<unknown> {
  switch (step.op) {
    case "report": {
      const outcome = await client.report(step.campaign as string, step.value).catch((e: Error & { reason?: string }) => `error: ${e.name}: ${e.reason ?? e.message}`);
      counts?.set(outcome, (counts.get(outcome) ?? 0) + 1);
      return outcome;
    }
    case "flush":
      return client.flush();
    case "prepare":
      return client.prepare();
    case "campaign":
      return (await client.campaign(step.campaign as string)).digest;
    case "close":
      return String((await client.close()).waiting);
    case "restart":
      await client.close();
      client = await Client.create(options(await openStore()));
      return null;
    case "advance":
      now += step.seconds as number;
      return now;
    case "spent":
      return client.spent(step.campaign as string | undefined);
    case "plan":
      return client.plan();
    case "untilSent": {
      // The automatic sender's work, awaited: polls the outbox (every 20 ms, at most `ms`).
      for (let waited = 0; waited < ((step.ms as number | undefined) ?? 5000) && (await client.pending()) > 0; waited += 20) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return client.pending();
    }
    case "worstCase":
      return step.campaign === undefined ? worstCase(client) : worstCase(client, step.campaign as string);
    case "sentLog": {
      const sent = await client.sentLog();
      return { text: sentLogText(sent), html: sentLogHtml(sent), reports: sent.reports };
    }
    case "waiting":
      return String(await client.waiting());
    case "loop": {
      const inner = new Map<string, number>();
      for (let i = 0; i < (step.times as number); i++) {
        for (const s of step.steps as Step[]) await run(s, inner);
        now += (step.advance as number) ?? 0;
      }
      return Object.fromEntries(inner);
    }
    case "installs": {
      const installs = step.installs as [string, unknown][][];
      const parallel = (step.parallel as number | undefined) ?? 4;
      const outcomes = new Map<string, number>();
      let flushed: FlushResult = { accepted: 0, duplicate: 0, rejected: 0, pending: 0 };
      for (let i = 0; i < installs.length; i += parallel) {
        const done = await Promise.all(installs.slice(i, i + parallel).map((pairs, j) => install(i + j, pairs, step.flushAfter as number)));
        for (const d of done) {
          for (const o of d.outcomes) outcomes.set(o, (outcomes.get(o) ?? 0) + 1);
          flushed = add(flushed, d.flushed);
        }
      }
      return { outcomes: Object.fromEntries(outcomes), flushed };
    }
    default:
      throw new Error(`unknown step ${step.op}`);
  }
}

for (const step of script.steps) results.push(await run(step));
writeFileSync(outPath, JSON.stringify({ results, log }));
