/** What the client takes from the app besides the caps: the automatic sender's timers and a second spend counter. */

/** The automatic sender's timers: `set` returns a handle `clear` takes; `fn` returns a promise of the send it started (for tests' fake timers). */
export interface Timers {
  set(fn: () => unknown, ms: number): unknown;
  clear(handle: unknown): void;
}

/** setTimeout, `unref()`ed where the platform has it (Node): a pending send never keeps a process alive. */
export const platformTimers: Timers = {
  set(fn, ms) {
    const handle = setTimeout(fn, ms) as unknown as { unref?: () => void };
    handle.unref?.();
    return handle;
  },
  clear: (handle) => clearTimeout(handle as number),
};

/**
 * ε this install has spent over its life, kept by the app where backups and snapshots do not
 * restore it (Android's no-backup directory, a file excluded from iCloud backup, the app's own
 * server account; `FileSpendCounter` in Node). A restored old copy of the client's state
 * brings its ledger back as it was; this counter does not go back with it. `charge` must be
 * durable when it resolves: the report is stored, and may leave, only after it. Either may
 * throw (or reject) to refuse the report: report() then answers "suppressed", never throws.
 */
export interface SpendCounter {
  spent(): number | Promise<number>;
  charge(epsilon: number): void | Promise<void>;
}
