/**
 * The file store's journal, compaction and format versions (src/file-store.ts, src/state-diff.ts).
 * The lock and the whole-state crash tests are in store.test.ts.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { checkState, emptyState, StoreError, type OutboxEntry, type StateData } from "../src/index.js";
import { DEFAULT_JOURNAL_FLOOR, FILE_FORMAT, FILE_VERSION, FileStore, MIGRATIONS, StoreVersionError } from "../src/node.js";
import { apply, diff } from "../src/state-diff.js";

import { scratchDir } from "./support.js";

const CHILD = new URL("../tools/store-child.js", import.meta.url).pathname;
const fresh = () => join(scratchDir("chorus-journal-"), "state", "chorus.json");
const child = (path: string, mode: string) => spawnSync(process.execPath, [CHILD, path, mode], { encoding: "utf8", timeout: 30_000 });
const lines = (path: string) => readFileSync(`${path}.journal`, "utf8").split("\n").filter((l) => l !== "");
const report = (seq: number, wire = "x".repeat(40)): OutboxEntry => ({ seq, campaign: "c", wire, bucket: 0, due: 0, epsilon: 0.5 });
const snapshotOf = (path: string) => JSON.parse(readFileSync(path, "utf8")) as { format: string; version: number; id: string; state: StateData };

/** A report queued: the outbox grows and the ledger is charged, in one transaction. */
async function queue(store: FileStore, wire?: string): Promise<void> {
  await store.update((d) => {
    d.outbox.push(report(d.nextSeq++, wire));
    const entry = (d.ledger.c ??= {}).lifetime ??= { epsilon: 0, reports: 0 };
    entry.epsilon += 0.5;
    entry.reports += 1;
  });
}

/** A seeded generator (mulberry32): the mutation sequences are the same at every run. */
function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One of the changes the client makes: queue, send, answer, plan, forget, configs, window. */
function mutate(d: StateData, random: () => number): void {
  const pick = Math.floor(random() * 8);
  const name = `c${Math.floor(random() * 4)}`;
  if (pick === 0 || d.outbox.length === 0) {
    d.outbox.push({ ...report(d.nextSeq++), campaign: name, due: Math.floor(random() * 1000) });
  } else if (pick === 1) {
    const [sent] = d.outbox.splice(Math.floor(random() * d.outbox.length), 1);
    d.sentLog.push({ campaign: sent!.campaign, wire: sent!.wire, epsilon: sent!.epsilon, status: "accepted", day: 20_000 });
  } else if (pick === 2) {
    d.plans[name] = { campaign: name, pool: "pinned", basis: "b", epsilon: 1, budget: random() < 0.5 ? Infinity : 4, reports: 1, slots: [1, 5, 9], first: 0, asked: null };
  } else if (pick === 3 && d.plans[name]) {
    d.plans[name]!.asked = Math.floor(random() * 1e6);
    d.plans[name]!.slots?.splice(0, 1, 2, 3);
  } else if (pick === 4) {
    delete d.plans[name];
    delete d.configs[name];
  } else if (pick === 5) {
    d.configs[name] = { body: `{"name":"${name}","v":${Math.floor(random() * 100)}}`, refresh: Math.floor(random() * 1e6) };
  } else if (pick === 6) {
    (d.dailySpend ??= {})[String(20_000 + Math.floor(random() * 3))] = random();
    d.sentLog.splice(0, Math.floor(random() * 3));
  } else {
    d.assignmentKey = random() < 0.5 ? "ab".repeat(32) : "cd".repeat(32);
    (d.slotsUsed[name] ??= {}).b = [Math.floor(random() * 10)];
  }
}

test("a change applied from its diff gives the changed state, over a thousand seeded changes", () => {
  const random = seeded(7);
  let state = emptyState();
  for (let i = 0; i < 1000; i++) {
    const next = structuredClone(state);
    mutate(next, random);
    const ops = diff(state, next);
    const replayed = JSON.parse(JSON.stringify(state)) as StateData; // a copy sharing nothing with either
    apply(replayed, structuredClone(ops));
    // JSON drops undefined and turns ∞ into null in both alike; the store maps `budget` itself.
    assert.deepEqual(JSON.parse(JSON.stringify(replayed)), JSON.parse(JSON.stringify(next)), `change ${i}`);
    state = next;
  }
  // The negative control: a diff replayed onto a state it does not follow is refused, not applied.
  const one = structuredClone(state);
  one.outbox.push(report(9001));
  const two = structuredClone(one);
  two.outbox.push(report(9002));
  assert.throws(() => apply(structuredClone(state), diff(one, two)), /splice out of range/);
  assert.throws(() => apply(emptyState(), [{ at: ["plans", "nowhere"], set: { asked: 1 } }]), /no such path/);
});

test("small commits append one journal line each and leave the snapshot untouched", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await queue(store); // the first commit of an install writes the snapshot
  const before = statSync(path);
  const snapshot = readFileSync(path, "utf8");
  for (let i = 1; i <= 5; i++) {
    const size = statSync(`${path}.journal`).size;
    await queue(store);
    assert.equal(lines(path).length, i);
    assert.ok(statSync(`${path}.journal`).size - size < 400, "one report's line, not the state");
  }
  const after = statSync(path);
  assert.deepEqual([after.ino, after.mtimeMs, readFileSync(path, "utf8")], [before.ino, before.mtimeMs, snapshot]);
  await store.close();
});

test("reopening replays the journal to the same state, ∞ budgets included", async () => {
  const path = fresh();
  const random = seeded(11);
  let store = await FileStore.open(path);
  for (let i = 0; i < 300; i++) {
    await store.update((d) => mutate(d, random));
    if (i % 100 === 99) {
      const held = await store.read((s) => structuredClone(s));
      await store.close();
      store = await FileStore.open(path);
      assert.deepEqual(await store.read((s) => s), held);
    }
  }
  assert.ok(lines(path).length > 100, "the commits went to the journal");
  assert.ok(Object.values(await store.read((s) => s.plans)).some((p) => p.budget === Infinity));
  await store.close();
});

test("a torn last journal line is dropped and the commits before it survive; a bad line before good ones is refused", async () => {
  const path = fresh();
  let store = await FileStore.open(path);
  for (let i = 0; i < 4; i++) await queue(store);
  await store.close();
  const journal = readFileSync(`${path}.journal`);
  assert.equal(lines(path).length, 3);
  truncateSync(`${path}.journal`, journal.length - 25); // the last line cut mid-record
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => [s.outbox.length, s.ledger.c?.lifetime?.reports]), [3, 3]); // never a half-applied one
  assert.equal(lines(path).length, 2, "the torn line removed before anything is appended after it");
  await queue(store);
  await store.close();
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => s.outbox.map((e) => e.seq)), [1, 2, 3, 4]);
  await store.close();

  // A whole last line whose checksum does not match (a garbled sector) is a torn line too.
  const good = readFileSync(`${path}.journal`, "utf8");
  writeFileSync(`${path}.journal`, good.replace(/"epsilon":2(,|})/, '"epsilon":9$1'));
  assert.notEqual(readFileSync(`${path}.journal`, "utf8"), good);
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => s.outbox.map((e) => e.seq)), [1, 2, 3]);
  await queue(store);
  await queue(store);
  await store.close();

  // The same damage with a good line after it is not a crash: the store refuses to open.
  const three = readFileSync(`${path}.journal`, "utf8");
  writeFileSync(`${path}.journal`, three.replace('"seq":3', '"seq":7'));
  await assert.rejects(FileStore.open(path), /damaged Chorus client state journal \(a bad line before good ones\)/);
  writeFileSync(`${path}.journal`, three);
  await (await FileStore.open(path)).close(); // and the refused open left the lock free
});

test("a crash between a compaction's rename and the journal's truncation applies nothing twice", async () => {
  const path = fresh();
  let store = await FileStore.open(path);
  for (let i = 0; i < 4; i++) await queue(store);
  await store.close();
  const oldJournal = readFileSync(`${path}.journal`);
  assert.equal(lines(path).length, 3);
  // The next commit compacts; then the files are put as a crash before the truncation leaves them.
  store = await FileStore.open(path, { journalLimit: 0 });
  await queue(store);
  await store.close();
  assert.equal(readFileSync(`${path}.journal`).length, 0);
  writeFileSync(`${path}.journal`, oldJournal);
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => [s.outbox.map((e) => e.seq), s.ledger.c?.lifetime]), [[1, 2, 3, 4, 5], { epsilon: 2.5, reports: 5 }]);
  assert.equal(readFileSync(`${path}.journal`).length, 0, "the old lines dropped before new ones follow them");
  await queue(store);
  await store.close();

  // The same moment reached by a real SIGKILL in a child process.
  const run = child(path, "crash-before-truncate");
  assert.equal(run.signal, "SIGKILL");
  assert.ok(lines(path).length > 0, "the crash left the old journal");
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => [s.outbox.length, s.ledger.c]), [6, { lifetime: { epsilon: 1, reports: 1 } }]);
  await store.close();
});

test("a process killed once its journal line is fsynced keeps that commit", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await queue(store);
  await store.close();
  const run = child(path, "crash-after-append");
  assert.equal(run.signal, "SIGKILL");
  assert.equal(lines(path).length, 1);
  const reopened = await FileStore.open(path);
  assert.deepEqual(await reopened.read((s) => [s.outbox.length, s.ledger.c]), [1, { lifetime: { epsilon: 1, reports: 1 } }]);
  await reopened.close();
});

test("after a journal write that failed, the next commit writes a snapshot, so the failed line is never replayed", async () => {
  const path = fresh();
  let fail = false;
  let store = await FileStore.open(path, {
    faults: {
      afterAppendWrite: () => {
        if (fail) throw new Error("disk full");
      },
    },
  });
  await queue(store);
  await queue(store);
  fail = true;
  await assert.rejects(queue(store), /disk full/); // its line is in the journal all the same
  fail = false;
  assert.equal(lines(path).length, 2);
  const inode = statSync(path).ino;
  await queue(store);
  assert.notEqual(statSync(path).ino, inode, "a snapshot, not a line after the failed one");
  await store.close();
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => [s.outbox.map((e) => e.seq), s.ledger.c?.lifetime?.reports]), [[1, 2, 3], 3]);
  await store.close();
});

test("the journal is compacted into a new snapshot when it would pass its bound", async () => {
  // An explicit bound: equal-sized lines, so the commit that compacts is known in advance.
  const path = fresh();
  const wide = "x".repeat(300);
  let store = await FileStore.open(path, { journalLimit: 2000 });
  await queue(store, wide);
  await queue(store, wide);
  const line = statSync(`${path}.journal`).size;
  const fits = Math.floor(2000 / line);
  assert.ok(2000 - fits * line > 8 && fits >= 3, `${line}-byte lines`); // clear of the bound by more than a digit's growth
  let inode = statSync(path).ino;
  for (let i = 2; i <= fits; i++) await queue(store, wide);
  assert.equal(lines(path).length, fits);
  assert.equal(statSync(path).ino, inode, "no compaction while the journal fits");
  await queue(store, wide);
  assert.notEqual(statSync(path).ino, inode, "compacted: a new snapshot renamed in");
  assert.equal(statSync(`${path}.journal`).size, 0);
  assert.equal(snapshotOf(path).state.outbox.length, fits + 2);
  await store.close();

  // The default bound: the snapshot's size (here over the 64 KiB floor).
  const big = fresh();
  store = await FileStore.open(big);
  await store.update((d) => {
    d.configs.big = { body: "b".repeat(DEFAULT_JOURNAL_FLOOR + 10_000), refresh: 0 };
  });
  const snapshotBytes = statSync(big).size;
  inode = statSync(big).ino;
  const wire = "w".repeat(8000);
  let commits = 0;
  let journal = 0;
  let bigLine = 0;
  for (; statSync(big).ino === inode; commits++) {
    assert.ok(commits < 20);
    journal = statSync(`${big}.journal`).size;
    await queue(store, wire);
    bigLine ||= statSync(`${big}.journal`).size;
    assert.ok(statSync(`${big}.journal`).size <= snapshotBytes);
  }
  // Compacted at the first commit whose line would have taken the journal past the snapshot's size.
  assert.ok(journal <= snapshotBytes && journal + bigLine + 16 > snapshotBytes, `${journal} + ${bigLine} against ${snapshotBytes}`);
  assert.ok(commits > 5);
  assert.equal(statSync(`${big}.journal`).size, 0);
  await store.close();
});

test("with a 5,000-report backlog a commit writes its report, not the backlog", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await store.update((d) => {
    for (let i = 0; i < 5000; i++) d.outbox.push(report(d.nextSeq++, "r".repeat(200)));
  });
  const snapshot = statSync(path).size;
  assert.ok(snapshot > 1_000_000);
  await queue(store, "r".repeat(200));
  const written = statSync(`${path}.journal`).size;
  assert.ok(written < 600, `${written} bytes for one report`);
  assert.ok(written * 1000 < snapshot, "a thousandth of what rewriting the state writes");
  await store.close();
  const reopened = await FileStore.open(path);
  assert.equal(await reopened.read((s) => s.outbox.length), 5001);
  await reopened.close();
});

test("a state written by a newer client is refused with a clear error and left as it is", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await queue(store);
  await queue(store);
  await store.close();
  const journal = readFileSync(`${path}.journal`);
  const newer = { ...snapshotOf(path), version: FILE_VERSION + 1, somethingNew: [1] };
  writeFileSync(path, JSON.stringify(newer));
  await assert.rejects(FileStore.open(path), (error: Error) => {
    assert.ok(error instanceof StoreVersionError && error instanceof StoreError);
    assert.match(error.message, /written by a newer client \(file version 3; this one reads up to file version 2\): upgrade the client/);
    return true;
  });
  assert.deepEqual(JSON.parse(readFileSync(path, "utf8")), newer);
  assert.deepEqual(readFileSync(`${path}.journal`), journal);

  // A bare state document (version 1) of a newer state format is refused the same way.
  writeFileSync(path, JSON.stringify({ ...emptyState(), format: "chorus.client-state/2" }));
  await assert.rejects(FileStore.open(path), /newer client \(state format 2; this one reads up to chorus\.client-state\/1\)/);
  assert.equal(JSON.parse(readFileSync(path, "utf8")).format, "chorus.client-state/2");
  await assert.rejects(FileStore.open(path), StoreVersionError); // still refused: the lock was released, nothing rewritten
});

test("a state file without a version (a client before the journal) opens as version 1 and is upgraded", async () => {
  const path = fresh();
  const old = { ...emptyState(), ledger: { c: { lifetime: { epsilon: 1.5, reports: 3 } } }, outbox: [report(1)], nextSeq: 2 };
  await (await FileStore.open(path)).close(); // the directory
  writeFileSync(path, JSON.stringify(old));
  writeFileSync(`${path}.journal`, ""); // and no journal of its own
  assert.deepEqual(MIGRATIONS[1]!(old), { format: FILE_FORMAT, version: 2, id: "", state: old });
  let store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => s), old);
  assert.equal(readFileSync(path, "utf8"), JSON.stringify(old), "opening writes nothing");
  await queue(store); // the first commit writes the current layout
  await store.close();
  const upgraded = snapshotOf(path);
  assert.deepEqual([upgraded.format, upgraded.version, upgraded.state.outbox.length], [FILE_FORMAT, FILE_VERSION, 2]);
  assert.match(upgraded.id, /^[0-9a-f]{16}$/);
  // A client before the journal reads the snapshot as a state document: refused, not read without its journal.
  assert.throws(() => checkState(upgraded), /not a Chorus client state \(format\)/);
  store = await FileStore.open(path);
  assert.deepEqual(await store.read((s) => s.ledger.c?.lifetime), { epsilon: 2, reports: 4 });
  await store.close();
});
