import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";

import { Client, JsonFloat, MemoryStore, platformTimers, type ClientOptions, type Json, type Timers } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { answer, Clock, krrConfig, noSleep, NOW, quiet, scratchDir, ScriptedTransport } from "./support.js";

type Obj = { [key: string]: Json };
const many = { unit: "lifetime", budget: new JsonFloat(100), max_reports: 100 } as Obj;
const theme = krrConfig("theme", { privacy: many });

/** Timers on the test's clock: `run` moves the clock to each timer's moment, in order, and fires it. */
class FakeTimers implements Timers {
  private next = 1;
  readonly pending = new Map<number, { fn: () => unknown; at: number }>();
  constructor(private readonly clock: Clock) {}

  set = (fn: () => unknown, ms: number): number => {
    const id = this.next++;
    this.pending.set(id, { fn, at: this.clock.now + ms / 1000 });
    return id;
  };

  clear = (handle: unknown): void => {
    this.pending.delete(handle as number);
  };

  /** The moment the earliest timer is set for (undefined: none). */
  get earliest(): number | undefined {
    const ats = [...this.pending.values()].map((t) => t.at);
    return ats.length === 0 ? undefined : Math.min(...ats);
  }

  /** Fires the timers due by `until` (at most 20), each at its own moment, awaiting what it started. */
  async run(until: number): Promise<number> {
    let fired = 0;
    for (; fired < 20; fired++) {
      const [id, timer] = [...this.pending.entries()].sort((a, b) => a[1].at - b[1].at)[0] ?? [];
      if (id === undefined || timer === undefined || timer.at > until) break;
      this.pending.delete(id);
      this.clock.now = Math.max(this.clock.now, timer.at);
      await timer.fn();
    }
    this.clock.now = Math.max(this.clock.now, until);
    return fired;
  }
}

/** Lets what a page event started run to its end (the memory store and the transport here answer at once). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

function make(transport: ScriptedTransport, clock: Clock, timers: Timers, options: Partial<ClientOptions> = {}): Promise<Client> {
  return Client.create({
    url: "http://collector.test", store: new MemoryStore(), transport, sleep: noSleep, log: quiet, clock: clock.read,
    timers, campaigns: { theme }, ...options,
  });
}

test("reports leave by themselves at their due time, never earlier, without a flush() call", async () => {
  const clock = new Clock(NOW + 600);
  const timers = new FakeTimers(clock);
  const transport = new ScriptedTransport();
  const client = await make(transport, clock, timers);
  assert.equal(timers.pending.size, 0); // nothing waits: no timer
  assert.equal(await client.report("theme", "dark"), "queued");
  const due = (await client.waiting()).nextDue as number;
  // The default delay: the bucket's end plus up to one bucket.
  assert.ok(due >= NOW + 3600 && due <= NOW + 7200, String(due));
  const at = timers.earliest as number;
  assert.ok(at >= due && at < due + 0.002, `timer at ${at}, due ${due}`);
  // Up to a moment before the due time nothing fires and nothing leaves.
  assert.equal(await timers.run(due - 0.01), 0);
  assert.equal(transport.posts().length, 0);
  assert.equal(await timers.run(at), 1);
  assert.equal(transport.posts().length, 1);
  assert.equal(await client.pending(), 0);
  assert.equal(timers.pending.size, 0); // nothing left: no timer
  // A second report sets the timer again; an earlier one moves it, a later one does not.
  await client.report("theme", "light");
  const first = timers.earliest as number;
  clock.now += 3600;
  await client.report("theme", "hc");
  assert.equal(timers.pending.size, 1);
  assert.equal(timers.earliest, first);
  await timers.run(first);
  assert.equal(transport.reports().length, 2); // the first; the second is not due yet
  assert.ok((timers.earliest as number) > first);
  await timers.run(NOW + 5 * 3600);
  assert.equal(transport.reports().length, 3);
  await client.close();
});

test("after a refusal the timer waits for Retry-After or the backoff, then sends", async () => {
  const clock = new Clock(NOW);
  const timers = new FakeTimers(clock);
  const transport = new ScriptedTransport([answer(503, "busy", { "Retry-After": "900" }), "network-error"]);
  const client = await make(transport, clock, timers, { sendDelay: 0, retry: { maxAttempts: 1, baseDelayMs: 1000, maxDelayMs: 60_000 } });
  await client.report("theme", "dark");
  assert.equal(timers.earliest, NOW); // due at once (sendDelay 0)
  await timers.run(NOW);
  assert.equal(transport.posts().length, 1);
  assert.ok((timers.earliest as number) >= NOW + 900, String(timers.earliest)); // not before Retry-After
  await timers.run(NOW + 899);
  assert.equal(transport.posts().length, 1);
  await timers.run(NOW + 900);
  assert.equal(transport.posts().length, 2); // no answer: backoff
  const backoff = (timers.earliest as number) - clock.now;
  assert.ok(backoff > 0, String(backoff));
  await timers.run(clock.now + backoff);
  assert.equal(transport.posts().length, 3);
  assert.equal(await client.pending(), 0);
  await client.close();
});

test("a collector that answers for part of a batch is not asked again at once", async () => {
  const clock = new Clock(NOW);
  const timers = new FakeTimers(clock);
  const partial = answer(200, { results: [{ status: "accepted" }] }, { "Content-Type": "application/json" });
  const transport = new ScriptedTransport([partial]);
  const client = await make(transport, clock, timers, { sendDelay: 0 });
  await client.report("theme", "dark");
  await client.report("theme", "light");
  await timers.run(NOW);
  assert.equal(transport.posts().length, 1);
  assert.equal(await client.pending(), 1);
  assert.ok((timers.earliest as number) > NOW, String(timers.earliest)); // held off, not a timer at 0 ms
  await timers.run(NOW + 3600);
  assert.equal(transport.posts().length, 2);
  assert.equal(await client.pending(), 0);
  await client.close();
});

test("a closed client schedules nothing, and autoSend: false never sets a timer", async () => {
  const clock = new Clock(NOW);
  const timers = new FakeTimers(clock);
  const transport = new ScriptedTransport();
  const path = join(scratchDir("chorus-auto-"), "state.json");
  const client = await make(transport, clock, timers, { store: await FileStore.open(path) });
  await client.report("theme", "dark"); // due in an hour or two
  assert.equal(timers.pending.size, 1);
  await client.close();
  assert.equal(timers.pending.size, 0);
  assert.equal(await client.report("theme", "dark"), "unavailable");
  assert.equal(timers.pending.size, 0);
  // The next run finds the report in the outbox and sets its timer at once; autoSend: false does not.
  const manual = new FakeTimers(clock);
  const off = await make(transport, clock, manual, { store: await FileStore.open(path), autoSend: false });
  await off.report("theme", "light");
  assert.equal(manual.pending.size, 0);
  await off.close();
  const again = await make(transport, clock, timers, { store: await FileStore.open(path) });
  assert.equal(timers.pending.size, 1);
  await timers.run(NOW + 3 * 3600);
  assert.equal(transport.reports().length, 2);
  await again.close();
  assert.equal(timers.pending.size, 0);
});

test("the platform timer never keeps a Node process alive", () => {
  const handle = platformTimers.set(() => assert.fail("cleared"), 60_000) as { hasRef(): boolean };
  assert.equal(handle.hasRef(), false);
  platformTimers.clear(handle);
});

test("in a browser a page being hidden sends what is due, once, and nothing that is not", async () => {
  class FakeDocument extends EventTarget {
    visibilityState = "visible";
  }
  const page = new FakeDocument();
  const global = globalThis as { document?: unknown };
  global.document = page;
  try {
    const clock = new Clock(NOW);
    const timers = new FakeTimers(clock); // never run here: only the page's events send
    const transport = new ScriptedTransport();
    const client = await make(transport, clock, timers);
    await client.report("theme", "dark");
    const hide = async () => {
      page.visibilityState = "hidden";
      page.dispatchEvent(new Event("visibilitychange"));
      await settle();
    };
    await hide(); // not due yet: nothing leaves
    assert.equal(transport.posts().length, 0);
    clock.now = (await client.waiting()).nextDue as number;
    page.visibilityState = "visible";
    page.dispatchEvent(new Event("visibilitychange")); // shown again: nothing
    await settle();
    assert.equal(transport.posts().length, 0);
    await hide();
    assert.equal(transport.posts().length, 1);
    await client.report("theme", "light");
    await client.close(); // a memory store has no next run: close sends it
    const sent = transport.posts().length;
    clock.now += 3 * 3600;
    await hide(); // the client is closed: it listens no more
    assert.equal(transport.posts().length, sent);
  } finally {
    delete global.document;
  }
});
