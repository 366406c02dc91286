"""Estimates as a terminal table, for the CLI and the demo."""

from __future__ import annotations

from typing import Any

__all__ = ["format_estimates"]


def format_estimates(result: dict[str, Any], truth: dict[str, float] | None = None) -> str:
    """A human-readable table of an estimate result, optionally beside the true values."""
    lines = [f"{result['campaign']}: {result['mechanism']}, ε = {result['epsilon']:.4g}, "
             f"n = {result['n']}"]
    if result["kind"] == "means":
        lines.append(f"  {'attribute':<22}" + (f"{'true':>10}" if truth is not None else "")
                     + f"{'mean':>12}{'std err':>10}   95% interval")
        for row in result["rows"]:
            true = f"{truth[row['attribute']]:>10.4g}" if truth is not None else ""
            lines.append(f"  {row['attribute'][:22]:<22}{true}{row['mean']:>12.4g}"
                         f"{row['std_error']:>10.4g}   [{row['ci_low']:.4g}, "
                         f"{row['ci_high']:.4g}]")
        return "\n".join(lines)
    if result["kind"] == "mean":
        line = (f"  mean {result['mean']:.4f} ± {result['std_error']:.4f} "
                f"(95% CI {result['ci_low']:.4f} … {result['ci_high']:.4f})")
        if truth is not None:
            line = f"  true mean {truth['mean']:.4f}   estimated" + line[6:]
        return "\n".join([*lines, line])
    header = f"  {'value':<22}" + (f"{'true':>8}" if truth is not None else "") + \
        f"{'estimate':>10}{'std err':>9}   95% interval"
    lines.append(header)
    for row in result["rows"]:
        true = f"{truth.get(row['value'], 0.0):>8.4f}" if truth is not None else ""
        flag = "" if row.get("detected") in (None, True) else "  (not detected)"
        if row["frequency_std_error"] is None:  # not selected by the constrained fit
            lines.append(f"  {row['value'][:22]:<22}{true}{row['frequency']:>10.4f}"
                         f"{'-':>9}   (not selected)")
            continue
        lines.append(f"  {row['value'][:22]:<22}{true}{row['frequency']:>10.4f}"
                     f"{row['frequency_std_error']:>9.4f}   [{row['frequency_ci_low']:.4f}, "
                     f"{row['frequency_ci_high']:.4f}]{flag}")
    if result.get("postprocessing", "none").split(" ")[0] not in ("none",):
        lines.append(f"  post-processing: {result['postprocessing']}")
    extra = result.get("extra", {})
    if "unexplained_frequency" in extra:
        lines.append(f"  unexplained share {extra['unexplained_frequency']:.4f} ± "
                     f"{extra['unexplained_std_error']:.4f}; residual χ²/dof "
                     f"{extra['residual_chi2_per_dof']:.2f}; detected: "
                     f"{extra['detection_threshold']}")
    lines.extend(f"  warning: {warning}" for warning in result.get("warnings", []))
    return "\n".join(lines)
