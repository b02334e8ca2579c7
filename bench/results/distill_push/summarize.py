"""Summary of run.sh: per teacher kind, each seed's teacher and student success on the same 200 episodes, the
student's gap to its teacher (mean over seeds with a 95% bootstrap interval) and both latencies per chunk at batch 1.
Writes summary.json and copies each run's distill_summary.json, metrics.csv and logs here."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from robot_rl.stats import summarize, write_json

HERE = Path(__file__).resolve().parent
RUNS = HERE.parent.parent.parent / "runs" / "distill_push"
KINDS = ("flow", "diffusion", "flow_dagger", "flow_long")  # run_dagger.sh (dagger_episodes=50), run_long.sh


def main(seeds: list[int]) -> None:
    out: dict = {
        "task": "arm:push-sparse (state, 29 numbers), sparse reward, episode ends at success",
        "teachers": "robot-rl bc policy=flow|diffusion num_inference_steps=10 steps=3000 on 50 noisy-expert demos "
                    "(noise 0.3, data seed 100), one teacher per seed",
        "student": "robot-rl distill steps=3000 (one-step flow, warm-started from a flow teacher, fresh for a "
                   "diffusion teacher), on the demos' observations; flow_dagger: the same plus, after 1,500 steps, "
                   "the observations of 50 of the student's own episodes labelled by the teacher",
        "evaluation": "200 episodes per policy (one per env), deterministic (zero noise), the same starts for "
                      "teacher and student (eval seed = run seed)",
        "latency": "predict_chunk at batch 1, one thread, median over 300 calls after 10 warm-up calls, 2-core CPU",
        "seeds": seeds,
    }
    for kind in KINDS:
        done = [s for s in seeds if (RUNS / f"student_{kind}_s{s}" / "distill_summary.json").is_file()]
        if not done:
            continue
        rows = {}
        for s in done:
            run = RUNS / f"student_{kind}_s{s}"
            summary = json.loads((run / "distill_summary.json").read_text())
            dest = HERE / f"student_{kind}_s{s}"
            dest.mkdir(exist_ok=True)
            for name in ("distill_summary.json", "metrics.csv", "distill_config.json"):
                shutil.copy(run / name, dest / name)
            for log in (f"bc_{kind.removesuffix('_dagger').removesuffix('_long')}_s{s}.log", f"student_{kind}_s{s}.log"):
                shutil.copy(RUNS / log, HERE / log)
            ev, lat = summary["eval"], summary["latency"]
            rows[s] = {"teacher_success": 100 * ev["teacher"]["success_rate"],
                       "student_success": 100 * ev["student"]["success_rate"],
                       "teacher_ms": lat["teacher"]["median_ms"], "student_ms": lat["student"]["median_ms"],
                       "speedup": lat["speedup_median"], "final_loss": summary["final_loss"]}
        out[kind] = {
            "seeds": done,
            "per_seed": rows,
            **{key: summarize([r[key] for r in rows.values()])
               for key in ("teacher_success", "student_success", "speedup", "teacher_ms", "student_ms")},
            "student_minus_teacher": summarize([r["student_success"] - r["teacher_success"] for r in rows.values()]),
        }
    write_json(out, HERE / "summary.json")
    for kind in (k for k in KINDS if k in out):
        k = out[kind]
        print(f"{kind} (seeds {k['seeds']}): teacher {k['teacher_success']['mean']:.1f}%, student {k['student_success']['mean']:.1f}%, "
              f"gap {k['student_minus_teacher']['mean']:+.1f} {k['student_minus_teacher']['mean_ci']}, "
              f"{k['teacher_ms']['mean']:.2f} -> {k['student_ms']['mean']:.2f} ms ({k['speedup']['mean']:.1f}x)")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0, 1, 2])
