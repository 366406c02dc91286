/**
 * What one committed report costs a FileStore behind a backlog: bytes written and wall/CPU time
 * per commit. A benchmark, not a test (no assertion on time).
 *
 * usage: node bench/commit-cost.mjs [path/to/dist/src/node.js] [backlog=5000] [commits=50]
 *   The module defaults to this checkout's build (npm run build); give another checkout's
 *   dist/src/node.js to compare, e.g. the store before the journal.
 * Bytes written are read off the files: a snapshot whose inode changed was written whole; the
 * journal's growth (or, when truncated, its new size) was appended.
 */
import { mkdtempSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modulePath = new URL("../dist/src/node.js", import.meta.url).pathname, backlogArg = "5000", commitsArg = "50"] = process.argv.slice(2);
const { FileStore } = await import(pathToFileURL(resolve(modulePath)).href);
const backlog = Number(backlogArg);
const commits = Number(commitsArg);
const path = join(mkdtempSync(join(tmpdir(), "chorus-bench-")), "state.json");
const wire = "r".repeat(200); // about a k-RR report's JSON with its digest
const entry = (seq) => ({ seq, campaign: "c", wire, bucket: 1_767_225_600, due: 1_767_229_200, epsilon: 0.5 });
const size = (file) => {
  try {
    const s = statSync(file);
    return { ino: s.ino, size: s.size };
  } catch {
    return { ino: -1, size: 0 };
  }
};

const store = await FileStore.open(path);
await store.update((d) => {
  for (let i = 0; i < backlog; i++) d.outbox.push(entry(d.nextSeq++));
});
let written = 0;
let before = { snapshot: size(path), journal: size(`${path}.journal`) };
const cpu = process.cpuUsage();
const start = process.hrtime.bigint();
for (let i = 0; i < commits; i++) {
  await store.update((d) => {
    d.outbox.push(entry(d.nextSeq++));
    const spent = ((d.ledger.c ??= {}).lifetime ??= { epsilon: 0, reports: 0 });
    spent.epsilon += 0.5;
    spent.reports += 1;
  });
  const after = { snapshot: size(path), journal: size(`${path}.journal`) };
  if (after.snapshot.ino !== before.snapshot.ino) written += after.snapshot.size;
  written += after.journal.size >= before.journal.size ? after.journal.size - before.journal.size : after.journal.size;
  before = after;
}
const wall = Number(process.hrtime.bigint() - start) / 1e6;
const used = process.cpuUsage(cpu);
await store.close();
console.log(JSON.stringify({
  module: modulePath, backlog, commits, snapshotBytes: before.snapshot.size,
  bytesPerCommit: Math.round(written / commits),
  wallMsPerCommit: +(wall / commits).toFixed(2),
  cpuMsPerCommit: +((used.user + used.system) / 1000 / commits).toFixed(2),
}));
