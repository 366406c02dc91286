/**
 * The client state in a snapshot file and a journal beside it, for Node (import from
 * `@chorus-ldp/client/node`).
 *
 * What it guarantees:
 *
 * * **Commits cost their change, not the state.** `<file>` is a snapshot of the state;
 *   `<file>.journal` holds, one line each, what every transaction since then changed
 *   (`state-diff.ts`), with a checksum. A commit appends its line and fsyncs the journal, and
 *   only then resolves: a report queued behind a backlog of thousands writes a few hundred
 *   bytes, not the backlog. Opening replays the journal onto the snapshot.
 * * **Compaction.** When the journal would grow past the snapshot's size (and at least
 *   {@link DEFAULT_JOURNAL_FLOOR} bytes), the commit writes the whole new state instead: to
 *   `<file>.tmp`, fsynced, renamed over `<file>`, the directory fsynced, then the journal
 *   truncated. Every snapshot carries a fresh random `id` and every journal line the `id` of the
 *   snapshot it follows, so after a crash between the rename and the truncation the old lines
 *   are recognised as already folded in and skipped: nothing is applied twice. Written bytes
 *   stay within about twice the changes' own.
 * * **Atomic and durable commits.** A crash at any step leaves the old state or the new one,
 *   never a mix. A torn last journal line (cut short, or a checksum that does not match) is a
 *   commit that never resolved: it is dropped on the next open, never half applied. A bad line
 *   with good ones after it is damage, and the store refuses to open (a damaged state must not
 *   hand out budget). Before the rename of a compaction the old snapshot is untouched (a
 *   leftover `.tmp` is removed on the next open). On a POSIX local file system (ext4, xfs,
 *   apfs) rename(2) is atomic; on network file systems it may not be.
 * * **Versioned.** The snapshot says which layout it is (`version`, {@link FILE_VERSION}). A
 *   newer one than this client knows is refused with a {@link StoreVersionError} and left as it
 *   is; an older one is upgraded through {@link MIGRATIONS} (version 1, a bare state document
 *   without `version`, is what clients before the journal wrote) and rewritten at the first
 *   commit. Those older clients refuse today's snapshot (its `format` is not theirs) rather
 *   than read it without its journal.
 * * **One process at a time.** Opening takes `<file>.lock`, created exclusively (O_EXCL)
 *   with the owner's pid, host and a random token, and keeps it until {@link FileStore.close}.
 *   A second process (or a second store in this one) is refused with {@link StoreLockedError}.
 *   A lock left by a process that died on this host (its pid no longer exists) is broken.
 *   Before every commit the owner checks that the lock still holds its token, so a store
 *   whose lock was broken by mistake (say, a pid reused across a container boundary) refuses
 *   to write rather than overwrite another owner's state. It is an advisory lock between
 *   Chorus clients; it does not stop other programs from writing the file.
 * * **Private.** The directory is created 0700 and the files 0600.
 *
 * It does not protect against a restored backup of the file (docs/threat-model.md, rule 6):
 * a copy brings its ledger back with it.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open, readFile, rename, rm, unlink, type FileHandle } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname } from "node:path";

import { apply, diff, type Op } from "./state-diff.js";
import { checkState, emptyState, MemoryStore, STATE_FORMAT, StoreError, type StateData } from "./store.js";

// A plan row's budget is ∞ without a lifetime budget (a rolling window's app): JSON has no ∞
// and would write null, which reads back as a budget of 0. Only that field is mapped, so no
// other value (a campaign named "Infinity") can turn into a number. Journal lines carry values
// under their own keys (state-diff.ts), so the same mapping serves them.
const boundlessBudget = (key: string, value: unknown): unknown => (key === "budget" && value === Infinity ? "Infinity" : value);
const unboundedBudget = (key: string, value: unknown): unknown => (key === "budget" && value === "Infinity" ? Infinity : value);

/** The snapshot's `format`: not a state document's, so that a client before the journal refuses it. */
export const FILE_FORMAT = "chorus.client-state-file";
/** The snapshot layout this client writes: 2, a state with its journal (1: a bare state document). */
export const FILE_VERSION = 2;
/** The journal is compacted once it would outgrow the snapshot, and never below this size. */
export const DEFAULT_JOURNAL_FLOOR = 64 * 1024;

interface Snapshot {
  format: typeof FILE_FORMAT;
  version: typeof FILE_VERSION;
  /** Random, new at every compaction: the journal lines that follow this snapshot carry it. */
  id: string;
  state: StateData;
}

/**
 * Upgrades of older snapshot layouts, each from its version to the next. Version 1 (what
 * clients before the journal wrote, without a `version` field) is the bare state document; it
 * gets an `id` no journal line carries, so no journal can be replayed onto it.
 */
export const MIGRATIONS: { [version: number]: (document: unknown) => unknown } = {
  1: (state) => ({ format: FILE_FORMAT, version: 2, id: "", state }),
};

export class StoreLockedError extends StoreError {
  override name = "StoreLockedError";
}

/** A state written by a newer client than this one: refused, and left as it is. */
export class StoreVersionError extends StoreError {
  override name = "StoreVersionError";
}

/** Test hooks: called at the named step of a commit (a hook may throw or kill the process). */
export interface FileStoreFaults {
  /** Compaction: the temporary snapshot written and fsynced, before the rename. */
  afterTempWrite?: () => void;
  /** Compaction: after the rename, before the directory fsync. */
  afterRename?: () => void;
  /** Compaction: the new snapshot durable, before the journal is truncated. */
  beforeTruncate?: () => void;
  /** A journal line written, before its fsync. */
  afterAppendWrite?: () => void;
  /** A journal line appended and fsynced, before the commit resolves. */
  afterAppend?: () => void;
}

export interface FileStoreOptions {
  faults?: FileStoreFaults;
  /**
   * Compact once the journal would pass this many bytes (default: the snapshot's size, at
   * least {@link DEFAULT_JOURNAL_FLOOR}). 0 writes the whole state at every commit.
   */
  journalLimit?: number;
}

interface LockOwner {
  pid: number;
  host: string;
  token: string;
}

/** One journal line: `<checksum> <json>\n`, the checksum the first 16 hex digits of the json's SHA-256. */
function journalLine(record: { id: string; seq: number; ops: Op[] }): Buffer {
  const json = JSON.stringify(record, boundlessBudget);
  return Buffer.from(`${checksum(json)} ${json}\n`, "utf8");
}

const checksum = (json: string): string => createHash("sha256").update(json).digest("hex").slice(0, 16);

/** The snapshot's document, upgraded to {@link FILE_VERSION}; a newer one is refused. */
export function readSnapshot(document: unknown): Snapshot {
  const fields = typeof document === "object" && document !== null && !Array.isArray(document) ? (document as { version?: unknown }) : {};
  let version: unknown = "version" in fields ? fields.version : 1;
  if (!Number.isSafeInteger(version) || (version as number) < 1) throw new StoreError("not a Chorus client state file (version)");
  if ((version as number) > FILE_VERSION) throw newer(`file version ${version as number}`, `file version ${FILE_VERSION}`);
  for (; (version as number) < FILE_VERSION; version = (version as number) + 1) document = MIGRATIONS[version as number]!(document);
  const snapshot = document as Snapshot;
  if (snapshot.format !== FILE_FORMAT || typeof snapshot.id !== "string") throw new StoreError("not a Chorus client state file (format)");
  const stateVersion = /^chorus\.client-state\/(\d+)$/.exec(String((snapshot.state as Partial<StateData> | null)?.format))?.[1];
  if (stateVersion !== undefined && Number(stateVersion) > 1) throw newer(`state format ${stateVersion}`, STATE_FORMAT);
  checkState(snapshot.state);
  return snapshot;
}

const newer = (found: string, known: string) =>
  new StoreVersionError(
    `the Chorus client state was written by a newer client (${found}; this one reads up to ${known}): upgrade the client; the state is left as it is`,
  );

/** Replays the journal's lines onto the snapshot's state; returns where the good lines end. */
function replay(snapshot: Snapshot, journal: Buffer): { end: number; seq: number; stale: boolean } {
  let start = 0;
  let seq = 0;
  let stale = false;
  while (start < journal.length) {
    const newline = journal.indexOf(0x0a, start);
    const last = newline === -1 || newline === journal.length - 1;
    let record: { id: string; seq: number; ops: Op[] } | undefined;
    if (newline !== -1) {
      const text = journal.toString("utf8", start, newline);
      const space = text.indexOf(" ");
      const json = text.slice(space + 1);
      if (space === 16 && text.slice(0, space) === checksum(json)) {
        try {
          record = JSON.parse(json, unboundedBudget) as { id: string; seq: number; ops: Op[] };
        } catch {
          record = undefined;
        }
      }
    }
    if (record === undefined) {
      // The last line cut short or garbled: a commit that never resolved; drop it. Anywhere else: damage.
      if (last) break;
      throw new StoreError("damaged Chorus client state journal (a bad line before good ones)");
    }
    if (record.id !== snapshot.id) {
      // Lines of an earlier snapshot (a crash between a compaction's rename and its truncation):
      // already in this snapshot. They can only come before this snapshot's own.
      if (seq > 0) throw new StoreError("damaged Chorus client state journal (an earlier snapshot's line after this one's)");
      stale = true;
    } else {
      if (record.seq !== seq + 1) throw new StoreError("damaged Chorus client state journal (a line missing)");
      try {
        apply(snapshot.state, record.ops);
      } catch {
        throw new StoreError("damaged Chorus client state journal (a change that does not fit the state)");
      }
      seq = record.seq;
    }
    start = newline + 1;
  }
  return { end: start, seq, stale };
}

export class FileStore extends MemoryStore {
  override readonly persistent = true;
  private journal?: FileHandle;
  /** True when the next commit must write a snapshot (none yet, an older layout, or a failed write). */
  private needsSnapshot: boolean;

  private constructor(
    readonly path: string,
    state: StateData,
    private snapshotId: string,
    private snapshotBytes: number,
    private journalBytes: number,
    private seq: number,
    private readonly token: string,
    private readonly options: FileStoreOptions,
  ) {
    super(state);
    this.needsSnapshot = snapshotId === "";
  }

  /** Opens (or creates) the state file, taking its lock. */
  static async open(path: string, options: FileStoreOptions = {}): Promise<FileStore> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const token = randomBytes(16).toString("hex");
    await takeLock(`${path}.lock`, token);
    try {
      await rm(`${path}.tmp`, { force: true }); // a compaction that never reached its rename
      let text: string;
      try {
        text = await readFile(path, "utf8");
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
        // A new install. A journal without a snapshot is left from a state file removed by
        // hand (a reset): it belongs to no state, and must not be replayed onto the new one.
        await rm(`${path}.journal`, { force: true });
        return new FileStore(path, emptyState(), "", 0, 0, 0, token, options);
      }
      const snapshot = readSnapshot(JSON.parse(text, unboundedBudget));
      let journal: Buffer;
      try {
        journal = await readFile(`${path}.journal`);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
        journal = Buffer.alloc(0);
      }
      const { end, seq, stale } = replay(snapshot, journal);
      const kept = stale ? 0 : end;
      if (kept < journal.length) await truncateFile(`${path}.journal`, kept); // before anything is appended after it
      checkState(snapshot.state);
      return new FileStore(path, snapshot.state, snapshot.id, Buffer.byteLength(text), kept, seq, token, options);
    } catch (error) {
      await releaseLock(`${path}.lock`, token);
      throw error;
    }
  }

  override async close(): Promise<void> {
    await this.serial.run(async () => {
      if (this.closed) return;
      this.closed = true;
      await this.journal?.close();
      await releaseLock(`${this.path}.lock`, this.token);
    });
  }

  protected override async commit(draft: StateData): Promise<void> {
    await this.checkLock();
    if (!this.needsSnapshot) {
      const ops = diff(this.state, draft);
      if (ops.length === 0) return;
      const line = journalLine({ id: this.snapshotId, seq: this.seq + 1, ops });
      const limit = this.options.journalLimit ?? Math.max(this.snapshotBytes, DEFAULT_JOURNAL_FLOOR);
      if (this.journalBytes + line.length <= limit) {
        await this.append(line);
        return;
      }
    }
    await this.compact(draft);
  }

  private async append(line: Buffer): Promise<void> {
    try {
      this.journal ??= await open(`${this.path}.journal`, "a", 0o600);
      await this.journal.writeFile(line);
      this.options.faults?.afterAppendWrite?.();
      await this.journal.sync();
    } catch (error) {
      // Part of the line may be on disk: the next commit writes a snapshot, which makes it stale.
      this.needsSnapshot = true;
      throw error;
    }
    this.journalBytes += line.length;
    this.seq += 1;
    this.options.faults?.afterAppend?.();
  }

  /** Writes the whole state as a new snapshot and empties the journal. */
  private async compact(state: StateData): Promise<void> {
    this.needsSnapshot = true; // until the journal is empty again
    const id = randomBytes(8).toString("hex");
    const text = JSON.stringify({ format: FILE_FORMAT, version: FILE_VERSION, id, state } satisfies Snapshot, boundlessBudget);
    const temporary = `${this.path}.tmp`;
    const handle = await open(temporary, "w", 0o600);
    try {
      await handle.writeFile(text, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    const faults = this.options.faults ?? {};
    faults.afterTempWrite?.();
    await rename(temporary, this.path);
    faults.afterRename?.();
    await syncDirectory(dirname(this.path)); // the rename itself must survive a power loss
    this.snapshotId = id;
    this.snapshotBytes = Buffer.byteLength(text);
    faults.beforeTruncate?.();
    // The old lines carry the old id: were this truncation lost, they would be skipped.
    this.journal ??= await open(`${this.path}.journal`, "a", 0o600);
    await this.journal.truncate(0);
    await this.journal.sync();
    this.journalBytes = 0;
    this.seq = 0;
    this.needsSnapshot = false;
  }

  private async checkLock(): Promise<void> {
    const owner = await readOwner(`${this.path}.lock`);
    if (owner?.token !== this.token) {
      throw new StoreLockedError("this store's lock was taken by another process: nothing written");
    }
  }
}

async function truncateFile(path: string, length: number): Promise<void> {
  const handle = await open(path, "r+");
  try {
    await handle.truncate(length);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function syncDirectory(directory: string): Promise<void> {
  let handle;
  try {
    handle = await open(directory, constants.O_RDONLY);
  } catch {
    return; // a platform that cannot open directories (Windows) syncs renames itself
  }
  try {
    await handle.sync();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "EINVAL" && code !== "EPERM" && code !== "EISDIR") throw error;
  } finally {
    await handle.close();
  }
}

async function readOwner(lockPath: string): Promise<LockOwner | undefined> {
  try {
    const owner = JSON.parse(await readFile(lockPath, "utf8")) as LockOwner;
    return typeof owner === "object" && owner !== null ? owner : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"; // exists, another user's
  }
}

async function takeLock(lockPath: string, token: string): Promise<void> {
  const me: LockOwner = { pid: process.pid, host: hostname(), token };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const handle = await open(lockPath, "wx", 0o600);
      try {
        await handle.writeFile(JSON.stringify(me), "utf8");
        await handle.sync();
      } finally {
        await handle.close();
      }
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const owner = await readOwner(lockPath);
    const stale =
      owner !== undefined && owner.host === me.host && Number.isSafeInteger(owner.pid) && owner.pid !== process.pid && !alive(owner.pid);
    if (!stale || attempt > 0) break;
    // The owner died on this host: move its lock aside (atomic) and try once more.
    const aside = `${lockPath}.stale-${token}`;
    try {
      await rename(lockPath, aside);
      await unlink(aside);
    } catch {
      // another process broke it first; the next attempt tells who holds it now
    }
  }
  throw new StoreLockedError(
    "the Chorus client state is in use by another process (or another client in this one): one state file, one client",
  );
}

async function releaseLock(lockPath: string, token: string): Promise<void> {
  const owner = await readOwner(lockPath);
  if (owner?.token === token) await rm(lockPath, { force: true });
}
