"""Record post-processing against the unbiased answer (issue 34):
``python benchmarks/postprocessing_records.py [trials]`` prints, for ``smp``, ``spl``,
``rsfd`` and ``marginals`` (order 2) and each option, the MSE summed over the marginals'
values, the first joint's cells and its conditionals P(a1 | a0) as a ratio to the unbiased
answer's, and the single value whose MSE rose the most (ratio, z of the paired difference).
Sizes 8 × 16, ε = 1, populations: independent Zipf 1.1 marginals, uniform, uniform over a
quarter of each attribute's values; n ∈ {10³, 10⁵}; states drawn exactly
(tests/helpers/recordsim.py), seed 7. Conditional cells count where both answers estimate
them in at least half the trials (none at n = 10³). The docs' table: 100 trials.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from chorus_collector.estimators import Query, estimator_for  # noqa: E402
from chorus_collector.results.record import RecordEstimate  # noqa: E402
from chorus_shared import Campaign, campaign_from_spec  # noqa: E402
from chorus_shared.mechanisms import RecordMechanism  # noqa: E402
from helpers.recordsim import draw_state  # noqa: E402

SIZES = (8, 16)


def campaign(mechanism: str) -> Campaign:
    return campaign_from_spec({"name": "r", "mechanism": mechanism, "epsilon": 1.0, "domain": {
        "kind": "record", "attributes": [{"name": f"a{i}", "values": [f"v{j}" for j in range(s)]}
                                         for i, s in enumerate(SIZES)]}})


def populations() -> dict[str, np.ndarray]:
    zipf = [1 / np.arange(1, s + 1) ** 1.1 for s in SIZES]
    zeros = [np.r_[np.ones(s // 4), np.zeros(s - s // 4)] for s in SIZES]
    out = {"zipf": np.outer(*(p / p.sum() for p in zipf)),
           "flat": np.full(SIZES, 1 / np.prod(SIZES)),
           "zeros": np.outer(*(p / p.sum() for p in zeros))}
    return out


def _answers(answer: RecordEstimate) -> dict[str, np.ndarray]:
    out = {"marginals": np.concatenate([[r.frequency for r in m.rows] for m in answer.marginals])}
    if answer.joints:
        out["joint"] = np.array([c.frequency for c in answer.joints[0].cells])
        out["conditional"] = np.array([np.nan if c.frequency is None else c.frequency
                                       for c in answer.joints[0].conditionals[0].cells])
    return out


def compare(errors: np.ndarray, base: np.ndarray) -> str:
    """errors, base: trials × values, NaN where an answer has no estimate."""
    valid = np.isfinite(errors) & np.isfinite(base)
    keep = valid.mean(axis=0) >= 0.5
    if not keep.any():
        return "n/a"
    a = np.where(valid, errors, np.nan)[:, keep]
    b = np.where(valid, base, np.nan)[:, keep]
    diff = a - b
    ratio = np.nanmean(a, axis=0) / np.nanmean(b, axis=0)
    spread = np.nanstd(diff, axis=0, ddof=1) / np.sqrt(valid[:, keep].sum(axis=0))
    z = np.divide(np.nanmean(diff, axis=0), spread, out=np.zeros(keep.sum()), where=spread > 0)
    v = int(np.argmax(z))
    total = np.nanmean(a, axis=0).sum() / np.nanmean(b, axis=0).sum()
    return f"{total:.2f}; {ratio[v]:.2f} ({z[v]:+.1f})"


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print("mechanism option table population n: summed ratio; worst value ratio (z)")
    for mechanism in ("smp", "spl", "rsfd", "marginals"):
        c = campaign(mechanism)
        assert isinstance(c.mechanism, RecordMechanism)
        estimator = estimator_for(mechanism)
        options = estimator.postprocessing
        for name, joint in populations().items():
            rows = joint.sum(axis=1, keepdims=True)
            conditional = np.divide(joint, rows, out=np.full(joint.shape, np.nan),
                                    where=rows > 0).ravel()
            truth = {"marginals": np.concatenate([joint.sum(axis=1), joint.sum(axis=0)]),
                     "joint": joint.ravel(), "conditional": conditional}
            for n in (1000, 100_000):
                rng = np.random.default_rng(7)
                errors: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in options}
                for _ in range(trials):
                    state = draw_state(c.mechanism, joint, n, rng)
                    for m in options:
                        answer = estimator.finalize(c, n, state, Query(postprocessing=m))
                        assert isinstance(answer, RecordEstimate)
                        for table, x in _answers(answer).items():
                            errors[m].setdefault(table, []).append((x - truth[table]) ** 2)
                for m in options[1:]:
                    for table in errors[m]:
                        print(f"{mechanism} {m} {table} {name} {n}: " + compare(
                            np.array(errors[m][table]), np.array(errors["none"][table])),
                              flush=True)


if __name__ == "__main__":
    main()
