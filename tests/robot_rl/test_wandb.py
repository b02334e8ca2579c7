"""`logger=wandb`: a short real training run logs the CSV's scalars, under TensorBoard's grouped tags, and the run
config to an offline Weights & Biases run; a bad `logger=` fails at start with one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from robot_rl.config import ConfigError, compose_train_config

wandb = pytest.importorskip("wandb")

SMALL = ["agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32"]


def _records(run_file: Path) -> list[bytes]:
    """The records of a `.wandb` file. wandb 0.31 ships no Python reader, so this follows its documented
    LevelDB-log framing: a 7-byte file header (":W&B", magic 0xBEE1, version), then 32 KiB blocks of records, each
    with a 7-byte header (crc32c, little-endian length, type: 1 full, 2 first, 3 middle, 4 last)."""
    data = run_file.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room left in this block for a header: padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0 and length == 0:
            break
        payload, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):
            out.append(pending)
    return out


def _history(run_file: Path) -> list[dict[str, object]]:
    """The logged rows of an offline run, decoded with wandb's own protobuf schema."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for data in _records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def _config(run_file: Path) -> dict[str, object]:
    from wandb.proto import wandb_internal_pb2

    config: dict[str, object] = {}
    for data in _records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        config.update({item.key: json.loads(item.value_json) for item in updates})
    return config


def test_wandb_offline_run_gets_the_grouped_scalars_and_the_config(tmp_path: Path, monkeypatch) -> None:
    from robot_rl.trainer import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    run_dir = tmp_path / "run"
    cfg = compose_train_config([
        *SMALL, "logger=wandb", "wandb.project=robot_rl_test", "train.steps=300", "train.learning_starts=100",
        "train.eval_every=150", "env.num_eval_envs=2", "env.max_episode_steps=50", "train.video_size=[64,64]",
        "quiet=true", f"run_dir={run_dir}",
    ])
    Trainer(cfg, run_dir).run()

    assert (run_dir / "metrics.csv").is_file() and not (run_dir / "tensorboard").exists()
    runs = list((tmp_path / "wandb_dir" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    assert runs[0].name.endswith(run_id)
    run_file = runs[0] / f"run-{run_id}.wandb"
    deadline = time.monotonic() + 30
    video = (run_dir / "videos" / "final.mp4").is_file()  # rendering may be unavailable; then there is none
    while len(rows := _history(run_file)) < 2 + video and time.monotonic() < deadline:
        time.sleep(0.5)  # wandb's service process may still be writing the file after finish() returns
    steps = [r["env_step"] for r in rows if "env_step" in r]
    assert steps == [150, 300], rows
    logged = set().union(*rows)
    assert {"eval/return_mean", "eval/return_std", "time/wall_time_s", "time/env_steps_per_s",
            "update/critic_loss", "update/actor_loss"} <= logged, logged
    config = _config(run_file)
    assert config["train"]["steps"] == 300 and config["logger"] == "wandb", config
    if video:
        assert [r["video/final/_type"] for r in rows if "video/final/_type" in r] == ["video-file"], rows[-1]


def test_bad_logger_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"^logger must be one of tensorboard, wandb, none$"):
        compose_train_config(["logger=mlflow"])
    with pytest.raises(ConfigError, match=r"wandb.mode must be one of online, offline, disabled"):
        compose_train_config(["wandb.mode=sometimes"])
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig

    with pytest.raises(ConfigError, match=r"^logger must be one of tensorboard, wandb, none$"):
        compose_config("finetune", FinetuneConfig, ["base_policy=x", "logger=mlflow"])


def test_wandb_not_installed_fails_at_start_with_the_install_command(monkeypatch) -> None:
    monkeypatch.setattr("robot_rl.logger.importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install 'robot_rl\[wandb\]'"):
        compose_train_config(["logger=wandb"])


def test_offline_pretraining_logs_into_the_same_run_under_its_own_step(tmp_path: Path) -> None:
    """The Runner's and offline pretraining's loggers share the run's one W&B run: the offline rows go under
    `offline/`, plotted against `offline/offline_step`."""
    from robot_rl.logger import MetricsLogger

    class FakeRun:
        def __init__(self) -> None:
            self.metrics: dict[str, str | None] = {}
            self.rows: list[dict] = []

        def define_metric(self, name: str, step_metric: str | None = None) -> None:
            self.metrics[name] = step_metric

        def log(self, row: dict) -> None:
            self.rows.append(row)

    run = FakeRun()
    logger = MetricsLogger(tmp_path, columns=["offline_step", "critic_loss"], file_name="offline.csv",
                           step_key="offline_step", tensorboard=False, wandb_run=run, wandb_prefix="offline/")
    logger.log({"offline_step": 10, "critic_loss": 0.5, "eval_return_mean": float("nan")})
    logger.close()
    assert run.rows == [{"offline/offline_step": 10, "offline/update/critic_loss": 0.5}]
    assert run.metrics["offline/update/*"] == "offline/offline_step" and "update/*" not in run.metrics
    assert not (tmp_path / "tensorboard").exists()
