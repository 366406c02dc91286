/**
 * What one transaction changed in the state, as a few small operations (for `file-store.ts`'s
 * journal): a commit then writes bytes in proportion to its change, not to the state.
 *
 * Node-only in practice (the browser store writes the whole document in one IndexedDB put), so
 * it never reaches the core bundle. Pure: no I/O.
 *
 * An operation addresses a container by its path from the root (object keys and array
 * indexes) and either merges keys into it (`set`: new or changed values, whole), deletes keys
 * (`del`) or splices an array (`splice: [start, deleteCount]` with `items`). Values are carried
 * under their own key (`set: {budget: …}`), so the file store's JSON mapping of an unbounded
 * `budget` applies to them as it does to the snapshot.
 */

export type Path = (string | number)[];

export interface Op {
  at: Path;
  set?: { [key: string]: unknown };
  del?: string[];
  splice?: [number, number];
  items?: unknown[];
}

type Obj = { [key: string]: unknown };

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** Deep equality of two JSON-like values (what structuredClone of the state holds). */
export function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!same(a[i], b[i])) return false;
    return true;
  }
  if (!isObj(a) || !isObj(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const key of keys) if (!Object.hasOwn(b, key) || !same(a[key], b[key])) return false;
  return true;
}

/** The operations that turn `before` into `after` (both plain objects). */
export function diff(before: object, after: object): Op[] {
  const ops: Op[] = [];
  diffInto(before, after, [], ops);
  return ops;
}

function diffInto(before: unknown, after: unknown, at: Path, ops: Op[]): void {
  if (Array.isArray(before) && Array.isArray(after)) {
    diffArray(before, after, at, ops);
    return;
  }
  const a = before as Obj;
  const b = after as Obj;
  const del = Object.keys(a).filter((key) => !Object.hasOwn(b, key));
  const set: Obj = {};
  let changed = false;
  for (const key of Object.keys(b)) {
    const x = a[key];
    const y = b[key];
    if (Object.hasOwn(a, key) && same(x, y)) continue;
    if (Object.hasOwn(a, key) && ((isObj(x) && isObj(y)) || (Array.isArray(x) && Array.isArray(y)))) {
      diffInto(x, y, [...at, key], ops); // descend: a report appended writes the report, not the outbox
    } else {
      defineKey(set, key, y);
      changed = true;
    }
  }
  if (del.length > 0) ops.push({ at, del });
  if (changed) ops.push({ at, set });
}

/** One splice covering what lies between the common head and the common tail. */
function diffArray(a: unknown[], b: unknown[], at: Path, ops: Op[]): void {
  let head = 0;
  while (head < a.length && head < b.length && same(a[head], b[head])) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && same(a[a.length - 1 - tail], b[b.length - 1 - tail])) tail++;
  const removed = a.length - head - tail;
  const added = b.length - head - tail;
  if (removed === 0 && added === 0) return;
  const x = a[head];
  const y = b[head];
  if (removed === 1 && added === 1 && ((isObj(x) && isObj(y)) || (Array.isArray(x) && Array.isArray(y)))) {
    diffInto(x, y, [...at, head], ops); // one entry changed in place (a plan row's `asked`)
  } else {
    ops.push({ at, splice: [head, removed], items: b.slice(head, head + added) });
  }
}

/** A key set as an own data property, even `__proto__` (a name the state may hold as a key). */
function defineKey(target: object, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
}

/** Applies {@link diff}'s operations to `state` in place; throws on one that does not fit it. */
export function apply(state: object, ops: readonly Op[]): void {
  for (const op of ops) {
    if (!isObj(op) || !Array.isArray(op.at)) throw new Error("not an operation");
    let target: unknown = state;
    for (const key of op.at) {
      if (typeof target !== "object" || target === null || !Object.hasOwn(target, key)) throw new Error("no such path");
      target = (target as Obj)[key];
    }
    if (op.splice !== undefined) {
      const [start, count] = op.splice;
      if (!Array.isArray(target) || !Array.isArray(op.items) || !(start >= 0 && start + count <= target.length)) {
        throw new Error("splice out of range");
      }
      const rest = target.splice(start); // push in a loop: a spread of thousands of items may overflow the stack
      for (const item of op.items) target.push(item);
      for (const item of rest.slice(count)) target.push(item);
    } else if (isObj(target) && Array.isArray(op.del)) {
      for (const key of op.del) delete target[key];
    } else if (isObj(target) && isObj(op.set)) {
      for (const key of Object.keys(op.set)) defineKey(target, key, op.set[key]);
    } else {
      throw new Error("operation does not fit the state");
    }
  }
}
