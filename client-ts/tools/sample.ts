/**
 * Draws seeded samples through this package's randomizers, for the goodness-of-fit test in
 * tests/client_ts/ (which checks them against the Python mechanisms' exact output
 * probabilities). FOR TESTS ONLY: it uses the seeded generator, never used for real reports.
 *
 * usage: node sample.js <campaigns.json> <jobs.json> <out.jsonl>
 * jobs.json: [{"campaign": name, "value": app value, "draws": n, "seed": s}, ...]
 * out.jsonl: one line per job: {"campaign", "value", "counts": {canonical JSON text: count, ...}}
 */
import { readFileSync, writeFileSync } from "node:fs";

import { canonicalJson, mechanismFor, parseJsonExact, recomputeEpsilon, seededRandomForTests, type Json } from "../src/index.js";

type Obj = { [key: string]: Json };
const [campaignsPath, jobsPath, outPath] = process.argv.slice(2);
if (outPath === undefined) throw new Error("usage: sample.js <campaigns.json> <jobs.json> <out.jsonl>");
const campaigns = (parseJsonExact(readFileSync(campaignsPath as string, "utf8")) as Obj).campaigns as Obj[];
const jobs = JSON.parse(readFileSync(jobsPath as string, "utf8")) as { campaign: string; value: unknown; draws: number; seed: number }[];
const lines: string[] = [];
for (const job of jobs) {
  const config = campaigns.find((c) => c.name === job.campaign)?.config as Obj | undefined;
  if (config === undefined) throw new Error(`no campaign ${job.campaign}`);
  const mechanism = mechanismFor(config, recomputeEpsilon(config));
  const rng = seededRandomForTests(job.seed);
  const x = mechanism.encode(job.value);
  const counts = new Map<string, number>();
  for (let i = 0; i < job.draws; i++) {
    const text = canonicalJson(mechanism.randomize(x, rng));
    counts.set(text, (counts.get(text) ?? 0) + 1);
  }
  lines.push(JSON.stringify({ campaign: job.campaign, value: job.value, counts: Object.fromEntries(counts) }));
}
writeFileSync(outPath as string, lines.join("\n") + "\n");
