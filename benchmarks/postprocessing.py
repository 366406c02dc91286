"""Post-processing against the unbiased answer, statistic by statistic (issue 34):
``python benchmarks/postprocessing.py [mechanism,…] [trials]`` prints the table of
docs/mechanisms/frequency.md ("What post-processing improves").

For each frequency oracle and each of its post-processing options: the MSE summed over all
values, as a ratio to the unbiased answer's, and the single value whose MSE rose the most
(ratio and the paired difference's z), d = 32 (rr: 2), ε = 1, n ∈ {10³, 10⁵}, populations
Zipf 1.1 / uniform / uniform over 8 of 32 (rr: (0.9, 0.1) / (0.5, 0.5) / (1, 0)). The docs'
figures: 200 trials, ``hr`` and ``shist`` 100 (IBU through a Walsh–Hadamard channel is slow).
Paired trials: tests/helpers/postprocsim.py, seed 7.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from chorus_collector.estimators import estimator_for  # noqa: E402
from helpers.postprocsim import campaign, paired_errors, populations  # noqa: E402

D = 32
SIZES = (1000, 100_000)
MECHANISMS = "krr,oue,sue,olh,blh,ss,basic_rappor,dbitflip,rr,hr,shist"


def _populations(mechanism: str) -> dict[str, np.ndarray]:
    if mechanism == "rr":
        return {"zipf": np.array([0.9, 0.1]), "flat": np.array([0.5, 0.5]),
                "zeros": np.array([1.0, 0.0])}
    return populations(D)


def rows(mechanism: str, trials: int) -> list[str]:
    options = estimator_for(mechanism).postprocessing
    c = campaign(mechanism, 2 if mechanism == "rr" else D)
    totals: dict[str, list[str]] = {m: [] for m in options[1:]}
    worst: dict[str, tuple[float, float, str]] = {}
    for name, pi in _populations(mechanism).items():
        for n in SIZES:
            errors = paired_errors(c, pi, n, trials, 7, options)
            base = errors["none"]
            for m in options[1:]:
                totals[m].append(f"{errors[m].sum(axis=1).mean() / base.sum(axis=1).mean():.2f}")
                diff = errors[m] - base
                ratio = errors[m].mean(axis=0) / base.mean(axis=0)
                spread = diff.std(axis=0, ddof=1) / np.sqrt(trials)
                z = np.divide(diff.mean(axis=0), spread, out=np.zeros(len(pi)),
                              where=spread > 0)
                z[np.abs(ratio - 1) < 1e-6] = -np.inf  # unchanged up to rounding
                v = int(np.argmax(z))
                setting = f"{name} 10{'³' if n == 1000 else '⁵'}"
                if m not in worst or z[v] > worst[m][1]:
                    worst[m] = (float(ratio[v]), float(z[v]), setting)
    out = []
    for m in options[1:]:
        r, z, setting = worst[m]
        last = "no value worse" if not np.isfinite(z) else f"{r:.2f} ({z:+.1f}), {setting}"
        out.append(f"| `{mechanism}` | {m} | " + " | ".join(totals[m]) + f" | {last} |")
    return out


def main() -> None:
    mechanisms = (sys.argv[1] if len(sys.argv) > 1 else MECHANISMS).split(",")
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    print("| oracle | option | zipf 10³ | zipf 10⁵ | flat 10³ | flat 10⁵ | zeros 10³ | "
          "zeros 10⁵ | worst one value: ratio (z), setting |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mechanism in mechanisms:
        for line in rows(mechanism, trials):
            print(line, flush=True)


if __name__ == "__main__":
    main()
