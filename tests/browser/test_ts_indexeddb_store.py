"""The TypeScript client's browser storage (client-ts/src/idb-store.ts) in the real Chromium:
a transaction is durable across page loads, all or nothing, serialized across the tabs of an
origin (no charge lost when two tabs report at once), each database name its own install, and
a damaged state refused rather than read as an empty ledger (which would hand out budget
again)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from helpers.ts_pages import open_app_page

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

def _open(ts_context: BrowserContext, ts_site: str) -> Page:
    page = open_app_page(ts_context, ts_site)
    page.on("pageerror", lambda error: pytest.fail(f"script error: {error}"))
    return page


def _run(page: Page, script: str, arg: Any = None) -> Any:
    return page.evaluate(script, arg)


_BUMP = """async ([name, count]) => {
  const store = await chorus.IndexedDBStore.open({name});
  // Every update at once: IndexedDB must serialize them, here and against the other tab.
  await Promise.all(Array.from({length: count}, () => store.update(d => { d.nextSeq += 1; })));
  await store.close();
}"""

_READ = """async (name) => {
  const store = await chorus.IndexedDBStore.open({name});
  try {
    return await store.read(s => ({nextSeq: s.nextSeq, outbox: s.outbox.length}));
  } catch (error) {
    return {error: error.name, message: error.message};
  } finally {
    await store.close();
  }
}"""


def test_a_transaction_is_durable_across_page_loads(ts_context: BrowserContext,
                                                    ts_site: str) -> None:
    page = _open(ts_context, ts_site)
    _run(page, """async () => {
      const store = await chorus.IndexedDBStore.open({name: "install"});
      await store.update(d => {
        d.nextSeq = 42;
        d.outbox.push({seq: 41, campaign: "c", wire: "{}", bucket: 0, due: 0, epsilon: 1});
      });
      await store.close();
    }""")
    page.reload()
    page.wait_for_function("window.ready === true")
    assert _run(page, _READ, "install") == {"nextSeq": 42, "outbox": 1}
    # Another name is another install: nothing of the first.
    assert _run(page, _READ, "another") == {"nextSeq": 1, "outbox": 0}


def test_a_transaction_that_throws_writes_nothing(ts_context: BrowserContext, ts_site: str) -> None:
    page = _open(ts_context, ts_site)
    outcome = _run(page, """async () => {
      const store = await chorus.IndexedDBStore.open({name: "atomic"});
      await store.update(d => { d.nextSeq = 7; });
      let thrown = null;
      try {
        await store.update(d => { d.nextSeq = 8; d.outbox.push({}); throw new RangeError("no"); });
      } catch (error) {
        thrown = error.name;
      }
      // The store goes on after a failed transaction.
      const after = await store.update(d => d.nextSeq);
      await store.close();
      return {thrown, after};
    }""")
    assert outcome == {"thrown": "RangeError", "after": 7}
    assert _run(page, _READ, "atomic") == {"nextSeq": 7, "outbox": 0}


def test_two_tabs_updating_at_once_lose_nothing(ts_context: BrowserContext, ts_site: str) -> None:
    first, second = _open(ts_context, ts_site), _open(ts_context, ts_site)
    count = 150
    first.evaluate(f"window.bumping = ({_BUMP})(['tabs', {count}])")
    second.evaluate(f"window.bumping = ({_BUMP})(['tabs', {count}])")
    first.evaluate("window.bumping")
    second.evaluate("window.bumping")
    assert _run(first, _READ, "tabs") == {"nextSeq": 1 + 2 * count, "outbox": 0}


def test_a_damaged_state_is_refused_not_read_as_empty(ts_context: BrowserContext,
                                                      ts_site: str) -> None:
    page = _open(ts_context, ts_site)
    _run(page, """async () => {
      const store = await chorus.IndexedDBStore.open({name: "damaged"});
      await store.update(d => { d.ledger.c = {lifetime: {epsilon: 3, reports: 3}}; });
      await store.close();
      // Damage it underneath the client: a ledger entry that is no longer a number.
      const db = await new Promise((ok, no) => {
        const r = indexedDB.open("damaged");
        r.onsuccess = () => ok(r.result);
        r.onerror = () => no(r.error);
      });
      await new Promise((ok, no) => {
        const tx = db.transaction("state", "readwrite");
        const objects = tx.objectStore("state");
        const got = objects.get("state");
        got.onsuccess = () => {
          got.result.ledger.c.lifetime.epsilon = "3";
          objects.put(got.result, "state");
        };
        tx.oncomplete = ok;
        tx.onabort = () => no(tx.error);
      });
      db.close();
    }""")
    refused = _run(page, _READ, "damaged")
    assert refused["error"] == "StoreError" and "ledger" in refused["message"], refused
