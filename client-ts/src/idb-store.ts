/**
 * The client state in a browser: one IndexedDB database per install (per origin, per name).
 *
 * A transaction of the {@link Store} is one IndexedDB `readwrite` transaction that reads the
 * state, runs the callback and writes it back, with `durability: "strict"` so that the
 * browser reports it complete only once it is on disk: the report's charge and its place in
 * the outbox commit together or not at all, and before anything can leave. IndexedDB runs
 * `readwrite` transactions over the same object store one after another, across the tabs and
 * workers of the origin too, so two tabs of one app never lose each other's charges.
 *
 * What a browser cannot promise, and what it means (client-ts/README.md, "In the browser"):
 * - **Clearing site data, or a private window, is a new install**: the ledger goes with it,
 *   so that person starts a new budget. A user can always do this; it is their data.
 * - **Eviction**: under storage pressure a browser may drop an origin's data unless the page
 *   asked for persistent storage ({@link IndexedDBStore.open}'s `persist`), and a user may
 *   refuse. Same effect as clearing.
 * - **No IndexedDB** (some embedded or locked-down browsers): `open` fails with a
 *   {@link StoreError}; a page may then use `MemoryStore`, which makes every page load a new
 *   install, so give it a small lifetime budget.
 */

import { Serial, StoreError, Unchanged, checkState, emptyState } from "./store.js";
import type { StateData, Store } from "./store.js";

const OBJECTS = "state";
const KEY = "state";

export interface IndexedDBStoreOptions {
  /** The database's name within the origin (one install per name). */
  name?: string;
  /** Ask the browser to keep the origin's storage under pressure (`navigator.storage.persist()`). */
  persist?: boolean;
  /** The IndexedDB factory (default: the global `indexedDB`). */
  factory?: IDBFactory;
}

function failure(what: string, error: DOMException | null): StoreError {
  // The DOMException's name says what went wrong (QuotaExceededError, VersionError, …); its
  // message never holds a value: the state holds none.
  return new StoreError(`IndexedDB ${what} failed${error ? `: ${error.name}` : ""}`);
}

export class IndexedDBStore implements Store {
  readonly persistent = true;
  private readonly serial = new Serial();
  private closed = false;

  private constructor(
    private readonly db: IDBDatabase,
    /** Whether the browser granted persistent storage (null: not asked, or not offered). */
    readonly persisted: boolean | null,
  ) {}

  /** Open (or create) the install's database. */
  static async open(options: IndexedDBStoreOptions = {}): Promise<IndexedDBStore> {
    const factory = options.factory ?? globalThis.indexedDB;
    if (factory === undefined) throw new StoreError("this browser offers no IndexedDB");
    let persisted: boolean | null = null;
    if (options.persist && globalThis.navigator?.storage?.persist) {
      persisted = await globalThis.navigator.storage.persist();
    }
    const db = await new Promise<IDBDatabase>((resolve, reject) => {
      const request = factory.open(options.name ?? "chorus-client", 1);
      request.onupgradeneeded = () => request.result.createObjectStore(OBJECTS);
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(failure("open", request.error));
      request.onblocked = () => reject(new StoreError("IndexedDB open blocked by another tab"));
    });
    const store = new IndexedDBStore(db, persisted);
    // Another tab deleting or upgrading the database: let it, and refuse from then on.
    db.onversionchange = () => {
      store.closed = true;
      db.close();
    };
    return store;
  }

  read<T>(fn: (state: Readonly<StateData>) => T): Promise<T> {
    return this.serial.run(() => this.transaction("readonly", (state) => new Unchanged(fn(state))));
  }

  update<T>(fn: (draft: StateData) => T | Unchanged<T>): Promise<T> {
    return this.serial.run(() => this.transaction("readwrite", fn));
  }

  /** Closes after the transactions already asked for (they complete and are durable). */
  async close(): Promise<void> {
    await this.serial.run(async () => {
      this.closed = true;
      this.db.close();
    });
  }

  /**
   * One IndexedDB transaction: read the state, run `fn` on it (synchronously: a transaction
   * commits by itself once no request is pending), write it back unless `fn` changed
   * nothing, and resolve once the browser says the transaction is durable.
   */
  private transaction<T>(mode: IDBTransactionMode, fn: (draft: StateData) => T | Unchanged<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.closed) {
        reject(new StoreError("the store is closed"));
        return;
      }
      let tx: IDBTransaction;
      try {
        tx = this.db.transaction(OBJECTS, mode, { durability: "strict" });
      } catch (error) {
        reject(failure("transaction", error as DOMException));
        return;
      }
      let outcome: { value: T } | null = null;
      let thrown: unknown = null;
      const objects = tx.objectStore(OBJECTS);
      const got = objects.get(KEY);
      got.onsuccess = () => {
        try {
          // The structured clone IndexedDB hands back is already a private copy: the draft.
          const draft = got.result === undefined ? emptyState() : checkState(got.result);
          const out = fn(draft);
          if (out instanceof Unchanged) {
            outcome = { value: out.result };
          } else {
            outcome = { value: out };
            objects.put(draft, KEY);
          }
        } catch (error) {
          thrown = error;
          tx.abort(); // nothing of this transaction is written
        }
      };
      tx.oncomplete = () => {
        if (outcome !== null) resolve(outcome.value);
        else reject(new StoreError("IndexedDB transaction completed without a result"));
      };
      tx.onabort = () => reject(thrown ?? failure("transaction", tx.error));
    });
  }
}
