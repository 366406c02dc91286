/**
 * A second process for the FileStore tests (test/store.test.ts): FOR TESTS ONLY.
 *
 * usage: node store-child.js <state file> <mode>
 *   open                  open the store, print "ok" (or "locked"), close it
 *   hold                  open it, print "held", keep it until killed
 *   die-holding           open it and die (SIGKILL) without closing: a stale lock
 *   crash-before-rename   charge 1 ε and die (SIGKILL) after writing the temporary file
 *   crash-after-rename    charge 1 ε and die (SIGKILL) after the rename, before the directory fsync
 *   crash-before-truncate charge 1 ε and die (SIGKILL) after a compaction's snapshot is durable, before the journal is truncated
 *   crash-after-append    charge 1 ε and die (SIGKILL) once its journal line is fsynced, before the commit resolves
 * The crash-before-/after-rename and -truncate modes compact at every commit (journalLimit 0).
 */
import { FileStore, StoreLockedError } from "../src/node.js";

const [path, mode] = process.argv.slice(2) as [string, string];
const die = () => {
  process.kill(process.pid, "SIGKILL");
};
const faults = {
  "crash-before-rename": { afterTempWrite: die },
  "crash-after-rename": { afterRename: die },
  "crash-before-truncate": { beforeTruncate: die },
  "crash-after-append": { afterAppend: die },
}[mode] ?? {};
const journalLimit = mode === "crash-after-append" ? undefined : 0;
let store: FileStore;
try {
  store = await FileStore.open(path, { faults, journalLimit });
} catch (error) {
  if (error instanceof StoreLockedError) {
    process.stdout.write("locked\n");
    process.exit(0);
  }
  throw error;
}
if (mode === "open") {
  process.stdout.write("ok\n");
  await store.close();
} else if (mode === "hold") {
  process.stdout.write("held\n");
  setInterval(() => undefined, 1000);
} else if (mode === "die-holding") {
  die();
} else {
  await store.update((draft) => {
    draft.ledger.c = { lifetime: { epsilon: 1, reports: 1 } };
  });
  process.stdout.write("not reached\n");
}
