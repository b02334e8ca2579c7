"""robot_rl.device: bfloat16 on a CPU without bf16 hardware says so (an update there was 15x slower than fp32)."""
import warnings

import pytest

from robot_rl import device
from robot_rl.agents.sac import SAC, NetworkConfig, OptimiserConfig, SACConfig

AVX2_EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx avx2 fma bmi2\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


def test_native_bf16_is_read_from_the_cpu_flags():
    assert device.cpu_has_native_bf16(AVX2_EPYC) is False
    assert device.cpu_has_native_bf16(SAPPHIRE_RAPIDS) is True
    assert device.cpu_has_native_bf16(ARM) is None  # no x86 flags line: unknown, so nothing is said


def test_the_warning_names_the_key_and_what_to_do():
    message = device.bf16_cpu_warning(AVX2_EPYC)
    assert "agent.optimiser.bf16=true" in message and "agent.optimiser.bf16=false" in message
    assert device.bf16_cpu_warning(SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_warning(ARM) is None


@pytest.mark.parametrize("native", [False, True])
def test_a_bf16_agent_on_a_cpu_warns_only_without_bf16_hardware(monkeypatch, native):
    # a compile+bf16 Hopper run on an AVX2 EPYC was many times slower than fp32, without a word
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda cpuinfo=None: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), optimiser=OptimiserConfig(bf16=True)))
        SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16])))  # fp32: never
    messages = [str(w.message) for w in caught if "agent.optimiser.bf16" in str(w.message)]
    assert len(messages) == (0 if native else 1)


def test_a_long_fp32_run_on_a_bf16_cpu_is_told_of_the_faster_switch():
    hint = device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS)
    assert "agent.optimiser.compile=true agent.optimiser.bf16=true" in hint
    # not where bf16 is emulated or unknown, already on, on a GPU, or for a run too short to repay compilation
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=AVX2_EPYC) is None
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=ARM) is None
    assert device.bf16_cpu_hint("cpu", bf16=True, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_hint("cuda", bf16=False, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=10_000, cpuinfo=SAPPHIRE_RAPIDS) is None


def test_a_busy_machine_gets_the_free_cores_and_a_notice() -> None:
    """Before: threads=None kept torch's one-per-core beside other busy processes, 5-10x slower, with no word."""
    from robot_rl.device import choose_threads

    assert choose_threads(None, default=2, cores=2, load=0.3) == (2, None)  # a quiet machine: torch's default
    threads, notice = choose_threads(None, default=2, cores=2, load=3.5)
    assert threads == 1 and "threads=1" in notice and "load 3.5 on 2 cores" in notice
    assert choose_threads(None, default=8, cores=8, load=3.0)[0] == 5
    assert choose_threads(4, default=2, cores=2, load=9.0) == (4, None)  # what the user asked for is kept


def test_a_default_replay_too_big_for_memory_is_fitted_with_a_notice(tmp_path, capsys, monkeypatch) -> None:
    """`robot-rl train env.spec=arm:reach-pixels` (no preset) stopped at once: the default 1M transitions need 43 GB
    (issue 56, item 10). Unset, the capacity is what half the available memory holds, with one line saying so; an
    explicit capacity that does not fit is still the one-line error."""
    import yaml

    from robot_rl.cli import main

    monkeypatch.setattr("robot_rl.replay.available_memory", lambda device: 200_000_000)  # 0.2 GB
    small = ["env.spec=arm:reach", "train.steps=20", "train.learning_starts=10", "train.eval_every=20",
             "env.num_eval_envs=1", "env.max_episode_steps=10", "train.video=false",
             "agent.network.hidden_dims=[16,16]",
             "agent.network.critic_width=16", "agent.network.actor_width=16", "threads=1"]
    assert main(["train", *small, f"run_dir={tmp_path / 'run'}"]) == 0
    out = capsys.readouterr().out
    notice = next(line for line in out.splitlines() if line.startswith("train.replay_capacity: the default"))
    assert "1,000,000 transitions would need" in notice and "Set train.replay_capacity=N to choose" in notice
    fitted = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["train"]["replay_capacity"]
    assert 1000 <= fitted < 1_000_000 and f"using {fitted:,} (half of it)" in notice
    assert main(["train", *small, "train.replay_capacity=900000", f"run_dir={tmp_path / 'explicit'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.replay_capacity=900,000 needs" in err, err
