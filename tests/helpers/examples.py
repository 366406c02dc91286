"""Small example campaigns per registered mechanism, for the registry-wide tests.

A mechanism added to the registry needs entries here (``test_every_mechanism_has_examples``
fails otherwise); the privacy, goodness-of-fit and unbiasedness tests then cover it.
"""

from __future__ import annotations

from typing import Any

from chorus_shared import Campaign, campaign_from_spec


def _record(*sizes: int) -> dict[str, Any]:
    return {"kind": "record", "attributes": [
        {"name": f"a{i}", "values": [f"v{j}" for j in range(size)]}
        for i, size in enumerate(sizes)]}


def _vector(ranges: list[tuple[float, float]]) -> dict[str, Any]:
    return {"kind": "vector", "attributes": [{"name": f"a{i}", "lo": lo, "hi": hi}
                                            for i, (lo, hi) in enumerate(ranges)]}


# Two ε and two domain sizes per mechanism (MECHANISMS.md §16: use e^ε integer where useful).
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "rr": [
        {"epsilon": 1.0986122886681098, "domain": ["no", "yes"]},  # ln 3
        {"epsilon": 0.25, "domain": ["no", "yes"]},
    ],
    "krr": [
        {"epsilon": 1.0986122886681098, "domain": ["a", "b", "c", "d"]},
        {"epsilon": 2.5, "domain": [f"v{i}" for i in range(12)]},
        {"epsilon": 0.5, "domain": [f"v{i}" for i in range(3)]},
    ],
    "sue": [
        {"epsilon": 2.1972245773362196, "domain": ["a", "b", "c", "d"]},  # 2 ln 3: p = 3/4
        {"epsilon": 0.7, "domain": [f"v{i}" for i in range(7)]},
    ],
    "oue": [
        {"epsilon": 1.0986122886681098, "domain": ["a", "b", "c", "d"]},  # ln 3: q = 1/4
        {"epsilon": 3.0, "domain": [f"v{i}" for i in range(9)]},
    ],
    "ss": [
        {"epsilon": 1.0, "domain": [f"v{i}" for i in range(10)]},  # ω = 2
        {"epsilon": 0.5, "domain": [f"v{i}" for i in range(8)]},
        {"epsilon": 2.0, "domain": [f"v{i}" for i in range(6)], "params": {"omega": 3}},
    ],
    "olh": [  # tiny primes so that every (a, b, y) can be enumerated; q* is exact for any prime
        {"epsilon": 1.0986122886681098, "domain": ["a", "b", "c"], "params": {"prime": 7}},
        {"epsilon": 1.3, "domain": [f"v{i}" for i in range(6)], "params": {"prime": 11}},
    ],
    "blh": [
        {"epsilon": 0.8, "domain": ["a", "b", "c", "d"], "params": {"prime": 7}},
        {"epsilon": 2.0, "domain": [f"v{i}" for i in range(9)], "params": {"prime": 13}},
    ],
    "dbitflip": [
        {"epsilon": 2.1972245773362196, "domain": ["a", "b", "c", "d"], "params": {"b": 2}},
        {"epsilon": 1.0, "domain": [f"v{i}" for i in range(6)], "params": {"b": 1}},
        {"epsilon": 1.5, "domain": ["a", "b", "c"], "params": {"b": 3}},
    ],
    "hr": [
        {"epsilon": 1.0986122886681098, "domain": ["a", "b", "c"]},  # K = 4
        {"epsilon": 2.0, "domain": [f"v{i}" for i in range(20)]},  # K = 32
    ],
    "shist": [
        {"epsilon": 1.0986122886681098, "domain": ["a", "b", "c"]},  # K = 4
        {"epsilon": 0.6, "domain": [f"v{i}" for i in range(11)]},  # K = 16
    ],
    "rappor": [
        {"epsilon": 2.0, "domain": {"kind": "strings"}, "params": {"k": 8, "h": 2, "m": 2}},
        {"epsilon": None, "domain": {"kind": "strings"},
         "params": {"k": 8, "h": 1, "m": 3, "f": 0.5, "p": 0.5, "q": 0.75}},
        {"epsilon": 4.0, "domain": {"kind": "strings"},
         "params": {"k": 10, "h": 3, "m": 2, "f": 0.2}},
    ],
    "o_rr": [
        {"epsilon": 1.5, "domain": {"kind": "strings"}, "params": {"k": 4, "m": 2}},
        {"epsilon": 3.0, "domain": {"kind": "strings"}, "params": {"k": 8, "m": 3}},
    ],
    "o_rappor": [
        {"epsilon": 1.0, "domain": {"kind": "strings"}, "params": {"k": 8, "m": 3}},
        {"epsilon": 2.5, "domain": {"kind": "strings"}, "params": {"k": 6, "m": 3}},
    ],
    "cms": [
        {"epsilon": 2.0, "domain": {"kind": "strings"}, "params": {"k": 3, "m": 8}},
        {"epsilon": 0.8, "domain": {"kind": "strings"}, "params": {"k": 2, "m": 5}},
    ],
    "hcms": [
        {"epsilon": 1.5, "domain": {"kind": "strings"}, "params": {"k": 3, "m": 8}},
        {"epsilon": 4.0, "domain": {"kind": "strings"}, "params": {"k": 5, "m": 16}},
    ],
    "basic_rappor": [
        {"epsilon": 1.5, "domain": ["a", "b", "c", "d"]},
        {"epsilon": None, "domain": [f"v{i}" for i in range(6)],
         "params": {"f": 0.25, "p": 0.3, "q": 0.8}},
    ],
    "boolean_rappor": [
        {"epsilon": 1.0, "domain": ["no", "yes"]},
        {"epsilon": None, "domain": ["off", "on"], "params": {"f": 0.5, "p": 0.25, "q": 0.75}},
        {"epsilon": None, "domain": ["off", "on"], "params": {"f": 0.2, "p": 0.1, "q": 0.6}},
    ],
    "pm": [  # a coarse grid so every output can be enumerated
        {"epsilon": 2.0, "domain": {"kind": "numeric", "lo": -1, "hi": 1},
         "params": {"resolution": 16}},
        {"epsilon": 4.0, "domain": {"kind": "numeric", "lo": 0, "hi": 50},
         "params": {"resolution": 32}},
    ],
    "hm": [
        {"epsilon": 2.0, "domain": {"kind": "numeric", "lo": -1, "hi": 1},
         "params": {"resolution": 16}},
        {"epsilon": 0.5, "domain": {"kind": "numeric", "lo": 0, "hi": 1},  # below ε*: Duchi
         "params": {"resolution": 8}},
    ],
    "laplace": [  # coarse grids so that the clamped output range can be enumerated
        {"epsilon": 2.0, "domain": {"kind": "numeric", "lo": -1, "hi": 1},
         "params": {"resolution": 4}},
        {"epsilon": 0.7, "domain": {"kind": "numeric", "lo": 0, "hi": 50},
         "params": {"resolution": 8}},
    ],
    "duchi_md": [
        {"epsilon": 1.0, "domain": _vector([(-1, 1), (0, 10)])},
        {"epsilon": 2.0, "domain": _vector([(0, 1), (0, 100), (-5, 5)])},
        {"epsilon": 0.5, "domain": _vector([(0, 1)] * 4)},
    ],
    "harmony": [
        {"epsilon": 1.0, "domain": _vector([(0, 1), (0, 100), (-5, 5)])},
        {"epsilon": 0.5, "domain": _vector([(-1, 1), (0, 10)])},
    ],
    "pm_md": [
        {"epsilon": 2.0, "domain": _vector([(0, 1), (0, 100), (-5, 5)]),
         "params": {"resolution": 4}},  # k = 1
        {"epsilon": 5.0, "domain": _vector([(-1, 1), (0, 10)]),
         "params": {"resolution": 4}},  # k = 2, ε/2 each
    ],
    "hm_md": [
        {"epsilon": 2.0, "domain": _vector([(-1, 1), (0, 10)]), "params": {"resolution": 4}},
        {"epsilon": 6.0, "domain": _vector([(0, 1), (0, 100), (-5, 5)]),
         "params": {"resolution": 4}},  # k = 2
    ],
    "one_bit_mean": [
        {"epsilon": 1.0, "domain": {"kind": "numeric", "lo": 0, "hi": 300}},
        {"epsilon": 2.5, "domain": {"kind": "numeric", "lo": 0, "hi": 1}},
    ],
    "duchi": [
        {"epsilon": 1.0, "domain": {"kind": "numeric", "lo": -5, "hi": 5}},
        {"epsilon": 3.0, "domain": {"kind": "numeric", "lo": 0, "hi": 1}},
    ],
    # Distributions: coarse grids, so that every output can be enumerated. sw: 8 output buckets
    # are narrower than the wave (2b ≥ bucket width), so e^ε is reached; hh: ε = 0.5 with
    # B = 2 puts k-RR on levels 1–2 and OUE on level 3, ε = 3 k-RR on every level.
    "sw": [
        {"epsilon": 1.0, "domain": {"kind": "numeric", "lo": 0, "hi": 10},
         "params": {"buckets": 8}},
        {"epsilon": 2.0, "domain": {"kind": "numeric", "lo": 1, "hi": 1000},
         "params": {"buckets": 16, "output_buckets": 12, "scale": "log"}},
    ],
    "hh": [
        {"epsilon": 0.5, "domain": {"kind": "numeric", "lo": 0, "hi": 100},
         "params": {"branching": 2, "buckets": 8}},
        {"epsilon": 3.0, "domain": {"kind": "numeric", "lo": 1, "hi": 1000},
         "params": {"branching": 4, "buckets": 16, "scale": "log"}},
    ],
    # Records: small enough to enumerate every record and every report. smp's second example
    # gives its 12-value attribute OUE (k-RR's variance is larger there at ε = 0.5).
    "smp": [
        {"epsilon": 1.0986122886681098, "domain": _record(3, 2)},
        {"epsilon": 0.5, "domain": _record(12, 2)},
    ],
    "spl": [
        {"epsilon": 1.0, "domain": _record(2, 3)},
        {"epsilon": 2.0, "domain": _record(2, 2, 3)},
    ],
    "rsfd": [
        {"epsilon": 1.0, "domain": _record(3, 3)},  # MECHANISMS-2.md §2.1's d = 2, k = 3
        {"epsilon": 0.5, "domain": _record(2, 2, 4)},
    ],
    # Discovery: one-byte strings (every value enumerable), walks of two and three steps.
    "pem": [
        {"epsilon": 1.0986122886681098, "domain": {"kind": "strings", "max_bytes": 1},
         "params": {"top": 2, "keep": 2, "first_bits": 4, "step_bits": 4, "cohorts": 8,
                    "bins": 3}},
        {"epsilon": 2.0, "domain": {"kind": "strings", "max_bytes": 1},
         "params": {"top": 2, "keep": 2, "first_bits": 2, "step_bits": 3, "cohorts": 3,
                    "bins": 4}},
        # Over a declared alphabet: 2-bit characters, three of them (6 bits, every one).
        {"epsilon": 1.5, "domain": {"kind": "strings", "max_bytes": 3, "alphabet": "ab"},
         "params": {"top": 1, "keep": 2, "first_bits": 2, "step_bits": 2, "cohorts": 3,
                    "bins": 3}},
    ],
    "treehist": [
        {"epsilon": 1.0, "domain": {"kind": "strings", "max_bytes": 1},
         "params": {"top": 2, "keep": 2, "first_bits": 4, "step_bits": 4, "cohorts": 8,
                    "bins": 2, "word_bins": 2}},
        {"epsilon": 3.0, "domain": {"kind": "strings", "max_bytes": 1},
         "params": {"top": 1, "keep": 2, "first_bits": 4, "step_bits": 4, "cohorts": 2,
                    "bins": 2, "word_bins": 3, "prefix_share": 30}},
        {"epsilon": 2.0, "domain": {"kind": "strings", "max_bytes": 2, "alphabet": "xyz"},
         "params": {"top": 1, "keep": 2, "first_bits": 2, "step_bits": 2, "cohorts": 2,
                    "bins": 2, "word_bins": 2}},
    ],
    "marginals": [
        {"epsilon": 1.0, "domain": _record(2, 3, 2)},
        {"epsilon": 0.25, "domain": _record(3, 3)},  # OUE over the 9 cells
        {"epsilon": 2.0, "domain": _record(2, 2, 2), "params": {"order": 3}},
    ],
}


def example_campaigns() -> list[Campaign]:
    out = []
    for mechanism, specs in EXAMPLES.items():
        for i, spec in enumerate(specs):
            out.append(campaign_from_spec({"name": f"{mechanism}-{i}", "mechanism": mechanism,
                                           **spec}))
    return out


def example_ids() -> list[str]:
    return [c.name for c in example_campaigns()]
