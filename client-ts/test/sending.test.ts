import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import { join } from "node:path";
import { test } from "node:test";

import { Client, configDigest, configOf, fetchTransport, JsonFloat, MemoryStore, seededRandomForTests, sentLogText, type ClientOptions, type Json } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { answer, Clock, krrConfig, noSleep, NOW, quiet, scratchDir, ScriptedTransport } from "./support.js";

type Obj = { [key: string]: Json };
const many = { unit: "lifetime", budget: new JsonFloat(100), max_reports: 100 } as Obj;
const theme = krrConfig("theme", { privacy: many });
const font = krrConfig("font", { privacy: many, values: ["serif", "sans"] });

function make(transport: ScriptedTransport, options: Partial<Omit<ClientOptions, "clock">> & { clock?: Clock } = {}): Promise<Client> {
  const { clock, ...rest } = options;
  return Client.create({
    url: "http://collector.test", store: new MemoryStore(), transport, sendDelay: 0, sleep: noSleep, log: quiet, autoSend: false,
    clock: (clock ?? new Clock()).read, campaigns: { theme, font }, ...rest, caps: { lifetimeBudget: 1000, ...rest.caps },
  });
}

const PROBLEM = { "Content-Type": "application/problem+json" };

test("reports leave at a random moment of the bucket after their own, whatever the value or the moment in the bucket", async () => {
  const clock = new Clock();
  const dues: number[][] = [];
  // In-domain values: k-RR draws the same number of coins for every value, so the streams stay aligned.
  for (const values of [["light", "dark", "hc"], ["sepia", "sepia", "light"]]) {
    const transport = new ScriptedTransport();
    const client = await make(transport, { clock, sendDelay: undefined, rng: seededRandomForTests(5), allowInsecureRng: true });
    for (const [i, at] of [10, 1800, 3599].entries()) {
      clock.now = NOW + at;
      await client.report("theme", values[i]);
    }
    const waiting = await client.waiting();
    const w = waiting.campaigns.get("theme");
    assert.ok(w !== undefined && w.firstDue >= NOW + 3600 && w.lastDue < NOW + 7200, String(waiting));
    assert.match(String(waiting), /^3 reports wait \(theme: 3 reports leaving from 01:\d\d UTC to 01:\d\d UTC\)$/);
    clock.now = NOW + 3599;
    assert.equal((await client.flush()).accepted, 0);
    assert.equal(transport.posts().length, 0);
    clock.now = NOW + 7200;
    assert.equal((await client.flush()).accepted, 3);
    assert.deepEqual(transport.reports().map((r) => r.time), [NOW, NOW, NOW]);
    dues.push([w.firstDue, w.lastDue]);
    clock.now = NOW;
  }
  assert.deepEqual(dues[0], dues[1]); // same coins, other values: the same moments
});

test("retries resend the stored bytes unchanged: 503, a network error, 429 with Retry-After, then accepted", async () => {
  const transport = new ScriptedTransport([answer(503), "network-error", answer(429, "", { "Retry-After": "1" })]);
  const client = await make(transport);
  await client.report("theme", "dark");
  await client.report("theme", "light");
  const result = await client.flush();
  assert.equal(result.accepted, 2);
  const bodies = transport.posts().map((p) => p.body);
  assert.equal(bodies.length, 4);
  assert.ok(bodies.every((b) => b === bodies[0]));
  const log = await client.sentLog();
  assert.deepEqual(bodies[0], `{"reports":[${log.reports.slice().reverse().map((r) => JSON.stringify({ report_id: r.reportId, digest: transport.reports()[0]?.digest, time: r.bucket, payload: r.payload })).join(",")}]}`);
});

test("after a crash the outbox is sent again byte for byte", async () => {
  const path = join(scratchDir("chorus-send-"), "state.json");
  const down = new ScriptedTransport(Array(10).fill("network-error"));
  const first = await make(down, { store: await FileStore.open(path) });
  await first.report("theme", "dark");
  await first.report("font", "serif");
  const result = await first.flush();
  assert.equal(result.pending, 2);
  assert.match(String(await first.waiting()), /could not be reached: nothing leaves before/);
  await first.close(); // a last attempt (the collector still down), the reports stay
  const tried = down.posts().map((p) => p.body);
  const up = new ScriptedTransport();
  const second = await make(up, { store: await FileStore.open(path) });
  assert.equal((await second.flush()).accepted, 2);
  // The batch that was tried before the crash leaves with the same bytes; the other with its stored ones.
  assert.equal(new Set(tried).size, 1);
  assert.equal(up.posts()[0]?.body, tried[0]);
  assert.equal(up.posts().length, 2);
  assert.equal(await second.pending(), 0);
});

test("a 413 halves the batch until it fits; every report keeps its bytes", async () => {
  const transport = new ScriptedTransport([answer(413, "<html>too large</html>", { "Content-Type": "text/html" })]);
  const client = await make(transport);
  for (const v of ["light", "dark", "hc", "sepia"]) await client.report("theme", v);
  assert.equal((await client.flush()).accepted, 4);
  const posts = transport.posts().map((p) => (JSON.parse(p.body as string) as { reports: unknown[] }).reports.length);
  assert.deepEqual(posts, [4, 2, 2]);
  const whole = JSON.parse(transport.posts()[0]?.body as string) as { reports: unknown[] };
  const halves = transport.posts().slice(1).flatMap((p) => (JSON.parse(p.body as string) as { reports: unknown[] }).reports);
  assert.deepEqual(halves, whole.reports);
});

test("duplicate is delivered, a Chorus refusal drops the reports, a proxy's error page keeps them", async () => {
  const transport = new ScriptedTransport([
    answer(200, { results: [{ status: "duplicate" }, { status: "rejected", error: "report-expired" }] }),
  ]);
  const client = await make(transport);
  await client.report("theme", "dark");
  await client.report("theme", "dark");
  assert.deepEqual(await client.flush(), { accepted: 0, duplicate: 1, rejected: 1, pending: 0 });
  assert.deepEqual((await client.sentLog()).reports.map((r) => r.status), ["refused", "duplicate"]);

  transport.script.push(answer(409, { type: "https://chorus.dev/problems/report-conflict", title: "x" }, PROBLEM));
  await client.report("theme", "dark");
  assert.deepEqual(await client.flush(), { accepted: 0, duplicate: 0, rejected: 1, pending: 0 });

  const proxy = new ScriptedTransport([answer(400, "<html>Bad gateway config</html>", { "Content-Type": "text/html" })]);
  const kept = await make(proxy);
  await kept.report("theme", "dark");
  assert.equal((await kept.flush()).pending, 1);
  assert.equal((await kept.sentLog()).reports.length, 0);
});

test("one campaign per request", async () => {
  const transport = new ScriptedTransport();
  const client = await make(transport);
  for (let i = 0; i < 3; i++) {
    await client.report("theme", "dark");
    await client.report("font", "serif");
  }
  await client.flush();
  const digests = transport.posts().map((p) => new Set((JSON.parse(p.body as string) as { reports: { digest: string }[] }).reports.map((r) => r.digest)));
  assert.equal(digests.length, 2);
  assert.ok(digests.every((d) => d.size === 1));
});

test("a charge that could not be made durable queues and sends nothing", async () => {
  const path = join(scratchDir("chorus-fault-"), "state.json");
  let fail = false;
  const disk = () => {
    if (fail) throw new Error("disk full");
  };
  const store = await FileStore.open(path, { faults: { afterTempWrite: disk, afterAppendWrite: disk } });
  const transport = new ScriptedTransport();
  const client = await make(transport, { store });
  fail = true;
  assert.equal(await client.report("theme", "dark"), "unavailable");
  fail = false;
  assert.equal(await client.pending(), 0);
  assert.equal(await client.spent(), 0);
  await client.flush();
  assert.equal(transport.posts().length, 0);
});

test("the sent log shows what left, with ε and the budget, and never a true value", async () => {
  const transport = new ScriptedTransport();
  const client = await make(transport, { campaigns: { theme: krrConfig("theme", { privacy: many }) }, caps: { lifetimeBudget: 8 } });
  await client.report("theme", "sepia");
  await client.report("theme", "never-sent-secret");
  await client.flush();
  const log = await client.sentLog();
  assert.equal(log.reports.length, 2);
  assert.equal(log.spent, 2);
  const text = sentLogText(log);
  assert.match(text, /ε spent: 2 of 8 \(6 left\)/);
  assert.match(text, /theme {2}ε 1 {2}accepted {2}bucket 2026-01-01 00:00 UTC {2}payload \d/);
  assert.ok(!text.includes("sepia") && !text.includes("secret"));
});

/** A real HTTP collector on 127.0.0.1 that sets a tracking cookie on every answer and records every request's headers. */
async function cookieServer(config: string) {
  const seen: { method: string; headers: IncomingHttpHeaders; port: number }[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += String(c)));
    req.on("end", () => {
      seen.push({ method: req.method as string, headers: req.headers, port: req.socket.remotePort as number });
      res.setHeader("Set-Cookie", ["track=install-42; Path=/; Max-Age=31536000", "id=7; Path=/"]);
      res.setHeader("Content-Type", "application/json");
      if (req.method === "GET") res.end(config);
      else res.end(JSON.stringify({ results: (JSON.parse(body) as { reports: unknown[] }).reports.map(() => ({ status: "accepted" })) }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, seen, close: () => new Promise((r) => server.close(r)) };
}

test("fetch sends no cookie, keeps none the collector sets, reuses no connection and sends only generic headers", async () => {
  const config = theme;
  const digest = await configDigest(configOf(config));
  const { canonicalJson } = await import("../src/index.js");
  const server = await cookieServer(canonicalJson({ ...config, digest }));
  try {
    for (let start = 0; start < 2; start++) {
      const client = await Client.create({
        url: server.url, store: new MemoryStore(), transport: fetchTransport, campaigns: { theme: digest }, sendDelay: 0, log: quiet, autoSend: false,
      });
      assert.deepEqual(await client.prepare(), { theme: true });
      for (let i = 0; i < 3; i++) {
        assert.equal(await client.report("theme", "dark"), "queued");
        await client.flush();
      }
      assert.equal(client.totals.accepted, 3);
      await client.close();
    }
    assert.equal(server.seen.length, 8);
    assert.equal(new Set(server.seen.map((s) => s.port)).size, 8, "a connection was reused");
    const allowed = new Set(["host", "connection", "content-type", "content-length", "accept", "accept-language", "accept-encoding", "sec-fetch-mode", "user-agent", "pragma", "cache-control"]);
    for (const { headers } of server.seen) {
      assert.equal(headers.cookie, undefined);
      assert.equal(headers.authorization, undefined);
      for (const name of Object.keys(headers)) assert.ok(allowed.has(name), `unexpected header ${name}`);
      assert.ok(!/\d/.test(headers["user-agent"] ?? ""), `a versioned user agent: ${headers["user-agent"]}`);
    }
  } finally {
    await server.close();
  }
});
