"""The study's outputs: ``runs.csv`` (one row per run, labels and metrics, exact values),
``findings.json`` and ``reproduction.md``, rendered from the rows alone (so the document can be
checked against its CSV: :func:`render` of :func:`read_runs` must give it back)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specmd_sim.atomic import atomic_file, write_text
from specmd_sim.reproduce.specmd.findings import Finding, Rows, evaluate
from specmd_sim.reproduce.specmd.grid import LABELS, METRICS, Plan

COLUMNS = (*LABELS, *METRICS)
_INT = {"seed", "max_requests", "slots", "misses", "misses_collision", "bytes_moved",
        "prefetch_issued"}  # fmt: skip
_FLOAT = {"accuracy", "threshold", "dispatch_s", "hit_rate", "late_hit_rate", "ttft_s"}
PLAN_LINE = "<!-- plan: "


def write_runs(rows: Rows, path: Path) -> None:
    with atomic_file(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if r[k] is None else repr(r[k]) if isinstance(r[k], float)
                             else r[k] for k in COLUMNS})  # fmt: skip


def read_runs(path: Path) -> Rows:
    """The rows of a ``runs.csv``, with their types back."""
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: _value(k, v) for k, v in r.items()} for r in csv.DictReader(fh)]


def _value(key: str, text: str) -> Any:
    if text == "":
        return None
    if key in _INT:
        return int(text)
    if key in _FLOAT:
        return float(text)
    return text


def write_outputs(rows: Rows, plan: Plan, out: Path) -> list[Finding]:
    findings = evaluate(rows, plan.subjects)
    write_runs(rows, out / "runs.csv")
    write_text(out / "findings.json", json.dumps([f.as_dict() for f in findings], indent=2) + "\n")
    write_text(out / "reproduction.md", render(rows, plan, findings))
    return findings


def plan_of(text: str) -> Plan:
    """The plan a rendered document was made with (its first line after the title)."""
    line = next(x for x in text.splitlines() if x.startswith(PLAN_LINE))
    data = json.loads(line.removeprefix(PLAN_LINE).removesuffix(" -->"))
    return Plan(tuple(data["subjects"]), tuple(data["seeds"]), data["quick"],
                tuple(data.get("recorded", ())))  # fmt: skip


def render(rows: Rows, plan: Plan, findings: list[Finding] | None = None) -> str:
    """The document of ``rows`` (``findings``: theirs, if already evaluated)."""
    findings = evaluate(rows, plan.subjects) if findings is None else findings
    plan_json = json.dumps({"subjects": plan.subjects, "seeds": plan.seeds, "quick": plan.quick,
                            "recorded": plan.recorded})  # fmt: skip
    parts = [
        "# Reproducing SpecMD",
        "",
        f"{PLAN_LINE}{plan_json} -->",
        INTRO,
        _setup(plan, rows),
        WHICH,
        _findings_table(findings),
        WHY,
        _finding_details(findings),
        _collision_table(rows, plan),
        _hit_table(rows),
        _ttft_table(rows),
    ]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts if p)


INTRO = """
SpecMD (Hoang et al., arXiv 2602.03921) benchmarks expert-cache eviction and prefetch policies
and proposes **Least-Stale** eviction. This page reruns its study here and asks of each finding
whether it comes from MoE routing or from the setup: every check is made over several seeds,
with a stated margin, and repeated on **null controls** (traces without the routing structure
the finding would exploit) and **robustness variants** (the same question asked another fair
way). A finding is *reproduced* when it holds in every seed and variant and is absent or much
weaker on the controls (it comes from the subject's routing); a *setup artefact* when a variant
makes it vanish (it comes from that choice of setup: replay's instant prefetches, or the oracle's
placement of the experts it misses); *layer order* when it holds in every variant but as
strongly on a control, which keeps only the order in which an MoE runs its layers (it holds for
any routing, and is what SpecMD says Least-Stale exploits); *not reproduced* when it does not
hold on the subject. Each verdict names the control or variant that decides it.

This page is generated: `specmd reproduce specmd --out DIR` writes it as `DIR/reproduction.md`
with the runs behind every number in `DIR/runs.csv` (the copy of that file beside this page is
`docs/reproduction-runs.csv`; a test renders this page from it and reruns a sample of its rows).

```sh
specmd reproduce specmd            # the full study: about 1,500 runs, ten minutes on 2 cores
specmd reproduce specmd --quick    # fewer capacities, controls and requests: under 2 minutes
```
"""

WHICH = """
## Which Least-Stale, which LRU

The paper's text beyond its abstract could not be read here, and no implementation of it is
public. What its public descriptions say: experts are *current*
(accessed in the ongoing forward pass) or *stale* (in a previous one); victims come from the
stale ones first, FIFO, then from the current ones, FIFO; a prefetched expert is marked
current. The variants here:

- `least-stale` (the default of `specmd run`): exactly that, with FIFO by entry into the queue
  (which, as a pass sweeps its layers in order, follows layer position);
- `least-stale-touch`: each touch moves the expert to the end of the current queue (recency);
  demand-only it is LRU, access for access;
- `least-stale-layer`: the victim is the expert whose layer the sweep reaches last from the
  layer now running (a spatial rule).

Which LRU the paper compares with is not stated. Two baselines: `lru` (an admission, demand
or prefetch, counts as a use) and `lru-demand` (only demand counts: a prefetched expert enters
at the least-recent end, so the next admission evicts it unless its layer has used it).
`per-layer-lru` (each layer keeps cache-slots / layers of its own experts, as mixtral-offloading
does) is left out: at these capacities every layer's share is below top-k for both subjects,
so it would only measure that thrashing.
"""


WHY = """
## The mechanisms behind the verdicts

- **Collision misses.** With the default policies Least-Stale and LRU evict the same experts:
  everything touched in the running pass is more recent than everything stale, so the two
  orders agree unless a prefetch hint protects an expert LRU would take, which a pass that
  needs more experts than the cache holds rarely allows. Against `lru-demand`, an LRU in which a
  fresh prefetch is the next victim, the collision misses are mostly its own prefetches evicted
  by the next ones, which happens on any trace: the null controls are the test of it.
- **Hit rate over 88 %.** Replay lands a prefetch the moment it is issued, so its hit rate is
  about the predictor's accuracy plus what the cache keeps, on any trace. In the timing engine the
  same prefetches are mostly still on the link when their layer's router decides (a layer
  computes in tens of microseconds for one token, a layer's experts take milliseconds over
  PCIe): late hits.
- **Score-based prefetching at lower accuracy.** The noisy oracle places the true experts it
  misses just below its predicted band, where a threshold catches them; the variant with misses
  placed uniformly and the timing engine are the tests of whether that is all there is. With a
  fitted predictor, compare the hit-rate gain with the extra bytes it moves (below).
- **TTFT.** At batch 1 on PCIe prefill is transfer-bound: what lowers TTFT is moving fewer
  bytes (the layer-ordered variant keeps experts across passes), not prefetching, until the
  per-kernel host overhead makes compute long enough to hide transfers behind; the table at the
  end shows the sign of the prefetching effect change with that overhead.
"""


def _setup(plan: Plan, rows: Rows) -> str:
    subjects = {"olmoe": "`olmoe`: the OLMoE-shaped synthetic trace of the bundled preset "
                "(16 layers x 64 experts, top-8; 4 requests x (16 prompt + 48 decode) tokens), "
                "generated once per seed", "mixtral": "`mixtral`: the real Mixtral-8x7B routing "
                "of `../shared/traces` (HumanEval problem 0: 135 prompt then 83 decode tokens; "
                "32 layers x 8 experts, top-2)"}  # fmt: skip
    lines = [
        "## Setup",
        "",
        f"- **Subjects**: {'; '.join(subjects.get(s, _yours(s, plan)) for s in plan.subjects)}.",
        f"- **Controls** ({', '.join(c for c in plan.controls if c != 'subject')}): `uniform` "
        "draws every token's experts uniformly (no popularity, no temporal or cross-layer "
        "structure); `shuffled` permutes the subject's tokens (same marginals and within-token "
        "routing, no temporal structure).",
        f"- **Seeds**: {', '.join(map(str, plan.seeds))} (the trace's and the predictor's noise); "
        "effects are given as mean (lowest to highest).",
        f"- **Capacities**: {', '.join(plan.capacities)} of all routed-expert bytes.",
        "- **Engines**: `replay` (no time: a layer's prefetches land together once its plan "
        "is made, before the next router decision) and the timing engine on `h100-pcie` with "
        "the `fused-kernels` runtime (TTFT; a "
        "prefetch still loading when its layer needs it is a *late hit*, not a hit).",
        "- **Predictors**: the noisy oracle at a set accuracy, with missed true experts just "
        "below the predicted band (`oracle`) or placed uniformly (`oracle-uniform`), and "
        "`transition` fitted on requests 0-1 and evaluated on the held-out requests 2-3.",
        f"- **Runs**: {len(rows)}"
        + (
            f" (quick: the first {plan.requests} request(s) of olmoe in each run; the fitted "
            "predictor is evaluated on request 2 only)"
            if plan.quick
            else ""
        )
        + ".",
        "- A recorded subject (`mixtral`, and traces given with `--trace`) is the same trace "
        "for every seed: there the seeds vary the predictor's noise only.",
    ]
    return "\n".join(lines) + "\n"


def _yours(name: str, plan: Plan) -> str:
    kind = "with its recorded predictions" if name in plan.recorded else "no recorded predictions"
    return f"`{name}`: a trace given with `--trace` ({kind})"


def _controls_text(f: Finding) -> str:
    return "; ".join(f"{k} {v.text(f.show)}" for k, v in f.nulls.items()) or "-"


def _findings_table(findings: list[Finding]) -> str:
    lines = ["## Findings", "",
             "| SpecMD finding | trace | paper | here (subject) | null controls | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for f in findings:
        lines.append(f"| {f.claim} | {f.subject} | {f.paper} | {f.ours.text(f.show)} | "
                     f"{_controls_text(f)} | **{f.verdict}** |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _finding_details(findings: list[Finding]) -> str:
    lines = ["## Each finding", ""]
    for f in findings:
        lines += [f"### {f.claim} ({f.subject})", "",
                  f"Measured: {f.effect}; margin {f.show(f.margin)}.", "",
                  f"**{f.verdict}**: {f.reason}.", ""]  # fmt: skip
        for name, s in f.robust.items():
            lines.append(f"- with {name}: {s.text(f.show)}")
        for note in f.notes:
            lines.append(f"- {note}")
        lines.append("")
    return "\n".join(lines)


def _mean(values: Iterable[float]) -> float:
    v = list(values)
    return sum(v) / len(v) if v else math.nan


def _collision_table(rows: Rows, plan: Plan) -> str:
    grid = [r for r in rows if r["experiment"] == "collision" and r["predictor"] == "oracle"]
    if not grid:
        return ""
    caps = list(dict.fromkeys(r["capacity"] for r in grid))
    lines = ["## Collision misses by capacity", "",
             "Mean collision misses per run (top-k prefetch, oracle at 0.9, replay), subject / "
             "uniform control.", ""]  # fmt: skip
    for subject in plan.subjects:
        sub = [r for r in grid if r["subject"] == subject]
        lines += [f"### {subject}", "", "| eviction | " + " | ".join(caps) + " |",
                  "|---|" + "---|" * len(caps)]  # fmt: skip
        for ev in dict.fromkeys(r["eviction"] for r in sub):
            cells = []
            for cap in caps:
                parts = [_mean(r["misses_collision"] for r in sub if r["eviction"] == ev
                               and r["capacity"] == cap and r["control"] == c)
                         for c in ("subject", "uniform")]  # fmt: skip
                cells.append(" / ".join(f"{x:.0f}" for x in parts))
            lines.append(f"| {ev} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _hit_table(rows: Rows) -> str:
    grid = [r for r in rows if r["experiment"] == "hit" and r["predictor"] == "oracle"]
    if not grid:
        return ""
    lines = ["## Hit rates: replay and the timing engine", "",
             "`least-stale` at 5 %, oracle at 0.9, mean over seeds. Replay's hit rate is close to "
             "the timing engine's hits plus late hits (equal where the cache keeps nothing "
             "across passes).", "",
             "| trace | control | prefetch | replay | timed: hit | timed: late hit |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for key in dict.fromkeys((r["subject"], r["control"], r["prefetch"]) for r in grid):
        subject, control, prefetch = key
        pick = {e: [r for r in grid if (r["subject"], r["control"], r["prefetch"]) == key
                    and r["engine"] == e] for e in ("replay", "simulate")}  # fmt: skip
        lines.append(
            f"| {subject} | {control} | {prefetch} | "
            f"{_mean(r['hit_rate'] for r in pick['replay']):.3f} | "
            f"{_mean(r['hit_rate'] for r in pick['simulate']):.3f} | "
            f"{_mean(r['late_hit_rate'] for r in pick['simulate']):.3f} |"
        )
    return "\n".join(lines) + "\n"


def _ttft_table(rows: Rows) -> str:
    grid = [r for r in rows if r["experiment"] == "ttft" and r["control"] == "subject"]
    if not grid:
        return ""
    seed = min(r["seed"] for r in grid)
    lines = ["## TTFT and the per-kernel host overhead", "",
             f"olmoe, seed {seed}, 5 %, h100-pcie; TTFT in ms. The overhead is paid by every "
             "kernel launch (`dispatch_overhead_s`, zero in `fused-kernels`: CUDA graphs); it "
             "is the least calibrated constant of the time model, so the verdicts above are "
             "shown against it.", "",
             "| runtime / prefill / overhead | lru | lru + top-k | least-stale-layer | "
             "least-stale-layer + top-k | prefetch effect (LS-layer) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    keys = dict.fromkeys((r["runtime"], r["prefill"], r["dispatch_s"]) for r in grid)
    for runtime, prefill, dispatch in keys:
        at = by_setting(grid, seed, runtime, prefill, dispatch)
        if len(at) < 4:
            continue
        effect = 1 - at[("least-stale-layer", "top-k")] / at[("least-stale-layer", "none")]
        overhead = "0 us (CUDA graphs)" if dispatch is None else f"{dispatch * 1e6:g} us"
        name = f"{runtime} / {prefill} / " + (overhead if runtime == "fused-kernels" else "-")
        lines.append(
            f"| {name} | {at[('lru', 'none')] * 1e3:.1f} | {at[('lru', 'top-k')] * 1e3:.1f} | "
            f"{at[('least-stale-layer', 'none')] * 1e3:.1f} | "
            f"{at[('least-stale-layer', 'top-k')] * 1e3:.1f} | {effect:+.1%} |"
        )
    return "\n".join(lines) + "\n"


def by_setting(grid: Rows, seed: int, runtime: str, prefill: str,
               dispatch: float | None) -> dict[tuple[str, str], float]:  # fmt: skip
    """TTFT by (eviction, prefetch) for one runtime / prefill / overhead setting."""
    return {
        (r["eviction"], r["prefetch"]): r["ttft_s"] for r in grid
        if r["seed"] == seed and r["runtime"] == runtime and r["prefill"] == prefill
        and r["dispatch_s"] == dispatch
    }  # fmt: skip
