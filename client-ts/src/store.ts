/**
 * The client's state and the transactional store that keeps it (docs/client.md, "State").
 *
 * The state is one small JSON document: the privacy ledger, each campaign's part of the plan,
 * the outbox of randomized reports, the sent log and the configs fetched and kept. It holds
 * no true value and no key from which one could be tested.
 *
 * A {@link Store} runs one synchronous callback per transaction over the whole document and
 * commits what it changed atomically and durably before its promise resolves. That shape is
 * what both targets give cheaply: in Node one journal line appended and fsynced (see `file-store.ts`);
 * in the browser one IndexedDB `readwrite` transaction (`durability: "strict"`), whose
 * callbacks cannot await anything but IndexedDB itself, which is why the callback is
 * synchronous. A transaction is the durability boundary: a report's charge and its place in
 * the outbox are written by the same one, so no report can leave uncharged and no charged
 * report is lost.
 */

/** Spent in one privacy period of one campaign. */
export interface LedgerEntry {
  epsilon: number;
  reports: number;
}

/**
 * One campaign's part of the install's privacy plan, fixed when it was first seen (see
 * `plan.ts`). `slots` are the drawn period indexes (null: a campaign without a calendar);
 * those before `first` were forfeited. `asked` is the latest clock time a report was asked
 * at (null: never): no period up to the one holding it opens again.
 */
export interface PlanRow {
  campaign: string;
  pool: "pinned" | "unpinned";
  basis: string;
  epsilon: number;
  budget: number;
  reports: number;
  slots: number[] | null;
  first: number;
  asked: number | null;
}

/** A randomized report waiting to leave: its exact bytes, sent and resent unchanged. */
export interface OutboxEntry {
  seq: number;
  campaign: string;
  wire: string;
  /** The report's time bucket (what the report carries anyway; never the second it was made). */
  bucket: number;
  /** When it may leave (Unix seconds): a random moment after its bucket, never from the value. */
  due: number;
  epsilon: number;
}

export type SentStatus = "accepted" | "duplicate" | "refused";

/** A report the collector answered for, as it left. */
export interface SentEntry {
  campaign: string;
  wire: string;
  epsilon: number;
  status: SentStatus;
  /** UTC day number of the answer. */
  day: number;
}

/** A config fetched and verified, kept so that it is never fetched again (pinned) or only a day later. */
export interface HeldConfig {
  body: string;
  refresh: number;
}

export const STATE_FORMAT = "chorus.client-state/1";

export interface StateData {
  format: typeof STATE_FORMAT;
  /** campaign name → privacy period ("lifetime", "day-N") → spent. Keyed by name, so a new config version continues it. */
  ledger: { [campaign: string]: { [period: string]: LedgerEntry } };
  plans: { [campaign: string]: PlanRow };
  /** campaign name → basis → the slots (period indexes) already charged. */
  slotsUsed: { [campaign: string]: { [basis: string]: number[] } };
  outbox: OutboxEntry[];
  nextSeq: number;
  sentLog: SentEntry[];
  configs: { [campaign: string]: HeldConfig };
  /** 32 random bytes (hex), drawn once: the install's discovery groups (docs/protocol.md). */
  assignmentKey?: string;
  /** UTC day number → ε charged that day: kept only for an app that set a rolling window (window.ts). */
  dailySpend?: { [day: string]: number };
}

export function emptyState(): StateData {
  return { format: STATE_FORMAT, ledger: {}, plans: {}, slotsUsed: {}, outbox: [], nextSeq: 1, sentLog: [], configs: {} };
}

export class StoreError extends Error {
  override name = "StoreError";
}

/** What a transaction returns when it changed nothing: the store then writes nothing. */
export class Unchanged<T> {
  constructor(readonly result: T) {}
}

export function unchanged<T>(result: T): Unchanged<T> {
  return new Unchanged(result);
}

/**
 * Transactional storage of the client state.
 *
 * `update(fn)` gives `fn` a private copy of the state to change; when `fn` returns, the copy
 * replaces the state atomically and durably, and only then does the promise resolve (with
 * `fn`'s result). If `fn` throws, or returns {@link unchanged}, nothing is written. `fn` must
 * be synchronous and must not keep the copy. Transactions of one store run one at a time.
 */
export interface Store {
  /** True when the state survives the process (a file, IndexedDB); false for memory. */
  readonly persistent: boolean;
  read<T>(fn: (state: Readonly<StateData>) => T): Promise<T>;
  update<T>(fn: (draft: StateData) => T | Unchanged<T>): Promise<T>;
  close(): Promise<void>;
}

/** Checks that a parsed document is a state this client wrote (a damaged one must not hand out budget). */
export function checkState(value: unknown): StateData {
  const s = value as StateData;
  const isObj = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObj(s) || s.format !== STATE_FORMAT) throw new StoreError("not a Chorus client state (format)");
  if (!isObj(s.ledger) || !isObj(s.plans) || !isObj(s.slotsUsed) || !isObj(s.configs)) {
    throw new StoreError("damaged Chorus client state (missing tables)");
  }
  if (!Array.isArray(s.outbox) || !Array.isArray(s.sentLog) || !Number.isSafeInteger(s.nextSeq)) {
    throw new StoreError("damaged Chorus client state (outbox)");
  }
  for (const periods of Object.values(s.ledger)) {
    for (const e of Object.values(periods)) {
      if (!(typeof e.epsilon === "number" && e.epsilon >= 0 && Number.isSafeInteger(e.reports))) {
        throw new StoreError("damaged Chorus client state (ledger)");
      }
    }
  }
  return s;
}

/** A serialized chain of transactions: one at a time, in call order. */
export class Serial {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const next = this.tail.then(task, task);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** State in memory, lost at exit: every process start is a new install (the Python client's
 * `ephemeral=True`). The transaction logic every store shares: a durable store overrides
 * {@link MemoryStore.commit} to write the draft before it becomes the state. */
export class MemoryStore implements Store {
  readonly persistent: boolean = false;
  protected closed?: boolean;
  protected readonly serial = new Serial();

  constructor(protected state: StateData = emptyState()) {}

  read<T>(fn: (state: Readonly<StateData>) => T): Promise<T> {
    return this.serial.run(async () => {
      this.checkOpen();
      return fn(this.state);
    });
  }

  update<T>(fn: (draft: StateData) => T | Unchanged<T>): Promise<T> {
    return this.serial.run(async () => {
      this.checkOpen();
      const draft = structuredClone(this.state);
      const out = fn(draft);
      if (out instanceof Unchanged) return out.result;
      await this.commit(draft);
      this.state = draft; // visible to readers (the sender) only once committed
      return out;
    });
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Makes the draft durable (nothing to do in memory). */
  protected commit(_draft: StateData): Promise<void> | void {}

  protected checkOpen(): void {
    if (this.closed) throw new StoreError("the store is closed");
  }
}
