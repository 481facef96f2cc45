"""Every headlens command on the demo model, and a file-by-file comparison of two such runs (issue 29).

Usage: ``.venv/bin/python scripts/compare_outputs.py run DIR`` (every command into DIR/<name>/), then
``.venv/bin/python scripts/compare_outputs.py compare BEFORE AFTER`` (exit 1 on any difference);
``run DIR NAME...`` reruns only those steps into an existing DIR.

``run`` calls the ``headlens`` click group of the installed tree in this one process (the library
is imported once, as ``headlens demo run`` does; ``sys.argv`` is set to the command's own, so the
manifests record it), offline, with fixed small settings (:data:`STEPS`), in order.  Each command's
stdout goes to DIR/<name>/_stdout.txt (compared), its stderr to DIR/_logs/<name>.stderr (progress
lines; not compared).  DIR/_logs/run.json records DIR and the source tree, whose paths the files hold.

``compare`` walks both trees (all but DIR/_logs/) and compares every file:

- in every file that is UTF-8 text, the run folder is first written as ``<DIR>`` and the source
  tree (the folder of probes/, analyses/, reports/; it holds the demo model) as ``<REPO>``, on each
  side with its own run.json, since the two runs live in different folders and checkouts;
- ``.json``/``.jsonl`` as parsed objects (a journal line by line), with the keys of
  :data:`VOLATILE_KEYS` left out at any depth; a checkpoint's Hugging Face files
  (:data:`HF_FILES`: a tokenizer vocabulary has words such as "time" or "host" as keys) are
  compared whole;
- ``.csv`` cell by cell as text (exact), without the columns of :data:`VOLATILE_COLUMNS`;
- ``.md``, ``.html`` and ``.txt`` line by line without the lines that show one of
  :data:`VOLATILE_KEYS` as a JSON key (``"created_utc": ...`` of a manifest summary, HTML-escaped
  in the page), and with the time cell of the report's stage table written ``<time>``;
- ``.safetensors``: the JSON header parsed (its ``__metadata__`` key order changes from run to
  run), the tensor bytes byte for byte;
- everything else (PNG, SVG, PDF, parquet, npz, ...) byte for byte.  The figures are
  deterministic by the library's own savefig settings (reports/render/figures/common.py:
  ``svg.hashsalt``, no Date / CreationDate / ModDate / Software metadata), so SVG and PDF are not
  filtered at all.

It prints one line per differing or missing file (the first differing line or key) and a count
table by file kind.  Two runs of the same tree compare identical (checked at commit 53f83cd).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

#: Keys whose values change from run to run of the same code (found by comparing two runs of one
#: tree), ignored wherever they appear in a JSON file (a manifest, stage.json, a sweep task's
#: checkpoint.json) and on the lines of Markdown/HTML/text that show them.  Nothing else is ignored.
VOLATILE_KEYS = frozenset(
    {
        "created_utc",  # every manifest: when it was written
        "finished_utc",  # report stage.json: when the stage finished
        "key_hash",  # report stage.json: hash of its "key", which holds the --text-file path (the key is compared)
        "seconds",  # report stage.json and the report manifest's stages: a stage's wall time
        "wall_s",  # sweep task: wall time
        "cpu_s",  # sweep task: CPU time
        "census_s",  # sweep task: the census's wall time
        "ray_start_s",  # sweep manifest: Ray's start-up time
        "sweep_wall_s",  # sweep manifest: the sweep's wall time
        "host",  # sweep task: the machine that ran it
        "ray_resources",  # sweep manifest: Ray's view of the machine (free memory, node address)
        "headlens_version",  # every manifest: the package version (the code under comparison changes)
        "versions",  # every manifest: library versions (headlens' own among them)
    }
)

#: CSV columns left out, for the same reasons (sweep/tasks.csv, sweep/checkpoints.csv).
VOLATILE_COLUMNS = frozenset({"wall_s", "cpu_s", "census_s", "host"})

#: The report's stage table shows each stage's wall time (report.md and report.html): that cell
#: is written ``<time>`` before comparing; nothing else on those lines is changed.
_STAGE_TIME = (
    re.compile(r"^(\| \d+ \| `[a-z_]+` \|.*\| )\d+(?:\.\d+)? s( \|)$"),
    re.compile(r'^(<tr id="stage-[a-z_]+".*<td class="num">)\d+(?:\.\d+)? s(</td></tr>)$'),
)

#: A checkpoint's Hugging Face files: JSON compared whole (after the path substitution), since
#: their keys are vocabulary or config names, not volatile fields.
HF_FILES = frozenset(
    {"tokenizer.json", "vocab.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "generation_config.json"}
)

#: Files compared byte for byte, never decoded.
BINARY_SUFFIXES = frozenset({".png", ".pdf", ".safetensors", ".parquet", ".npz", ".npy", ".bin", ".pt"})

#: Every command, with fixed small settings.  ``{out}`` is DIR/<name>; ``{dir}`` is DIR.
#: Steps are run in order: later ones may read files written by earlier ones (a prune mask, a capture).
DEMO = ["-m", "demo", "--device", "cpu"]
CENSUS = ["--n-prompts", "8", "--seq-len", "12", "--window", "32", "--batch-size", "8"]
EVAL = ["--n-windows", "4", "--window", "32", "--batch-size", "4"]
PAIRS = ["--builtin", "induction", "--n-pairs", "8", "--batch-size", "8"]
SINKS = ["--n-prompts", "4", "--batch-size", "4", "--long-tokens", "64", "--attn-windows", "4,16", "--keep-first", "1"]
STEPS: list[tuple[str, list[str]]] = [
    ("models", ["models"]),
    ("verify", ["verify", *DEMO]),
    ("capture", ["capture", *DEMO, "-t", "When Mary and John went to the store, John gave a drink to Mary.", "--out", "{out}"]),
    ("detect", ["detect", *DEMO, *CENSUS, "-q", "--out", "{out}/scores.csv"]),
    ("classify", ["classify", *DEMO, *CENSUS, "-q", "--out", "{out}"]),
    (
        "classify-evidence",
        ["classify", *DEMO, *CENSUS, "--evidence", "--evidence-n", "10", "--evidence-seq-len", "6", "-q", "--out", "{out}"],
    ),
    ("sinks", ["sinks", *DEMO, *SINKS, "-q", "--out", "{out}"]),
    ("sinks-lengths", ["sinks", *DEMO, "--lengths", "32,64", "--n-long", "2", "-q", "--out", "{out}"]),
    ("sinks-text", ["sinks", *DEMO, "-t", "The cat sat on the mat and looked at the door.", "--out", "{out}"]),
    ("ablate-zero", ["ablate", *DEMO, *EVAL, "--method", "zero", "--n-bootstrap", "50", "-q", "--out", "{out}/ablation.csv"]),
    ("ablate-mean", ["ablate", *DEMO, *EVAL, "--method", "mean", "--n-bootstrap", "50", "-q", "--out", "{out}/ablation.csv"]),
    (
        "ablate-resample",
        ["ablate", *DEMO, *EVAL, "--method", "resample", "--n-bootstrap", "50", "--no-attribution", "-q", "--out", "{out}/ablation.csv"],
    ),
    (
        "prune",
        ["prune", *DEMO, *EVAL, "--step", "0.25", "--max-fraction", "0.5", "--random-seeds", "2", "-q", "--out", "{out}"],
    ),
    (
        "ablate-masked",
        ["ablate", *DEMO, *EVAL, "--mask", "{dir}/prune/pruned_heads.json", "--n-bootstrap", "20", "-q", "--out", "{out}/ablation.csv"],
    ),
    ("patch", ["patch", *DEMO, *PAIRS, "--n-resamples", "50", "-q", "--out", "{out}"]),
    ("patch-path", ["patch", *DEMO, *PAIRS, "--n-resamples", "50", "--receivers", "1.0,1.1", "-q", "--out", "{out}"]),
    ("patch-attribution", ["patch", *DEMO, *PAIRS, "--n-resamples", "50", "--attribution", "-q", "--out", "{out}"]),
    ("patch-dla", ["patch", *DEMO, *PAIRS, "--n-resamples", "50", "--dla", "-q", "--out", "{out}"]),
    ("patch-names", ["patch", *DEMO, "--builtin", "names", "--n-pairs", "8", "--n-resamples", "50", "-q", "--out", "{out}"]),
    ("gqa", ["gqa", *DEMO, *EVAL, "--group-sizes", "2", "-q", "--out", "{out}"]),
    ("kv", ["kv", *DEMO, "--batch", "2", "--context", "128", "--out", "{out}/kv.csv"]),
    ("kv-masked", ["kv", *DEMO, "--mask", "{dir}/prune/pruned_heads.json", "--out", "{out}/kv.csv"]),
    ("projections", ["projections", *DEMO, *EVAL, "--n-prompts", "4", "--layers", "0", "-q", "--out", "{out}"]),
    (
        "circuit-eap",
        ["circuit", *DEMO, *PAIRS, "--method", "eap", "--n-bootstrap", "20", "--confirm", "2", "-q", "--out", "{out}"],
    ),
    (
        "circuit-eap-ig",
        ["circuit", *DEMO, *PAIRS, "--method", "eap-ig", "--steps", "3", "--n-bootstrap", "20", "--confirm", "2", "-q", "--out", "{out}"],
    ),
    (
        "circuit-exact",
        ["circuit", *DEMO, *PAIRS, "--method", "exact", "--n-bootstrap", "20", "--confirm", "2", "-q", "--out", "{out}"],
    ),
    ("composition", ["composition", *DEMO, "--n-baseline", "10", "--n-tokens", "64", "-q", "--out", "{out}"]),
    ("tiny-model", ["tiny-model", "--out", "{out}"]),
    ("tracr-model", ["tracr-model", "reverse", "--max-seq-len", "4", "--out", "{out}/model"]),
    ("selftest", ["selftest", "--device", "cpu", "--n-prompts", "8", "--keep", "{out}", "-q"]),
    ("report-quick", ["report", *DEMO, "--quick", "-q", "--out", "{out}"]),
    ("demo-heldout", ["demo", "heldout", "--out", "{out}/heldout.txt"]),
    ("demo-run", ["demo", "run", "--out", "{out}"]),
    (
        "sweep",
        ["sweep", "-m", "demo", *CENSUS, "--loss-windows", "2", "--num-cpus", "1", "--out", "{out}"],
    ),
]

LOGS = "_logs"
STDOUT = "_stdout.txt"


def _cli() -> Any:
    """The ``headlens`` click group (``bin/headlens`` runs ``headlens.reports.cli.main``'s)."""
    from headlens.reports.cli.main import cli

    return cli


def _invoke(cli: Any, args: list[str], stdout: Path, stderr: Path) -> int:
    """One command in this process: its exit code; its stdout and stderr into the two files."""
    import contextlib
    import io
    import logging
    import traceback

    import click

    out, err = io.StringIO(), io.StringIO()
    code, argv = 0, sys.argv
    sys.argv = ["headlens", *args]  # what the manifests record as the command
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            returned = cli.main(args, prog_name="headlens", standalone_mode=False)
            code = returned if isinstance(returned, int) else 0  # click returns ctx.exit's code here
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except click.exceptions.Abort:
            code = 130
        except Exception:  # noqa: BLE001 - a crash is this step's failure; the others still run
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = argv
            for handler in logging.getLogger().handlers:
                handler.flush()
    stdout.write_text(out.getvalue())
    stderr.write_text(err.getvalue())
    return code


def _source_tree() -> Path:
    """The checkout the installed headlens runs from (the folder of probes/, analyses/, reports/)."""
    import importlib.util

    spec = importlib.util.find_spec("headlens.probes")
    if spec is None or spec.origin is None:
        sys.exit("compare_outputs: headlens is not importable from this Python")
    return Path(spec.origin).resolve().parents[1]


def run(root: Path, only: list[str] | None = None) -> int:
    """Every step of :data:`STEPS` (or ``only`` those) into ``root``; the number of failed steps."""
    root = root.resolve()
    unknown = sorted(set(only or ()) - {name for name, _ in STEPS})
    if unknown:
        sys.exit(f"compare_outputs: no step {', '.join(unknown)} (steps: {', '.join(n for n, _ in STEPS)})")
    if root.exists() and any(root.iterdir()) and not only:
        sys.exit(f"compare_outputs: {root} is not empty")
    (root / LOGS).mkdir(parents=True, exist_ok=True)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ[key] = "1"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.chdir(root / LOGS)  # anything a command writes beside itself lands in the logs
    cli, failed, started = _cli(), 0, time.monotonic()
    (root / LOGS / "run.json").write_text(json.dumps({"root": str(root), "repo": str(_source_tree())}, indent=1))
    for name, args in STEPS:
        if only and name not in only:
            continue
        out = root / name
        if out.exists():  # a step rerun alone starts from an empty folder
            shutil.rmtree(out)
        out.mkdir(parents=True)
        t0 = time.monotonic()
        stderr = root / LOGS / f"{name}.stderr"
        code = _invoke(cli, [a.format(out=out, dir=root) for a in args], out / STDOUT, stderr)
        failed += code != 0
        lines = stderr.read_text().strip().splitlines()
        tail = "" if code == 0 else " " + (lines or ["(no stderr)"])[-1][:160]
        print(f"{name:20s} exit {code} {time.monotonic() - t0:6.1f} s{tail}", flush=True)
    print(f"{'total':20s} {time.monotonic() - started:6.1f} s, {failed} failed", flush=True)
    return failed


class Side:
    """One run folder and the paths its files hold, written as placeholders before comparing."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        recorded = json.loads((self.root / LOGS / "run.json").read_text())
        # longest first: the run folder may lie inside the source tree
        self.paths = sorted([(recorded["root"], "<DIR>"), (recorded["repo"], "<REPO>")], key=lambda p: -len(p[0]))

    def text(self, rel: str) -> str | None:
        """The file as text with the placeholders, or None for a binary file."""
        path = self.root / rel
        if path.suffix in BINARY_SUFFIXES:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return None
        for old, new in self.paths:
            text = text.replace(old, new)
        return text


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _first_json_difference(a: Any, b: Any, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where or '<top>'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only {'after' if k not in a else 'before'}"
            found = _first_json_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where or '<top>'}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_json_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where or '<top>'}: {str(a)[:80]!r} vs {str(b)[:80]!r}"


def _parse_json(text: str, name: str) -> Any:
    # parse_constant keeps NaN/Infinity as their text, so that NaN compares equal to NaN
    def parse(t: str) -> Any:
        return json.loads(t, parse_constant=lambda c: f"<{c}>")

    obj = [parse(line) for line in text.splitlines() if line.strip()] if name.endswith(".jsonl") else parse(text)
    return obj if name in HF_FILES else _strip(obj)


def _first_line_difference(la: list[Any], lb: list[Any]) -> str | None:
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"line {i + 1}: {str(x)[:70]!r} vs {str(y)[:70]!r}"
    return None if len(la) == len(lb) else f"{len(la)} vs {len(lb)} lines"


def _csv_rows(text: str) -> list[list[str]]:
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return rows
    keep = [i for i, column in enumerate(rows[0]) if column not in VOLATILE_COLUMNS]
    return [[row[i] if i < len(row) else "<absent>" for i in keep] + row[len(rows[0]) :] for row in rows]


#: A line of Markdown, HTML or text that shows a volatile key as a JSON key (plain or HTML-escaped quotes).
_VOLATILE_LINE = re.compile(rf'^\s*(?:"|&#34;|&quot;)(?:{"|".join(sorted(VOLATILE_KEYS))})(?:"|&#34;|&quot;):')


def _text_lines(text: str) -> list[str]:
    lines = [line for line in text.split("\n") if not _VOLATILE_LINE.match(line)]
    for pattern in _STAGE_TIME:
        lines = [pattern.sub(r"\1<time>\2", line) for line in lines]
    return lines


def _safetensors_difference(da: bytes, db: bytes) -> str | None:
    """A .safetensors file: its JSON header as a parsed object (the safetensors library writes the
    ``__metadata__`` keys in a different order from run to run), the tensor bytes byte for byte."""
    import struct

    def split(data: bytes) -> tuple[Any, bytes]:
        n = struct.unpack("<Q", data[:8])[0]
        return json.loads(data[8 : 8 + n]), data[8 + n :]

    (ha, ta), (hb, tb) = split(da), split(db)
    found = _first_json_difference(ha, hb, "header")
    if found:
        return found
    return None if ta == tb else f"tensor bytes differ ({len(ta)} vs {len(tb)} bytes)"


def compare_file(rel: str, a: Side, b: Side) -> str | None:
    """None when the file is equal on both sides by the rules of the module docstring, else the first difference."""
    ta, tb = a.text(rel), b.text(rel)
    if ta is None or tb is None:
        da, db = (a.root / rel).read_bytes(), (b.root / rel).read_bytes()
        if rel.endswith(".safetensors") and da != db:
            return _safetensors_difference(da, db)
        return None if da == db else f"binary: {len(da)} vs {len(db)} bytes" + ("" if len(da) != len(db) else ", same size")
    name = Path(rel).name
    suffix = Path(rel).suffix
    if suffix in (".json", ".jsonl"):
        try:
            return _first_json_difference(_parse_json(ta, name), _parse_json(tb, name))
        except json.JSONDecodeError as exc:
            return None if ta == tb else f"not JSON ({exc}); the texts differ"
    if suffix == ".csv":
        return _first_line_difference(_csv_rows(ta), _csv_rows(tb))
    if suffix in (".md", ".html", ".txt"):
        return _first_line_difference(_text_lines(ta), _text_lines(tb))
    return _first_line_difference(ta.split("\n"), tb.split("\n"))


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != LOGS}


def compare(root_a: Path, root_b: Path) -> int:
    """Print the differences and the count table; 1 when anything differs or is missing, else 0."""
    a, b = Side(root_a), Side(root_b)
    fa, fb = _files(a.root), _files(b.root)
    differing: dict[str, str] = {}
    for rel in sorted(fa & fb):
        found = compare_file(rel, a, b)
        if found:
            differing[rel] = found
            print(f"DIFFERS  {rel}: {found}")
    for rel in sorted(fa - fb):
        print(f"MISSING  {rel}: only in {a.root}")
    for rel in sorted(fb - fa):
        print(f"MISSING  {rel}: only in {b.root}")
    kinds: dict[str, list[int]] = {}
    for rel in fa | fb:
        row = kinds.setdefault(Path(rel).suffix or "(none)", [0, 0, 0, 0, 0])
        if rel in fa and rel in fb:
            row[0] += 1
            row[2 if rel in differing else 1] += 1
        else:
            row[3 if rel in fa else 4] += 1
    head = f"{'kind':14s} {'compared':>9s} {'identical':>9s} {'differing':>9s} {'only before':>11s} {'only after':>10s}"
    print(f"\n{a.root} (before) vs {b.root} (after)\n{head}")
    for kind in sorted(kinds):
        print(f"{kind:14s} " + " ".join(f"{v:{w}d}" for v, w in zip(kinds[kind], (9, 9, 9, 11, 10), strict=True)))
    total = [sum(r[i] for r in kinds.values()) for i in range(5)]
    print(f"{'all':14s} " + " ".join(f"{v:{w}d}" for v, w in zip(total, (9, 9, 9, 11, 10), strict=True)))
    return 1 if total[2] or total[3] or total[4] else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "run":
        return 1 if run(Path(argv[1]), argv[2:] or None) else 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
