"""``zoopt eval``: held-out greedy accuracy, pass@k and maj@k of a model; pass@k charts; and
suites — one model on several benchmarks, tabulated as in the paper.

Settings: :func:`zoopt.cli.common.eval_config` (a run config, then ``--set``, then the flags).
Suites (``--suite NAME`` or ``--objective a,b,c``): :mod:`zoopt.workflows.suite`; the output
directory holds ``table.md``, ``table.csv`` and ``suite.json`` (the paper's table) and one
``<objective>/`` folder per benchmark with its ``summary.json`` and ``per_problem.csv``;
``--compare`` with suite directories puts their tables side by side.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..reporting import plots
from ..runs.jsonable import jsonable
from ..runs.references import model_label
from ..workflows.analyze import evaluate_model
from ..workflows.suite import evaluate_suite, metric_columns, suite_objectives, suite_table, suites, to_markdown
from .common import add_eval_flags, eval_config, slug, stamp

HELP = "held-out greedy accuracy, pass@k and maj@k of a model; suites of benchmarks"
DEFAULT_KS = "1,8,16,32"
SUITE_KS = "1,16,32"  # the paper's table: Pass@1, Pass@16, Pass@32, Maj@32


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a model name, an HF directory, or a training run directory")
    p.add_argument("--objective", help="objective name or path/to/file.py:attr (default: the run's, "
                                       "else the config's); a comma-separated list evaluates them all as a suite")
    p.add_argument("--suite", help=f"evaluate a named suite of objectives ({', '.join(suites())}) and write "
                                   "the paper's table")
    p.add_argument("--source", choices=("auto", "hub", "offline"),
                   help="where the objectives' data comes from (their source= argument; default auto)")
    p.add_argument("--k", default=None, help=f"comma-separated k for pass@k/maj@k (default {DEFAULT_KS}; "
                                             f"suites: {SUITE_KS})")
    p.add_argument("--n", type=int, default=None,
                   help="samples per problem (≥ max k; default max k; 0: greedy only)")
    add_eval_flags(p)
    p.add_argument("--out", help="output directory (default runs/eval-<model>-<objective>-<time>)")
    p.add_argument("--compare", nargs="+", metavar="DIR",
                   help="also draw these eval directories' pass@k curves (summary.json) on one chart")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,8,16"`` → ``(1, 8, 16)`` (sorted, unique, each ≥ 1)."""
    try:
        ks = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"--k must be comma-separated integers ≥ 1, got {text!r}")
    return tuple(ks)


def samples_for(ks: tuple[int, ...], n: int | None) -> int:
    """``n`` (default ``max(ks)``), checked: 0 (greedy only) or ``n ≥ max(ks)``."""
    n = max(ks) if n is None else n
    if n < 0 or 0 < n < max(ks):
        raise ValueError(f"--n {n} is smaller than the largest --k {max(ks)}: pass@k needs n ≥ k "
                         f"samples per problem (or --n 0 for greedy only)")
    return n


def run(args: argparse.Namespace) -> int:
    """``zoopt eval``: evaluate ``--model`` and/or chart ``--compare`` directories."""
    if args.suite or (args.objective and "," in args.objective) or (
            not args.model and args.compare and all(_is_suite_dir(d) for d in args.compare)):
        return run_suite(args)
    if not args.model and not args.compare:
        raise ValueError("zoopt eval needs --model M (or --compare DIR ...)")
    ks = parse_ks(args.k or DEFAULT_KS)
    n = samples_for(ks, args.n)
    console = Console()
    curves: dict[str, dict[int, float]] = {}
    out = Path(args.out) if args.out else None
    if args.model:
        cfg = eval_config(args.model, args.objective, args, n, ks)
        if args.source:
            cfg["objective_args"]["source"] = args.source
        label = model_label(args.model)
        out = out or Path("runs") / f"eval-{label}-{slug(cfg['objective'])}-{stamp()}"
        result = evaluate_model(cfg, progress=None if args.quiet else True)
        summary = {**result.summary, "model": str(args.model), "model_path": cfg["model"],
                   "objective": cfg["objective"], "objective_args": cfg.get("objective_args") or {},
                   "dtype": cfg["dtype"], "device": cfg["device"], "batch_size": cfg["batch_size"],
                   "ks": list(ks) if n else []}
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
        result.to_csv(out / "per_problem.csv")
        console.print(result.table())
        if n:
            curves[label] = {k: summary[f"pass@{k}"] for k in ks}
        console.print(f"wrote {out / 'summary.json'} and {out / 'per_problem.csv'}")
    for directory in args.compare or []:
        label, curve = read_curve(directory)
        unique, i = label, 2
        while unique in curves:
            unique, i = f"{label} ({i})", i + 1
        curves[unique] = curve
    if args.compare:
        out = out or Path("runs") / f"compare-{stamp()}"
        console.print(compare_table(curves))
    if curves:
        png = plots.plot_pass_at_k(curves, out / "pass_at_k.png")
        console.print(f"wrote {png}")
    return 0


def read_curve(directory: str | Path) -> tuple[str, dict[int, float]]:
    """``(label, {k: pass@k})`` from an eval directory's ``summary.json`` (or the file)."""
    path = Path(directory)
    path = path / "summary.json" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"--compare: no summary.json in {str(directory)!r}")
    summary = json.loads(path.read_text())
    curve = {int(key[5:]): float(v) for key, v in summary.items()
             if key.startswith("pass@") and key[5:].isdigit() and v is not None}
    if not curve:
        raise ValueError(f"--compare: {str(path)!r} has no pass@k values (evaluated with --n 0?)")
    return model_label(summary.get("model") or path.parent), curve


def compare_table(curves: dict[str, dict[int, float]]):
    ks = sorted({k for c in curves.values() for k in c})
    table = Table(title="pass@k")
    table.add_column("model")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    for label, curve in curves.items():
        table.add_row(label, *(f"{curve[k]:.4f}" if k in curve else "–" for k in ks))
    return table


# -- suites ---------------------------------------------------------------------------------
def _is_suite_dir(directory: str | Path) -> bool:
    path = Path(directory)
    return (path / "suite.json").is_file() or path.name == "suite.json"


def run_suite(args: argparse.Namespace) -> int:
    """``zoopt eval --suite NAME`` / ``--objective a,b,c`` (and ``--compare`` of suite directories)."""
    console = Console()
    tables: dict[str, list[dict]] = {}
    out = Path(args.out) if args.out else None
    if args.model:
        names = suite_objectives(args.suite, args.objective)
        title = args.suite or ",".join(names)
        ks = parse_ks(args.k or SUITE_KS)
        n = samples_for(ks, args.n)
        if n == 0:
            raise ValueError("--n 0: a suite's table needs sampled completions (--n ≥ the largest --k)")
        cfg = eval_config(args.model, title, args, n, ks)  # an objective name no run has: its objective_args go
        if args.source:
            cfg["objective_args"]["source"] = args.source
        label = model_label(args.model)
        out = out or Path("runs") / f"eval-{label}-{slug(title)}-{stamp()}"
        out.mkdir(parents=True, exist_ok=True)
        results = evaluate_suite(cfg, names, progress=None if args.quiet else True,
                                 announce=None if args.quiet else
                                 lambda i, name: console.print(f"[{i}/{len(names)}] {name}"))
        for b in results:
            if b.result is not None:
                folder = out / b.name
                folder.mkdir(exist_ok=True)
                summary = {**b.result.summary, "model": str(args.model), "objective": b.name,
                           "data_source": b.data_source, "ks": list(ks)}
                (folder / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
                b.result.to_csv(folder / "per_problem.csv")
            else:
                console.print(f"{b.name}: not evaluated: {b.error}")
        rows = suite_table(results, ks)
        settings = {"n_samples": n, "ks": list(ks), "n_problems": cfg["eval"]["n_problems"],
                    "temperature": cfg["eval"]["temperature"], "max_new_tokens": cfg["eval"]["max_new_tokens"],
                    "seed": cfg["seed"], "dtype": cfg["dtype"], "engine": cfg["engine"],
                    "objective_args": cfg.get("objective_args") or {}}
        suite = {"model": str(args.model), "model_path": cfg["model"], "suite": title, "objectives": names,
                 "settings": settings, "rows": rows}
        (out / "suite.json").write_text(json.dumps(jsonable(suite), indent=2))
        (out / "table.md").write_text(to_markdown(rows, f"{label} on {title}"))
        _write_csv(rows, out / "table.csv")
        tables[label] = rows
        console.print(suite_rich_table({label: rows}, f"{label} on {title} (%)"))
        console.print(f"wrote {out / 'table.md'}, {out / 'table.csv'}, {out / 'suite.json'} and one folder per benchmark")
    for directory in args.compare or []:
        if not _is_suite_dir(directory):
            raise ValueError(f"--compare: {str(directory)!r} has no suite.json (compare suites with suites)")
        path = Path(directory)
        data = json.loads((path / "suite.json" if path.is_dir() else path).read_text())
        label, i = model_label(data["model"]), 2
        base = label
        while label in tables:
            label, i = f"{base} ({i})", i + 1
        tables[label] = data["rows"]
    if args.compare:
        console.print(suite_rich_table(tables, "side by side (%)"))
    return 0


def _write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def suite_rich_table(tables: dict[str, list[dict]], title: str) -> Table:
    """Benchmarks as rows (each model's row under its benchmark when there are several), metrics as columns."""
    metrics = []
    for rows in tables.values():
        metrics += [m for m in metric_columns(rows) if m not in metrics]
    table = Table(title=title)
    table.add_column("benchmark")
    if len(tables) > 1:
        table.add_column("model")
    for m in metrics:
        table.add_column(m.replace("pass@", "Pass@").replace("maj@", "Maj@"), justify="right")
    table.add_column("problems", justify="right")
    table.add_column("source")
    benchmarks = []
    for rows in tables.values():
        benchmarks += [r["benchmark"] for r in rows if r["benchmark"] not in benchmarks]
    benchmarks.sort(key=lambda b: b == "average")
    for benchmark in benchmarks:
        for label, rows in tables.items():
            row = next((r for r in rows if r["benchmark"] == benchmark), None)
            if row is None:
                continue
            cells = [f"{row[m]:.1f}" if row.get(m) is not None else "–" for m in metrics]
            lead = [benchmark] + ([label] if len(tables) > 1 else [])
            where = row.get("source") or "–"
            if row.get("note"):
                where = row["note"] if benchmark == "average" else "not evaluated (see above)"
            table.add_row(*lead, *cells, str(row.get("n_problems") or "–"), where)
    return table
