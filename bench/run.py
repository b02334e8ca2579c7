"""The benchmark runner `make bench` calls: parts (a)-(d) in one invocation, one result file, one table.

    python -m bench.run [--quick] [--parts a,b,c,d] [--name NAME] [--threads N] [--compile] [--bf16]
                        [--update-readme]

writes bench/results/<YYYY-MM-DD>-<name>.json (machine, versions, configs, every figure) and prints the
markdown table that bench/README.md shows (--update-readme puts it there).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import common

PARTS = {
    "a": "training throughput (bench/throughput.py)",
    "b": "learner updates/s and FLOPs (bench/learner.py)",
    "c": "time to threshold (bench/time_to_threshold.py)",
    "d": "batched env throughput (bench/envs_throughput.py)",
}
README = common.BENCH_DIR / "README.md"
BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"


def run_envs_throughput(quick: bool) -> dict[str, Any]:
    """Part (d) lives in bench/envs_throughput.py (its own author); call its `main(argv)` if it is there."""
    if not (common.BENCH_DIR / "envs_throughput.py").exists():
        return {"skipped": "bench/envs_throughput.py is not in this checkout", "rows": []}
    from bench import envs_throughput

    with tempfile.TemporaryDirectory(prefix="bench-envs-") as d:
        out = Path(d) / "envs_throughput.json"
        returned = envs_throughput.main([*(["--quick"] if quick else []), "--out", str(out)])
        part = json.loads(out.read_text()) if out.exists() else returned
    if not isinstance(part, dict):
        return {"skipped": "bench/envs_throughput.py returned no figures", "rows": []}
    return part


def run_part(key: str, args: Any, threads: int) -> dict[str, Any]:
    if key == "a":
        from bench import throughput

        return throughput.run(args.quick, threads, args.device, *common.variants(args))
    if key == "b":
        from bench import learner

        return learner.run(args.quick, threads, args.device, *common.variants(args))
    if key == "c":
        from bench import time_to_threshold

        return time_to_threshold.run(args.quick, threads, args.device, args.tasks.split(","), args.seeds)
    return run_envs_throughput(args.quick)


def tables(parts: dict[str, dict[str, Any]]) -> str:
    """(a)-(c) share one table; (d) has its own columns, so its own table."""
    main_rows = [r for k in "abc" for r in parts.get(k, {}).get("rows", [])]
    out = [common.markdown_table(main_rows, common.ROW_COLUMNS)] if main_rows else []
    d = parts.get("d")
    if d:
        # envs_throughput.py writes its own markdown table (one row per env count, one column per implementation).
        body = common.markdown_table(d["rows"]) if d.get("rows") else d.get("table") or d.get("skipped", "no figures")
        out.append(f"(d) batched envs, HalfCheetah-v5 env steps/s (bench/envs_throughput.py):\n\n{body}")
    errors = [f"({k}) failed: {p['error']}" for k, p in parts.items() if "error" in p]
    return "\n\n".join(out + errors)


def update_readme(text: str) -> None:
    readme = README.read_text()
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"{README} has no {BEGIN} ... {END} section to update")
    head, rest = readme.split(BEGIN, 1)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--parts", default="abcd", help="which parts to run, e.g. 'ab' or 'a,c' (default: all)")
    p.add_argument("--name", default=None, help="result file name: <date>-<name>.json (default: quick or full)")
    p.add_argument("--tasks", default="pendulum,cartpole", help="(c): tasks to run")
    p.add_argument("--seeds", type=int, default=None, help="(c): seeds per task (default: 1 quick; 3 Pendulum)")
    p.add_argument("--update-readme", action="store_true", help="write the table into bench/README.md")
    p.add_argument("--remark", default="", help="a sentence for the table's header, e.g. how loaded the machine was")
    args = p.parse_args(argv)
    keys = [k for k in args.parts.replace(",", "") if k in PARTS]
    threads = common.setup(args)
    name = args.name or ("quick" if args.quick else "full")
    started = time.monotonic()
    payload: dict[str, Any] = {
        "name": name, "date": datetime.datetime.now().isoformat(timespec="seconds"), "quick": args.quick,
        "command": shlex.join([os.path.basename(sys.executable), "-m", "bench.run", *sys.argv[1:]]),
        "machine": common.machine_info(threads, args.device), "parts": {},
    }
    for key in keys:
        print(f"== ({key}) {PARTS[key]}{' [quick]' if args.quick else ''}", flush=True)
        t0 = time.monotonic()
        try:
            part = run_part(key, args, threads)
        except Exception as e:  # one broken part must not lose the figures of the others
            traceback.print_exc()
            part = {"error": f"{type(e).__name__}: {e}", "rows": []}
        part["elapsed_s"] = round(time.monotonic() - t0, 1)
        payload["parts"][key] = part
    payload["elapsed_s"] = round(time.monotonic() - started, 1)
    payload["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    payload["remark"] = args.remark
    payload["table"] = table = tables(payload["parts"])
    path = common.write_json(common.results_path(name), payload)

    m = payload["machine"]
    text = (f"{'Quick-mode figures (short runs, indicative only)' if args.quick else 'Full figures'}, "
            f"{payload['date'][:10]}, `{path.name}`: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch "
            f"threads, {m['device']}, load average {(m['load_average'] or [math.nan])[0]:.1f} at start. "
            f"{args.remark + ' ' if args.remark else ''}Command: `{payload['command']}`.\n\n{table}")
    print("\n" + text + f"\n\nresults: {path}")
    if args.update_readme:
        update_readme(text)
    return 1 if any("error" in part for part in payload["parts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
