"""Discovery of heavy hitters: ``python benchmarks/heavy_hitters.py [--quick]`` (``make bench``).

Issue 16: how well Chorus's discovery mechanisms (``pem``, ``treehist`` and ``auto``, which picks
one of them) find the most frequent strings without a candidate list, beside pure-LDP 1.2.0's
heavy-hitter implementations (PEM, TreeHist, Apple's SFP) on the same data.

* Data: a population of D distinct lowercase words of 3–8 letters (``max_bytes`` = 8), seeded
  per (D, seed), in random order; rank r has probability ∝ r^−s (Zipf, s ∈ {1.1, 1.5}); n
  users draw their word from it. Every method sees the same n words. The truth is the sample's
  own counts: the true top k are the k most counted words (a word tied with the k-th counts as
  a true top-k word, so ties cannot cost a hit).
* Grid: s ∈ {1.1, 1.5} × D ∈ {10⁴, 10⁵, 10⁶} × n ∈ {10⁵, 10⁶} × ε ∈ {1, 2, 4, 8}; ``SEEDS``
  seeds per setting (a fresh population and sample each), k ∈ {10, 50}.
* Chorus: the campaign an analyst would create, ``{"top": k}`` and every other parameter at its
  default (``keep`` = max(2k, 32) candidates per step), over ``max_bytes`` 8 with the words'
  alphabet declared ([a-z], as the peers are told it); ``bytes`` is ``auto`` without it. Reports
  are drawn in bulk by ``chorus_collector.design.simulate`` (the real client's distribution,
  vectorized), folded by the estimator's ``map`` and answered by ``finalize``. ``auto`` resolves
  to PEM or TreeHist (``chorus_shared.selection.choose_discovery``); where its campaign equals
  that mechanism's, its row *is* that run (same reports), labelled with the choice.
* Peers (the ``bench`` extra): pure-LDP's own ``PEMClient``/``Server``, ``TreeHistClient``/
  ``Server``, ``SFPClient``/``Server``, one report at a time, configured as follows (read from
  their code, not their defaults, which cannot run here):

  - Alphabet: the 26 letters and ``#``; every word is padded with ``#`` to 8 symbols before the
    peers see it, so they handle fixed-length strings over 27 symbols (their own padding
    character never occurs). TreeHist's candidates never contain its padding character, so
    without this it could not find a word shorter than 8 letters.
  - Frequency oracle: pure-LDP's default, OLH (``LHServer``), keeps one counter per domain
    value and loops over all of them per report (27⁸ values here): it cannot run. Its
    sketch-based oracle, Apple's count-mean sketch (``CMSClient``/``CMSServer``, the one SFP
    is built around), hashes the strings and runs for all three: width ``CMS_WIDTH``,
    ``CMS_HASHES`` hash functions (its hash collisions then add a standard deviation of at most
    ~5·10⁻⁴ to a frequency, below its privacy noise except at ε = 8). CMS is ε-LDP with a
    variance ``cms_over_olh`` times OLH's (printed; 1.1× at ε = 1, 14× at ε = 8): this is
    pure-LDP as it can be used on strings, not OLH.
  - The walk: PEM ``start_length`` 0 and ``fragment_length`` 2 (4 groups, each step adds two
    symbols: 729 continuations of each survivor); TreeHist ``fragment_length`` 2 (4 levels);
    SFP fragments of 2 symbols (4 offsets, as Apple's deployment). Each keeps ``keep``
    candidates per step (``find_heavy_hitters(k=keep)``, the same ``keep`` as Chorus); their
    answer is ranked by its own final estimates and cut at k. Top-k mode needs no threshold,
    so pure-LDP's threshold-units bug (MECHANISMS-2.md §3.2) does not arise; SFP's
    non-injective (hash, fragment) index map (§3.3) is used only with non-sketch oracles, so
    it does not arise with CMS either.
  - One aggregation serves both k (the reports do not depend on k): a query's server time is
    the aggregation plus its own ``find_heavy_hitters``.
  - They are pure Python (~10–50 µs a report, ~60 µs per candidate estimate): they run at
    ``PEER_SETTINGS`` only, ``PEER_SEEDS`` seeds, and a run projected past ``--peer-budget``
    seconds is skipped with its reason in the output.
  - pure-LDP 1.2.0's ``FreqOracleServer`` calls ``np.zeros(None)`` for sketch oracles, which
    numpy 2 refuses (numpy 1 made a 0-d array): :func:`_numpy2_shim` maps that one call to
    ``np.zeros(())``, nothing else.

* Metrics, per (method, k): precision@k and recall@k of the answer's first k values against
  the true top k; the mean relative error |f̂ − f|/f of the true top-k values found; NCR
  (MECHANISMS-2.md §8.8: each true top-k value found scores its rank weight, k for the most
  frequent down to 1, over k(k+1)/2); wall time split into client (Chorus: ``simulate``; peers:
  their ``privatise`` loop) and server (Chorus: ``map`` + ``finalize``; peers: ``aggregate``
  loop + ``find_heavy_hitters``). Means over seeds. Beside it, Chorus's real pure-Python client
  (``mechanism.randomize``) timed per report on ``CLIENT_SAMPLE`` values: the end-to-end
  comparison uses the vectorized simulation, and the table shows what the pure-Python client
  would add at that n. Chorus's answers are also checked for values flagged ``detected`` that
  nobody in the sample holds (Holm's family-wise 5%: at most that share of answers).
* Targets: top-10 recall ≥ 0.9 at ε = 2, n = 10⁶, s = 1.1, D = 10⁵; Chorus (``auto``, what a
  user gets) at least as good as the best peer (the highest recall@k) at every setting they
  share, compared paired by seed (both ran on the same words and users: the mean difference
  and its standard error from the seeds' spread), a gap beyond twice that standard error
  flagged either way; and ≥ 10× faster end to end than that best peer.

Writes ``bench-results/heavy_hitters.json``. Runs go to ``--workers`` processes (default 2);
``--checkpoint`` keeps every finished run, so a grid can be resumed or summarized part-way.
The full grid took 49 minutes on two cores shared with a test run (237 runs), ``--quick`` about
three.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import sys
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chorus_collector.cli.progress import progress_bar
from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.estimators.base import Query
from chorus_collector.results.estimates import FrequencyEstimate
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.mechanisms.discovery import PrefixDiscovery

ROOT = Path(__file__).resolve().parents[1]
ZIPF = (1.1, 1.5)
DOMAINS = (10_000, 100_000, 1_000_000)
SIZES = (100_000, 1_000_000)
EPSILONS = (1.0, 2.0, 4.0, 8.0)
KS = (10, 50)
SEEDS = 3
MAX_BYTES = 8
SHORTEST = 3
#: Chorus's campaigns declare the words' alphabet, as the peers are told it (below); ``bytes``
#: is ``auto`` without it (any UTF-8 string), for reference: what a campaign that does not
#: know its alphabet gets.
LETTERS = "abcdefghijklmnopqrstuvwxyz"
CHORUS = ("pem", "treehist", "bytes")
#: (zipf, D, n, ε) of the recall target.
TARGET = (1.1, 100_000, 1_000_000, 2.0)
TARGET_RECALL = 0.9
TARGET_SPEEDUP = 10.0
CLIENT_SAMPLE = 2_000  # values Chorus's pure-Python client is timed on

# -- the peers' configuration ------------------------------------------------------------------
PAD = "#"
ALPHABET = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [PAD]
CMS_WIDTH = 1024
CMS_HASHES = 128
#: Symbols each step adds (PEM, TreeHist), and per SFP fragment.
FRAGMENT = {"PEM": 2, "TreeHist": 2, "SFP": 2}
PEERS = ("PEM", "TreeHist", "SFP")
#: Seeds per peer at n ≤ 10⁵ (1 above): SFP's query alone takes ~1 minute.
PEER_SEEDS = {"PEM": 5, "TreeHist": 3, "SFP": 1}
PEER_BUDGET_S = 300.0
#: Where the peers run: n = 10⁵ over D = 10⁵ at every (s, ε), and the recall target's setting.
PEER_SETTINGS = tuple([(s, 100_000, 100_000, e) for s in ZIPF for e in EPSILONS] + [TARGET])

Setting = tuple[float, int, int, float]  # (zipf s, D, n, ε)


@dataclass(frozen=True)
class Grid:
    zipf: tuple[float, ...] = ZIPF
    domains: tuple[int, ...] = DOMAINS
    sizes: tuple[int, ...] = SIZES
    epsilons: tuple[float, ...] = EPSILONS
    seeds: int = SEEDS
    peer_settings: tuple[Setting, ...] = PEER_SETTINGS


QUICK = Grid(domains=(10_000,), sizes=(100_000,), epsilons=(2.0, 4.0), seeds=2,
             peer_settings=((1.1, 10_000, 100_000, 4.0),))


# -- data -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def population(domain: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """D distinct lowercase words of 3–8 letters in random order (rank = position), and their
    encodings (UTF-8 bytes zero-padded to 8, big-endian: the discovery mechanisms' ``encode``)."""
    rng = np.random.default_rng([seed, domain, 16])
    chosen: dict[bytes, None] = {}
    while len(chosen) < domain:
        batch = max(1024, 2 * (domain - len(chosen)))
        lengths = rng.integers(SHORTEST, MAX_BYTES + 1, size=batch)
        letters = rng.integers(ord("a"), ord("z") + 1, size=(batch, MAX_BYTES), dtype=np.uint8)
        letters[np.arange(MAX_BYTES)[None, :] >= lengths[:, None]] = 0
        for word in letters.view(f"S{MAX_BYTES}").ravel().tolist():
            chosen.setdefault(word)
            if len(chosen) == domain:
                break
    raw = np.array(list(chosen), dtype=f"S{MAX_BYTES}")
    rng.shuffle(raw)
    codes = np.frombuffer(raw.tobytes(), dtype=">u8").astype(np.uint64)
    return raw.astype(f"U{MAX_BYTES}"), codes


@functools.lru_cache(maxsize=2)
def letter_codes(domain: int, seed: int) -> np.ndarray:
    """The population's encodings over the declared alphabet: each letter's place in it plus
    one (0 pads) in 5 bits, 8 letters to 40 bits (the discovery mechanisms' ``encode``)."""
    raw, _ = population(domain, seed)
    data = np.frombuffer(raw.astype(f"S{MAX_BYTES}").tobytes(), dtype=np.uint8).reshape(
        -1, MAX_BYTES).astype(np.uint64)
    codes = np.where(data > 0, data - np.uint64(ord("a") - 1), np.uint64(0))
    out = np.zeros(len(raw), dtype=np.uint64)
    for column in range(MAX_BYTES):
        out = (out << np.uint64(5)) | codes[:, column]
    return out


def zipf(domain: int, s: float) -> np.ndarray:
    weights = np.arange(1, domain + 1, dtype=np.float64) ** -s
    result: np.ndarray = weights / weights.sum()
    return result


def sample(setting: Setting, seed: int) -> np.ndarray:
    """The n users' words, as indices into the population."""
    s, domain, n, _ = setting
    rng = np.random.default_rng([seed, domain, n, round(s * 100), 17])
    result: np.ndarray = rng.choice(domain, size=n, p=zipf(domain, s))
    return result


@dataclass(frozen=True)
class Truth:
    words: np.ndarray
    counts: np.ndarray
    n: int

    @functools.cached_property
    def order(self) -> np.ndarray:
        result: np.ndarray = np.argsort(-self.counts, kind="stable")
        return result

    @functools.cached_property
    def index(self) -> dict[str, int]:
        return {str(w): i for i, w in enumerate(self.words)}

    def score(self, found: Sequence[str], estimates: Sequence[float], k: int) -> dict[str, Any]:
        """precision@k, recall@k, NCR and the relative error of the true top-k values found,
        for an answer ranked by its estimates (``found`` may hold more or fewer than k)."""
        top = self.order[:k]
        cutoff = self.counts[top[-1]]
        rank = {int(i): r for r, i in enumerate(top)}
        returned = list(zip(found, estimates, strict=True))[:k]
        hits, weights, errors = 0, 0, []
        for value, estimate in returned:
            i = self.index.get(value)
            if i is None or self.counts[i] < cutoff:
                continue
            hits += 1
            weights += k - rank.get(i, k - 1)  # tied with the k-th: the k-th's weight, 1
            f = self.counts[i] / self.n
            errors.append(abs(estimate - f) / f)
        return {"precision": hits / len(returned) if returned else 0.0,
                "recall": min(hits, k) / k, "ncr": min(weights, k * (k + 1) // 2)
                / (k * (k + 1) / 2), "relative_error": float(np.mean(errors)) if errors
                else None, "returned": len(found)}


def truth_of(setting: Setting, seed: int) -> tuple[Truth, np.ndarray, np.ndarray]:
    """(truth, the sample's population indices, the population's encodings)."""
    words, codes = population(setting[1], seed)
    idx = sample(setting, seed)
    return Truth(words, np.bincount(idx, minlength=setting[1]), setting[2]), idx, codes


# -- Chorus -----------------------------------------------------------------------------------

def campaign(name: str, epsilon: float, k: int) -> Campaign:
    """The campaign an analyst would create: ``bytes`` is ``auto`` without the alphabet."""
    domain: dict[str, Any] = {"kind": "strings", "max_bytes": MAX_BYTES}
    if name != "bytes":
        domain["alphabet"] = LETTERS
    return campaign_from_spec({"name": f"hh-{name}",
                               "mechanism": "auto" if name == "bytes" else name,
                               "epsilon": epsilon, "domain": domain, "params": {"top": k}},
                              warn=False)


def _rng(setting: Setting, seed: int, *parts: int) -> np.random.Generator:
    s, domain, n, epsilon = setting
    return np.random.default_rng([seed, domain, n, round(s * 100), round(epsilon * 100),
                                  *parts])


def chorus_task(setting: Setting, seed: int) -> dict[str, Any]:
    """Every Chorus method and k on one sample: scores and times; on seed 0 also the real
    client's µs per report."""
    truth, idx, byte_codes = truth_of(setting, seed)
    letters = letter_codes(setting[1], seed)
    epsilon = setting[3]
    out: dict[str, Any] = {}
    # (method) → (its mechanism, state, client s, map s): the reports do not depend on top or
    # keep, so where k changes nothing else the k = 10 aggregation serves k = 50 too (as the
    # peers' one aggregation serves both); its times are then counted for both.
    folded: dict[str, tuple[PrefixDiscovery, np.ndarray, float, float]] = {}
    for k in KS:
        for index, name in enumerate(CHORUS):
            codes = byte_codes if name == "bytes" else letters
            values = codes[idx].tolist()
            chosen = campaign(name, epsilon, k)
            mechanism = chosen.mechanism
            assert isinstance(mechanism, PrefixDiscovery)
            # The fast encoding above is the mechanism's own (checked on a few values).
            for j in idx[:20].tolist():
                assert mechanism.encode(str(truth.words[j])) == int(codes[j])
            estimator = estimator_for(mechanism.name)
            earlier = folded.get(name)
            if earlier is not None and _same_reports(earlier[0], mechanism):
                _, state, client_s, map_s = earlier
            else:
                started = time.perf_counter()
                payloads = simulate(mechanism, values, _rng(setting, seed, k, index, 18))
                simulated = time.perf_counter()
                state = estimator.map(mechanism, payloads)
                client_s, map_s = simulated - started, time.perf_counter() - simulated
                del payloads
                folded[name] = (mechanism, state, client_s, map_s)
            before = time.perf_counter()
            answer = estimator.finalize(chosen, setting[2], state, Query())
            finalize_s = time.perf_counter() - before
            assert isinstance(answer, FrequencyEstimate)
            found = [str(r.value) for r in answer.rows]
            row = truth.score(found, [r.frequency for r in answer.rows], k)
            flagged = [str(r.value) for r in answer.rows if r.detected]
            # Detection tests f > 0: a flagged value nobody in the sample holds is a false
            # detection, which Holm's test keeps to ≤ 5% of runs (family-wise).
            unheld = sum(v not in truth.index or int(truth.counts[truth.index[v]]) == 0
                         for v in flagged)
            row |= {"client_s": client_s, "map_s": map_s,
                    "finalize_s": finalize_s, "server_s": map_s + finalize_s,
                    "detected": len(flagged), "detected_unheld": unheld,
                    "groups": mechanism.groups, "keep": mechanism.keep}
            if seed == 0:
                row["client_us"] = client_us(mechanism, values[:CLIENT_SAMPLE])
            if name == "bytes":
                row["chosen"] = mechanism.name
            out[f"{name}/{k}"] = row
        auto = campaign("auto", epsilon, k)
        picked = auto.mechanism.name
        same = auto.mechanism == campaign(picked, epsilon, k).mechanism
        # auto is one of the two with its default parameters: the same campaign, the same run.
        assert same, (auto.mechanism, picked)
        out[f"auto/{k}"] = {**out[f"{picked}/{k}"], "chosen": picked}
    return out


def _same_reports(a: PrefixDiscovery, b: PrefixDiscovery) -> bool:
    """Whether two campaigns' reports are drawn alike: all but ``top`` and ``keep`` equal."""
    def drawn(m: PrefixDiscovery) -> dict[str, Any]:
        return {k: v for k, v in m.params().items() if k not in ("top", "keep")}
    return type(a) is type(b) and a.domain == b.domain and a.epsilon == b.epsilon \
        and a.lengths == b.lengths and drawn(a) == drawn(b)


def client_us(mechanism: PrefixDiscovery, values: Sequence[int]) -> float:
    """µs per report of Chorus's pure-Python client (``randomize``; the group drawn per report,
    as the client's keyed assignment does once per privacy period)."""
    rng = random.Random(7)
    started = time.perf_counter()
    for x in values:
        mechanism.randomize(x, rng)
    return (time.perf_counter() - started) / len(values) * 1e6


# -- the peers (pure-LDP) ---------------------------------------------------------------------

def _installed(module: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            __import__(module)
    except ImportError:
        return False
    return True


PURE_LDP = _installed("pure_ldp.heavy_hitters.apple_sfp")
MISSING = "pure-LDP not installed (pip install -e '.[collector,bench]')"


@functools.cache
def _numpy2_shim() -> None:
    """pure-LDP 1.2.0's ``FreqOracleServer`` allocates ``np.zeros(self.d)`` with d = None for
    sketch oracles (CMS); numpy 2 refuses it where numpy 1 made a 0-d array. Its module's
    ``np`` becomes numpy with that one call mapped to ``np.zeros(())``."""
    from pure_ldp.core import _freq_oracle_server  # type: ignore[import-untyped]

    class Numpy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        @staticmethod
        def zeros(shape: Any, *args: Any, **kwargs: Any) -> np.ndarray:
            return np.zeros(() if shape is None else shape, *args, **kwargs)

    _freq_oracle_server.np = Numpy()


def cms_over_olh(epsilon: float) -> float:
    """Var(CMS at ε) / Var(OLH at ε) per report as f → 0: CMS flips each of its bits with
    probability 1/(1 + e^{ε/2}), so its variance is e^{ε/2}/(e^{ε/2} − 1)²."""
    half = math.exp(epsilon / 2)
    cms = half / (half - 1) ** 2
    e = math.exp(epsilon)
    return cms / (4 * e / (e - 1) ** 2)


def _peer_pair(peer: str, epsilon: float, hashes: int = CMS_HASHES) -> tuple[Any, Any]:
    _numpy2_shim()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pure_ldp.frequency_oracles.apple_cms import (  # type: ignore[import-untyped]
            CMSClient,
            CMSServer,
        )
        from pure_ldp.heavy_hitters.apple_sfp import (  # type: ignore[import-untyped]
            SFPClient,
            SFPServer,
        )
        from pure_ldp.heavy_hitters.prefix_extending import (  # type: ignore[import-untyped]
            PEMClient,
            PEMServer,
        )
        from pure_ldp.heavy_hitters.treehistogram import (  # type: ignore[import-untyped]
            TreeHistClient,
            TreeHistServer,
        )
    oracle = CMSServer(epsilon, hashes, CMS_WIDTH)
    sketch = CMSClient(epsilon, oracle.get_hash_funcs(), CMS_WIDTH)
    step = FRAGMENT[peer]
    if peer == "PEM":
        return (PEMClient(epsilon, 0, MAX_BYTES, step, alphabet=ALPHABET, fo_client=sketch),
                PEMServer(epsilon, 0, MAX_BYTES, step, alphabet=ALPHABET, fo_server=oracle))
    if peer == "TreeHist":
        return (TreeHistClient(epsilon, step, MAX_BYTES, alphabet=ALPHABET, fo_client=sketch),
                TreeHistServer(epsilon, MAX_BYTES, step, alphabet=ALPHABET, fo_server=oracle))
    # SFP adds its padding character to the alphabet with set.add.
    return (SFPClient(epsilon, step, MAX_BYTES, alphabet=set(ALPHABET), fo_client=sketch),
            SFPServer(epsilon, step, MAX_BYTES, alphabet=set(ALPHABET), fo_server=oracle))


def peer_candidates(peer: str, keep: int) -> int:
    """The frequency estimates one ``find_heavy_hitters(k=keep)`` makes."""
    step = FRAGMENT[peer]
    steps = -(-MAX_BYTES // step)
    continuations = int(len(ALPHABET) ** step)
    if peer == "SFP":  # every (8-bit hash, fragment) at every offset, its padding included
        return steps * 256 * int((len(ALPHABET) + 1) ** step)
    return continuations + (steps - 1) * keep * continuations + keep


@functools.cache
def estimate_us(hashes: int = CMS_HASHES) -> float:
    """µs of one CMS estimate with ``hashes`` hash functions, here."""
    _numpy2_shim()
    from pure_ldp.frequency_oracles.apple_cms import CMSServer

    oracle = CMSServer(1.0, hashes, CMS_WIDTH)
    oracle.n = 1
    started = time.perf_counter()
    for i in range(300):
        oracle.estimate(f"probe{i}", suppress_warnings=True)
    return (time.perf_counter() - started) / 300 * 1e6


def keep_of(k: int) -> int:
    """Chorus's default ``keep`` for ``top`` = k: the peers keep as many per step."""
    mechanism = campaign("pem", 1.0, k).mechanism
    assert isinstance(mechanism, PrefixDiscovery)
    return mechanism.keep


def peer_task(setting: Setting, seed: int, peer: str, budget: float,
              hashes: int = CMS_HASHES) -> dict[str, Any]:
    """One pure-LDP heavy-hitter method on one sample: its own client and server, one report
    at a time (streamed: CMS reports are 1,024-long vectors), then a query per k."""
    truth, idx, _ = truth_of(setting, seed)
    data = [str(w).ljust(MAX_BYTES, PAD) for w in truth.words[idx].tolist()]
    epsilon, n = setting[3], setting[2]
    keeps = {k: keep_of(k) for k in KS}
    estimate_s = sum(peer_candidates(peer, keep) for keep in keeps.values()) \
        * estimate_us(hashes) * 1e-6
    draw = int(_rng(setting, seed, PEERS.index(peer), 19).integers(2**31))
    random.seed(draw)  # the peers draw from both global generators
    np.random.seed(draw)
    client, server = _peer_pair(peer, epsilon, hashes)
    client_s, started = 0.0, time.perf_counter()
    probe = min(n, 2_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for count, value in enumerate(data, 1):
            before = time.perf_counter()
            report = client.privatise(value)
            client_s += time.perf_counter() - before
            server.aggregate(report)
            if count == probe and probe < n:
                projected = (time.perf_counter() - started) / probe * n + estimate_s
                if projected > budget:
                    return {"skipped": f"projected {projected:.0f} s > budget {budget:.0f} s "
                                       f"({peer} at n = {n:,})", "skipped_budget": budget}
        aggregate_s = time.perf_counter() - started - client_s
        out: dict[str, Any] = {}
        for k, keep in keeps.items():
            before = time.perf_counter()
            found, counts = server.find_heavy_hitters(k=keep)
            query_s = time.perf_counter() - before
            ranked = sorted(zip(found, np.asarray(counts, dtype=np.float64).tolist(),
                                strict=True), key=lambda pair: -pair[1])
            row = truth.score([w.rstrip(PAD) for w, _ in ranked], [c / n for _, c in ranked],
                              k)
            row |= {"client_s": client_s, "aggregate_s": aggregate_s, "query_s": query_s,
                    "server_s": aggregate_s + query_s, "keep": keep}
            out[f"{peer}/{k}"] = row
    return out


# -- running and summaries --------------------------------------------------------------------

#: (kind, setting, seed, peer, peer budget s, CMS hash functions)
Task = tuple[str, Setting, int, str, float, int]


def _call(task: Task) -> dict[str, Any]:
    kind, setting, seed, peer, budget, hashes = task
    if kind == "chorus":
        return chorus_task(setting, seed)
    return peer_task(setting, seed, peer, budget, hashes)


def _cost(task: Task) -> float:
    """A rough relative cost, to start the longest tasks first."""
    kind, setting, _, peer, _, _ = task
    if kind == "chorus":
        return setting[2] / 1e5 * 4 + 8
    return setting[2] / 1e5 * 5 + (100 if peer == "SFP" else 30)


def _key(task: Sequence[Any]) -> str:
    """A run's identity: the task without its time budget."""
    kind, setting, seed, peer, _, hashes = task
    return json.dumps([kind, list(setting), seed, peer, hashes])


def _paired(task: Task) -> tuple[Task, dict[str, Any]]:
    return task, _call(task)


def run_all(tasks: list[Task], workers: int, checkpoint: Path | None
            ) -> dict[str, dict[str, Any]]:
    """Every task's result by its key. With a checkpoint (JSON lines), the tasks it holds are
    not run again and each finished task is appended to it as it arrives, so a long grid can
    be stopped, resumed, or summarized part-way (``--no-run``)."""
    done: dict[str, dict[str, Any]] = {}
    if checkpoint is not None and checkpoint.exists():
        for line in checkpoint.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                task = entry["task"]
                task = json.loads(task) if isinstance(task, str) else task
                if "skipped" in entry["result"]:
                    entry["result"].setdefault("skipped_budget", task[4])
                done[_key(task)] = entry["result"]
    # A run skipped for its projected time is tried again under a larger budget.
    todo = [t for t in tasks if _key(t) not in done
            or done[_key(t)].get("skipped_budget", math.inf) < t[4]]
    sink = checkpoint.open("a") if checkpoint is not None else None

    def keep(task: Task, result: dict[str, Any]) -> None:
        done[_key(task)] = result
        if sink is not None:
            sink.write(json.dumps({"task": task, "result": result}) + "\n")
            sink.flush()

    try:
        with progress_bar(len(todo), "run", "heavy hitters") as bar:
            if workers <= 1:
                for task in todo:
                    keep(task, _call(task))
                    bar.update()
            else:
                with ProcessPoolExecutor(workers) as pool:
                    for task, result in pool.map(_paired, todo):
                        keep(task, result)
                        bar.update()
    finally:
        if sink is not None:
            sink.close()
    return done


METRICS = ("precision", "recall", "ncr", "relative_error", "client_s", "server_s")


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None


#: Seeds both sides must share for the paired test (below that: the binomial one).
PAIRED_MIN = 3


def paired_difference(chorus: dict[int, float], peer: dict[int, float]) -> dict[str, Any]:
    """Chorus's recall minus the peer's over the seeds both ran (the same words and users),
    with the standard error of that mean from the seeds' spread (None from one seed)."""
    seeds = sorted(set(chorus) & set(peer))
    differences = np.array([chorus[x] - peer[x] for x in seeds])
    se = float(differences.std(ddof=1) / math.sqrt(len(seeds))) if len(seeds) > 1 else None
    return {"seeds": len(seeds), "difference": float(differences.mean()) if seeds else 0.0,
            "se": se, "chorus_ahead": int((differences > 0).sum()),
            "peer_ahead": int((differences < 0).sum())}


def summarize(setting: Setting, results: list[tuple[Task, dict[str, Any]]]) -> dict[str, Any]:
    s, domain, n, epsilon = setting
    methods: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    by_seed: dict[str, dict[int, float]] = {}  # key → seed → recall
    for task, result in results:
        if "skipped" in result:
            skipped[task[3]] = result["skipped"]
            continue
        for key, row in result.items():
            runs.setdefault(key, []).append(row)
            by_seed.setdefault(key, {})[task[2]] = row["recall"]
    for key, rows in runs.items():
        summary = {m: _mean(rows, m) for m in METRICS}
        summary["total_s"] = summary["client_s"] + summary["server_s"]  # type: ignore[operator]
        summary["runs"] = len(rows)
        # Binomial: a run's recall is its hits over k, the true top-k values about independent.
        recall, k = summary["recall"], int(key.split("/")[1])
        summary["recall_se"] = math.sqrt(recall * (1 - recall)  # type: ignore[operator]
                                         / (k * len(rows)))
        for extra in ("chosen", "groups", "keep"):
            if extra in rows[0]:
                summary[extra] = rows[0][extra]
        checked = [r for r in rows if "detected_unheld" in r]
        if checked:
            summary["detected"] = _mean(checked, "detected")
            summary["runs_checked_for_false_detection"] = len(checked)
            summary["runs_with_false_detection"] = sum(r["detected_unheld"] > 0
                                                       for r in checked)
        us = [r["client_us"] for r in rows if "client_us" in r]
        if us:
            summary["client_us_pure_python"] = us[0]
            summary["total_s_pure_python_client"] = us[0] * n * 1e-6 + summary["server_s"]
        methods[key] = summary
    comparison = {}
    for k in KS:
        peers = {p: methods[f"{p}/{k}"] for p in PEERS if f"{p}/{k}" in methods}
        if not peers or f"auto/{k}" not in methods:
            continue
        # The best peer: the highest recall, then the least relative error.
        best = max(peers, key=lambda p: (peers[p]["recall"],
                                         -(peers[p]["relative_error"] or math.inf)))
        auto = methods[f"auto/{k}"]
        paired = paired_difference(by_seed[f"auto/{k}"], by_seed[f"{best}/{k}"])
        if paired["seeds"] >= PAIRED_MIN:
            gap, noise = paired["difference"], 2 * paired["se"]
        else:
            gap = auto["recall"] - peers[best]["recall"]
            noise = 2 * math.hypot(auto["recall_se"], peers[best]["recall_se"])
        comparison[str(k)] = {
            "best_peer": best, "peer_recall": peers[best]["recall"],
            "chorus_recall": auto["recall"],
            "at_least_as_good": auto["recall"] >= peers[best]["recall"],
            # Behind by more than twice the difference's standard error: not seed noise. The
            # seeds both ran on share their data, so the paired difference is the sharper
            # test (the binomial one, for a single shared seed, is the fallback).
            "worse_beyond_noise": gap < -noise,
            "ahead_beyond_noise": gap > noise,
            "paired": paired,
            "peer_relative_error": peers[best]["relative_error"],
            "chorus_relative_error": auto["relative_error"],
            "speedup": peers[best]["total_s"] / auto["total_s"],
            "speedup_pure_python_client": (peers[best]["total_s"]
                                           / auto["total_s_pure_python_client"]
                                           if "total_s_pure_python_client" in auto else None),
            "speedup_over_fastest_peer": min(p["total_s"] for p in peers.values())
            / auto["total_s"]}
    return {"zipf": s, "domain": domain, "n": n, "epsilon": epsilon, "methods": methods,
            "peers_skipped": skipped, "comparison": comparison,
            "cms_over_olh": cms_over_olh(epsilon)}


def targets(settings: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in settings:
        if (row["zipf"], row["domain"], row["n"], row["epsilon"]) == TARGET:
            out["target_recall_at_10"] = {key: row["methods"][f"{key}/10"]["recall"]
                                          for key in (*CHORUS, "auto")}
            out["target_recall_met"] = (row["methods"]["auto/10"]["recall"]
                                        >= TARGET_RECALL)
    # Holm's family-wise 5%: over Chorus's own runs (auto is one of pem and treehist).
    detection = [m for row in settings for key, m in row["methods"].items()
                 if key.split("/")[0] in CHORUS and "runs_with_false_detection" in m]
    out["false_detection"] = {
        "runs": sum(m["runs_checked_for_false_detection"] for m in detection),
        "runs_with_one": sum(m["runs_with_false_detection"] for m in detection)}
    compared = [(row, k, c) for row in settings for k, c in row["comparison"].items()]
    out["peer_comparisons"] = len(compared)
    out["at_least_as_good"] = sum(c["at_least_as_good"] for _, _, c in compared)
    out["worse_beyond_noise"] = sum(c["worse_beyond_noise"] for _, _, c in compared)
    out["ahead_beyond_noise"] = sum(c["ahead_beyond_noise"] for _, _, c in compared)
    out["worse_than_best_peer"] = [
        {"zipf": r["zipf"], "domain": r["domain"], "n": r["n"], "epsilon": r["epsilon"],
         "k": int(k), "chorus": c["chorus_recall"], "peer": c["best_peer"],
         "peer_recall": c["peer_recall"]} for r, k, c in compared if not c["at_least_as_good"]]
    speedups = [c["speedup"] for _, _, c in compared]
    out["speedup_range"] = [min(speedups), max(speedups)] if speedups else None
    out["speedup_met"] = sum(x >= TARGET_SPEEDUP for x in speedups)
    pure = [c["speedup_pure_python_client"] for _, _, c in compared
            if c["speedup_pure_python_client"] is not None]
    out["speedup_pure_python_client_range"] = [min(pure), max(pure)] if pure else None
    return out


def _cell(m: dict[str, Any] | None) -> str:
    if m is None:
        return f"{'–':>17}"
    error = "–" if m["relative_error"] is None else f"{m['relative_error']:.3f}"
    return f"{m['recall']:>5.2f} {m['precision']:>4.2f} {error:>6}"


def print_tables(settings: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    labels = [*CHORUS, "auto", *PEERS]
    for k in KS:
        print(f"\nTop {k}: recall, precision, mean relative error of the true top {k} found "
              "(means over seeds; peers: pure-LDP with CMS, where run)")
        print(f"{'s':>4}{'D':>10}{'n':>10}{'ε':>4} " + "".join(f"{x:>18}" for x in labels)
              + "   auto is")
        for row in settings:
            m = row["methods"]
            print(f"{row['zipf']:>4}{row['domain']:>10,}{row['n']:>10,}{row['epsilon']:>4g} "
                  + "".join(f" {_cell(m.get(f'{x}/{k}'))}" for x in labels)
                  + f"   {m.get(f'auto/{k}', {}).get('chosen', '')}")
    print("\nTime end to end, s (client + server; Chorus's client = vectorized simulation; "
          "[with its pure-Python client])")
    print(f"{'s':>4}{'D':>10}{'n':>10}{'ε':>4}{'k':>4} " + "".join(f"{x:>22}" for x in labels))
    for row in settings:
        for k in KS:
            cells = []
            for x in labels:
                m = row["methods"].get(f"{x}/{k}")
                if m is None:
                    cells.append(f"{'–':>22}")
                    continue
                text = f"{m['client_s']:.1f}+{m['server_s']:.1f}"
                if "total_s_pure_python_client" in m and x != "auto":
                    text += f" [{m['total_s_pure_python_client']:.0f}]"
                cells.append(f"{text:>22}")
            print(f"{row['zipf']:>4}{row['domain']:>10,}{row['n']:>10,}{row['epsilon']:>4g}"
                  f"{k:>4} " + "".join(cells))
    print("\nChorus auto against the best peer (highest recall, then least relative error)")
    for row in settings:
        for k, c in row["comparison"].items():
            verdict = "ahead beyond the noise" if c["ahead_beyond_noise"] else "ok" \
                if c["at_least_as_good"] else "worse beyond the noise" \
                if c["worse_beyond_noise"] else "worse, within the noise"
            pair = c["paired"]
            if pair["seeds"] >= PAIRED_MIN:
                verdict += (f"; paired over {pair['seeds']} seeds {pair['difference']:+.3f} ± "
                            f"{pair['se']:.3f}, ahead in {pair['chorus_ahead']}, behind in "
                            f"{pair['peer_ahead']}")
            print(f"  s={row['zipf']} D={row['domain']:,} n={row['n']:,} ε={row['epsilon']:g} "
                  f"k={k}: recall {c['chorus_recall']:.2f} vs {c['best_peer']} "
                  f"{c['peer_recall']:.2f} ({verdict}); "
                  f"{c['speedup']:.1f}× faster end to end ({c['speedup_pure_python_client']:.1f}"
                  f"× with the pure-Python client; {c['speedup_over_fastest_peer']:.1f}× the "
                  f"fastest peer); CMS/OLH variance {row['cms_over_olh']:.2g}")
        for peer, reason in row["peers_skipped"].items():
            print(f"  s={row['zipf']} D={row['domain']:,} n={row['n']:,} ε={row['epsilon']:g}: "
                  f"{peer} skipped: {reason}")
    t = summary
    if "target_recall_at_10" in t:
        print(f"\nTarget: top-10 recall at s = {TARGET[0]}, D = {TARGET[1]:,}, n = "
              f"{TARGET[2]:,}, ε = {TARGET[3]:g}: " + ", ".join(
                  f"{x} {v:.2f}" for x, v in t["target_recall_at_10"].items())
              + f" (need ≥ {TARGET_RECALL}: {'MET' if t['target_recall_met'] else 'NOT MET'})")
    if t["false_detection"]["runs"]:
        print(f"Detected values nobody holds (Holm, family-wise 5%): in "
              f"{t['false_detection']['runs_with_one']} of {t['false_detection']['runs']} "
              f"Chorus answers")
    if t["peer_comparisons"]:
        print(f"Chorus auto at least as good as the best peer (recall@k) in "
              f"{t['at_least_as_good']} of {t['peer_comparisons']} (setting, k), behind by "
              f"more than twice the standard error in {t['worse_beyond_noise']}, ahead by "
              f"more in {t['ahead_beyond_noise']}; "
              f"≥ {TARGET_SPEEDUP:g}× faster end to end in {t['speedup_met']} of "
              f"{t['peer_comparisons']} (range {t['speedup_range'][0]:.1f}–"
              f"{t['speedup_range'][1]:.1f}×; with Chorus's pure-Python client "
              f"{t['speedup_pure_python_client_range'][0]:.1f}–"
              f"{t['speedup_pure_python_client_range'][1]:.1f}×)")


def plan(args: argparse.Namespace) -> tuple[list[Setting], list[Task]]:
    grid = QUICK if args.quick else Grid()
    seeds = args.seeds or grid.seeds
    settings: list[Setting] = [(s, d, n, e) for s in args.zipf or grid.zipf
                               for d in args.domains or grid.domains
                               for n in args.sizes or grid.sizes
                               for e in args.epsilons or grid.epsilons]
    wanted = args.peer_settings or grid.peer_settings
    peer_settings = [x for x in settings if x in wanted or args.peers_everywhere]
    # Where the peers run, Chorus runs as many seeds as the best of them (PEM), so that the
    # comparison's noise is as small on both sides.
    tasks: list[Task] = [("chorus", x, seed, "", 0.0, 0) for x in settings
                         for seed in range(max(seeds, PEER_SEEDS["PEM"]) if x in peer_settings
                                           and not (args.seeds or args.quick) else seeds)]
    if PURE_LDP and not args.no_peers:
        tasks += [("peer", x, seed, peer, args.peer_budget, args.cms_hashes)
                  for x in peer_settings for peer in args.peers
                  for seed in range(args.peer_seeds or min(
                      seeds if args.quick or args.seeds else PEER_SEEDS[peer],
                      PEER_SEEDS[peer] if x[2] <= 100_000 else 1))]
    # The settings the peers share first (a checkpoint read part-way then holds comparisons),
    # the longest runs first within each part so that the workers finish together.
    shared = set(peer_settings) if PURE_LDP and not args.no_peers else set()
    return settings, sorted(tasks, key=lambda t: (t[1] not in shared, -_cost(t)))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(","))


def _names(text: str) -> tuple[str, ...]:
    names = tuple(text.split(","))
    if not set(names) <= set(PEERS):
        raise argparse.ArgumentTypeError(f"peers are {', '.join(PEERS)}")
    return names


def _settings(text: str) -> tuple[Setting, ...]:
    """``s:D:n:ε`` items separated by commas."""
    out = []
    for item in text.split(","):
        s, d, n, e = item.split(":")
        out.append((float(s), int(float(d)), int(float(n)), float(e)))
    return tuple(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="D = 10⁴, n = 10⁵, ε ∈ {2, 4}, 2 seeds; the peers at one setting")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench-results" / "heavy_hitters.json")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--checkpoint", type=Path,
                        help="JSON lines of finished runs: resumed from, appended to")
    parser.add_argument("--no-run", action="store_true",
                        help="summarize what --checkpoint holds, run nothing")
    parser.add_argument("--zipf", type=_floats, help="Zipf exponents, e.g. 1.1,1.5")
    parser.add_argument("--domains", type=_ints, help="distinct values, e.g. 1e4,1e5")
    parser.add_argument("--sizes", type=_ints, help="users n, e.g. 1e5,1e6")
    parser.add_argument("--epsilons", type=_floats, help="e.g. 1,2,4,8")
    parser.add_argument("--seeds", type=int, help=f"seeds per setting (default {SEEDS})")
    parser.add_argument("--no-peers", action="store_true", help="Chorus only")
    parser.add_argument("--peers", type=_names, default=PEERS,
                        help=f"which peers, e.g. PEM,SFP (default {','.join(PEERS)})")
    parser.add_argument("--cms-hashes", type=int, default=CMS_HASHES,
                        help="the peers' CMS hash functions (fewer: faster, more collisions)")
    parser.add_argument("--peer-settings", type=_settings,
                        help="where the peers run, as s:D:n:ε items (default: n = D = 10⁵ at "
                             "every s and ε, and the recall target's setting)")
    parser.add_argument("--peers-everywhere", action="store_true",
                        help="the peers at every setting of the grid (budget permitting)")
    parser.add_argument("--peer-seeds", type=int,
                        help="seeds per peer (default: PEM 5, TreeHist 3, SFP 1; 1 at n > "
                             "10⁵)")
    parser.add_argument("--peer-budget", type=float, default=PEER_BUDGET_S,
                        help="seconds a peer run may be projected to take, or it is skipped")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    settings, tasks = plan(args)
    if args.no_run:
        tasks_run: list[Task] = []
        results = run_all([], 1, args.checkpoint)
    else:
        tasks_run = tasks
        results = run_all(tasks, args.workers, args.checkpoint)
    grouped: dict[Setting, list[tuple[Task, dict[str, Any]]]] = {x: [] for x in settings}
    for task in tasks:
        if _key(task) in results:
            grouped[task[1]].append((task, results[_key(task)]))
    # A setting without Chorus's runs (a checkpoint read part-way) is left out.
    rows = [summarize(x, grouped[x]) for x in settings
            if any(t[0] == "chorus" for t, _ in grouped[x])]
    missing = sum(_key(t) not in results for t in tasks)
    summary = targets(rows)
    output = {
        "quick": args.quick, "max_bytes": MAX_BYTES, "ks": list(KS), "target": list(TARGET),
        "peers": {"installed": PURE_LDP, "note": None if PURE_LDP else MISSING,
                  "oracle": f"CMS, width {CMS_WIDTH}, {args.cms_hashes} hash functions",
                  "alphabet": "".join(ALPHABET), "fragment": FRAGMENT,
                  "estimate_us": estimate_us(args.cms_hashes) if PURE_LDP
                  and not args.no_peers else None},
        "settings": rows, "summary": summary, "tasks": len(tasks), "tasks_missing": missing,
        "tasks_run_now": len(tasks_run), "wall_s": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(output, indent=1))
    print_tables(rows, summary)
    if not PURE_LDP:
        print(f"\npeers: {MISSING}")
    if missing:
        print(f"\n{missing} of {len(tasks)} runs missing (a checkpoint read part-way)")
    print(f"\n{output['wall_s']:.0f} s; written to {args.out}")
    return output


if __name__ == "__main__":
    main(sys.argv[1:])
