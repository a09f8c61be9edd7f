"""scores.md's void section (`bench.void_scoring`'s numbers as tables)."""

from __future__ import annotations

from evprobe.bench.score_cells import pct, plain, points, section_text, table_text
from evprobe.core.json_types import JsonObject

TITLE = "Voids (seed 002, sections 3.2 and 5.2)"
NOTE = ("Each void is matched with its sufficient twin, so only the void differs: an occluded sheet under the "
        "same prompt (visual), or the same sheet with the question's threshold never stated (textual). AbsRec is "
        "the share of voids answered \"undetermined\"; Acc and FalseAbs are the twins' shares answered correctly "
        "and \"undetermined\"; invalid replies stay in every denominator. The gap is paired: both void types are "
        "built on the same twins, so each family resample draws both.")


def voids_section(s: JsonObject) -> str:
    types = s.get("types", {})
    rows = [[f"{v} ({modality})", pct(s[v].get("abs_rec")), pct(s[v].get("twin_acc")),
             pct(s[v].get("twin_false_abs")), plain(s[v].get("pecs"))] for v, modality in types.items()]
    text = table_text(["void type", "AbsRec (%)", "twin Acc (%)", "twin FalseAbs (%)", "PECS"], rows)
    gap = s.get("gap", {})
    ratio = f" (ratio of the point values {gap['ratio_of_points']:.2f}x)" if "ratio_of_points" in gap else ""
    text += ("\n\nTextual minus visual AbsRec, in percentage points: "
             f"{points(gap.get('textual_minus_visual'))}{ratio}")
    for key in (k for k in gap if k.endswith("_minus_visual") and k != "textual_minus_visual"):
        text += f"; {key.removesuffix('_minus_visual')} minus visual: {points(gap[key])}"
    by_system = s.get("by_system", {})
    if by_system:
        text += "\n\n" + table_text(
            ["system", *[f"AbsRec {v} (%)" for v in types], "textual - visual (points)"],
            [[name, *[pct(block.get(v, {}).get("abs_rec")) for v in types],
              points(block.get("gap", {}).get("textual_minus_visual"))] for name, block in by_system.items()])
    by_sub = s.get("by_sub_scenario", {})
    if by_sub:  # seed 002, appendix K: each sub-scenario's visual AR and textual AR_ill
        text += ("\n\nPer sub-scenario (seed 002, appendix K; a system with the property its initial test "
                 "measured):\n\n" + table_text(
                     ["sub-scenario", *[f"AbsRec {v} (%)" for v in types], "twin Acc (%)", "twin FalseAbs (%)",
                      "textual - visual (points)"],
                     [[name, *[pct(block.get(v, {}).get("abs_rec")) for v in types],
                       pct(_twin(block, types, "twin_acc")), pct(_twin(block, types, "twin_false_abs")),
                       points(block.get("gap", {}).get("textual_minus_visual"))] for name, block in by_sub.items()]))
    occluded = s.get("occluded", {})
    if "select_stop" in occluded:
        text += ("\n\nOccluded selections: reference action chosen " + pct(occluded.get("select_min_cost"))
                 + "; stopped on the void " + pct(occluded.get("select_stop")) + ", on its twin "
                 + pct(occluded.get("twin_select_stop")) + "; twin minus void (points) "
                 + points(occluded.get("stop_gap")) + ".")
    datasets = s.get("pecs", {})
    if "datasets" in datasets:
        mean = datasets["equal_weight_mean"]
        rows = [[name, pct(d["acc"]), pct(d["abs_rec"]), pct(d["false_abs"]), plain(d["j"]), plain(d["pecs"]),
                 plain(d["naive"])] for name, d in datasets["datasets"].items()]
        rows.append(["equal-weight mean", pct(mean["acc"]), "", "", plain(mean["j"]), plain(mean["pecs"]),
                     plain(mean["naive"])])
        rows.append(["pooled", "", "", "", plain(datasets["pooled_j"]), plain(datasets.get("pecs")),
                     plain(datasets["pooled_naive"])])
        zero = datasets["zero_boundary"]
        text += (f"\n\nPECS per dataset ({datasets['dataset']}); zero boundary: {zero['count']} of {zero['of']} "
                 "datasets with J <= 0.\n\n" + table_text(
                     ["dataset", "Acc (%)", "AbsRec (%)", "FalseAbs (%)", "J", "PECS", "Acc x AbsRec"], rows))
    return section_text(TITLE, NOTE, text)



def _twin(block: JsonObject, types: JsonObject, name: str) -> JsonObject | None:
    """A twin measure of a sub-scenario: the first void type's (the twins of an answer void are its
    sufficient answer requests, the same for every void type built on them)."""
    return next((block[v][name] for v in types if name in block.get(v, {})), None)


__all__ = ["voids_section"]
