import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { MemoryStore, StoreError, unchanged } from "../src/index.js";
import { FileStore, StoreLockedError } from "../src/node.js";

import { scratchDir } from "./support.js";

const CHILD = new URL("../tools/store-child.js", import.meta.url).pathname;
const fresh = () => join(scratchDir("chorus-store-"), "state", "chorus.json");
const child = (path: string, mode: string) => spawnSync(process.execPath, [CHILD, path, mode], { encoding: "utf8", timeout: 30_000 });

test("a transaction writes all of its changes or, when it throws or changes nothing, none", async () => {
  for (const store of [new MemoryStore(), await FileStore.open(fresh())]) {
    await store.update((d) => {
      d.ledger.a = { lifetime: { epsilon: 1, reports: 1 } };
      d.outbox.push({ seq: 1, campaign: "a", wire: "{}", bucket: 0, due: 0, epsilon: 1 });
    });
    await assert.rejects(store.update((d) => {
      d.ledger.a = { lifetime: { epsilon: 99, reports: 99 } };
      throw new Error("refused midway");
    }), /refused midway/);
    assert.equal(await store.update((d) => {
      d.outbox = [];
      return unchanged("kept");
    }), "kept");
    assert.deepEqual(await store.read((s) => [s.ledger.a?.lifetime?.epsilon, s.outbox.length]), [1, 1]);
    await store.close();
    await assert.rejects(store.read((s) => s), StoreError);
  }
});

test("the file store keeps its state across reopening, in a file only its owner can read", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await store.update((d) => {
    d.ledger.a = { lifetime: { epsilon: 2.5, reports: 2 } };
  });
  await store.close();
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(statSync(join(path, "..")).mode & 0o777, 0o700);
  const again = await FileStore.open(path);
  assert.equal(await again.read((s) => s.ledger.a?.lifetime?.epsilon), 2.5);
  await again.close();
});

test("a process killed between writing the temporary file and the rename leaves the old state", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await store.update((d) => {
    d.ledger.old = { lifetime: { epsilon: 0.5, reports: 1 } };
  });
  await store.close();
  const before = readFileSync(path, "utf8");
  const run = child(path, "crash-before-rename");
  assert.equal(run.signal, "SIGKILL");
  assert.ok(existsSync(`${path}.tmp`), "the crash left its temporary file");
  assert.equal(readFileSync(path, "utf8"), before); // the state file was never touched
  const reopened = await FileStore.open(path); // the dead owner's lock is broken, the .tmp dropped
  assert.deepEqual(await reopened.read((s) => Object.keys(s.ledger)), ["old"]);
  assert.ok(!existsSync(`${path}.tmp`));
  await reopened.close();
});

test("a process killed after the rename leaves the whole new state", async () => {
  const path = fresh();
  const run = child(path, "crash-after-rename");
  assert.equal(run.signal, "SIGKILL");
  const reopened = await FileStore.open(path);
  assert.deepEqual(await reopened.read((s) => s.ledger.c), { lifetime: { epsilon: 1, reports: 1 } });
  await reopened.close();
});

test("a second process is refused by the lock while the first holds the store", async () => {
  const path = fresh();
  const holder = spawn(process.execPath, [CHILD, path, "hold"], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    await new Promise<void>((resolve, reject) => {
      holder.stdout.once("data", (chunk: Buffer) => (String(chunk).trim() === "held" ? resolve() : reject(new Error(String(chunk)))));
      holder.once("exit", () => reject(new Error("the holder exited")));
    });
    await assert.rejects(FileStore.open(path), StoreLockedError);
    assert.equal(child(path, "open").stdout.trim(), "locked");
  } finally {
    holder.kill("SIGKILL");
    await new Promise((resolve) => holder.once("exit", resolve));
  }
  // The holder died without closing: its lock is stale and is broken.
  assert.equal(child(path, "open").stdout.trim(), "ok");
});

test("two stores in one process are refused too, and closing releases the lock", async () => {
  const path = fresh();
  const first = await FileStore.open(path);
  await assert.rejects(FileStore.open(path), StoreLockedError);
  await first.close();
  const second = await FileStore.open(path);
  await second.close();
});

test("a stale lock of a dead process is broken; a store whose lock was taken writes nothing", async () => {
  const path = fresh();
  const run = child(path, "die-holding");
  assert.equal(run.signal, "SIGKILL");
  const store = await FileStore.open(path);
  // Someone else took the lock meanwhile (a pid reused across containers, say).
  writeFileSync(`${path}.lock`, JSON.stringify({ pid: 1, host: "elsewhere", token: "x" }));
  await assert.rejects(store.update((d) => {
    d.ledger.a = { lifetime: { epsilon: 1, reports: 1 } };
  }), StoreLockedError);
  assert.ok(!existsSync(path), "nothing was written");
});

test("a damaged state file is refused rather than read as an empty ledger", async () => {
  const path = fresh();
  const store = await FileStore.open(path);
  await store.update((d) => {
    d.ledger.a = { lifetime: { epsilon: 1, reports: 1 } };
  });
  await store.close();
  writeFileSync(path, JSON.stringify({ format: "chorus.client-state/1", ledger: [] }));
  await assert.rejects(FileStore.open(path), /damaged/);
  writeFileSync(path, "{");
  await assert.rejects(FileStore.open(path), SyntaxError);
  // And a refused open leaves the lock free.
  writeFileSync(path, JSON.stringify({ format: "chorus.client-state/1", ledger: {}, plans: {}, slotsUsed: {}, configs: {}, outbox: [], sentLog: [], nextSeq: 1 }));
  await (await FileStore.open(path)).close();
});
