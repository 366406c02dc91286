/**
 * The client state in one JSON file, for Node (import from `@chorus-ldp/client/node`).
 *
 * What it guarantees:
 *
 * * **Atomic and durable commits.** Every transaction writes the whole state to
 *   `<file>.tmp`, fsyncs it, renames it over `<file>` and fsyncs the directory, and only
 *   then resolves. A crash at any step leaves either the old state or the new one, never a
 *   mix: before the rename the old file is untouched (a leftover `.tmp` is ignored and
 *   removed on the next open); after it the new one is complete on disk. On a POSIX local
 *   file system (ext4, xfs, apfs) rename(2) is atomic; on network file systems it may not be.
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
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open, readFile, rename, rm, unlink } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname } from "node:path";

import { checkState, emptyState, MemoryStore, StoreError, type StateData } from "./store.js";

// A plan row's budget is ∞ without a lifetime budget (a rolling window's app): JSON has no ∞
// and would write null, which reads back as a budget of 0. Only that field is mapped, so no
// other value (a campaign named "Infinity") can turn into a number.
const boundlessBudget = (key: string, value: unknown): unknown => (key === "budget" && value === Infinity ? "Infinity" : value);
const unboundedBudget = (key: string, value: unknown): unknown => (key === "budget" && value === "Infinity" ? Infinity : value);

export class StoreLockedError extends StoreError {
  override name = "StoreLockedError";
}

/** Test hooks: called at the named step of a commit (a hook may throw or kill the process). */
export interface FileStoreFaults {
  afterTempWrite?: () => void;
  afterRename?: () => void;
}

interface LockOwner {
  pid: number;
  host: string;
  token: string;
}

export class FileStore extends MemoryStore {
  override readonly persistent = true;

  private constructor(
    readonly path: string,
    state: StateData,
    private readonly token: string,
    private readonly faults: FileStoreFaults,
  ) {
    super(state);
  }

  /** Opens (or creates) the state file, taking its lock. */
  static async open(path: string, options: { faults?: FileStoreFaults } = {}): Promise<FileStore> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const token = randomBytes(16).toString("hex");
    await takeLock(`${path}.lock`, token);
    try {
      await rm(`${path}.tmp`, { force: true }); // a commit that never reached its rename
      let state: StateData;
      try {
        state = checkState(JSON.parse(await readFile(path, "utf8"), unboundedBudget));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
        state = emptyState();
      }
      return new FileStore(path, state, token, options.faults ?? {});
    } catch (error) {
      await releaseLock(`${path}.lock`, token);
      throw error;
    }
  }

  override async close(): Promise<void> {
    await this.serial.run(async () => {
      if (this.closed) return;
      this.closed = true;
      await releaseLock(`${this.path}.lock`, this.token);
    });
  }

  protected override async commit(state: StateData): Promise<void> {
    await this.checkLock();
    const temporary = `${this.path}.tmp`;
    const handle = await open(temporary, "w", 0o600);
    try {
      await handle.writeFile(JSON.stringify(state, boundlessBudget), "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    this.faults.afterTempWrite?.();
    await rename(temporary, this.path);
    this.faults.afterRename?.();
    await syncDirectory(dirname(this.path)); // the rename itself must survive a power loss
  }

  private async checkLock(): Promise<void> {
    const owner = await readOwner(`${this.path}.lock`);
    if (owner?.token !== this.token) {
      throw new StoreLockedError("this store's lock was taken by another process: nothing written");
    }
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
