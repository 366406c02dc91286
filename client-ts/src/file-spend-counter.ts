/**
 * A {@link SpendCounter} in one small file, for Node (the Python client's `FileSpendCounter`):
 * the total ε written to `<file>.tmp`, fsynced, renamed over the file, the directory fsynced.
 *
 * Put it where backups and snapshots do not reach; next to the client's state it would be
 * restored together with the ledger and protect nothing. A missing file reads as 0 (a new
 * install); a damaged one (not a number ≥ 0) throws, so that every report is refused rather
 * than the budget guessed.
 */
import { mkdir, open, readFile, rename } from "node:fs/promises";
import { dirname } from "node:path";

import type { SpendCounter } from "./policy.js";
import { Serial } from "./store.js";

export class FileSpendCounter implements SpendCounter {
  private readonly serial = new Serial();

  constructor(readonly path: string) {}

  async spent(): Promise<number> {
    let text: string;
    try {
      text = await readFile(this.path, "ascii");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw error;
    }
    const value = /^\s*\d+(\.\d*)?(e[+-]?\d+)?\s*$/i.test(text) ? Number(text) : NaN;
    if (!(value >= 0 && Number.isFinite(value))) throw new RangeError(`${this.path} does not hold a spend count`);
    return value;
  }

  /** Adds `epsilon`, durably before it resolves; charges run one at a time. */
  charge(epsilon: number): Promise<void> {
    if (!(epsilon >= 0 && Number.isFinite(epsilon))) return Promise.reject(new RangeError("a charge is a finite ε >= 0"));
    return this.serial.run(async () => {
      const total = (await this.spent()) + epsilon;
      const directory = dirname(this.path);
      await mkdir(directory, { recursive: true, mode: 0o700 });
      const temporary = `${this.path}.tmp`;
      const file = await open(temporary, "w", 0o600);
      try {
        await file.writeFile(String(total), "ascii");
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temporary, this.path);
      // The rename itself must survive a power loss.
      const dir = await open(directory, "r");
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    });
  }
}
