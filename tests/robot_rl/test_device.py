"""robot_rl.device: bfloat16 on a CPU without bf16 hardware says so (an update there was 15x slower than fp32)."""
import warnings

import pytest

from robot_rl import device
from robot_rl.agents.sac import SAC, SACConfig

AVX2_EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx avx2 fma bmi2\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


def test_native_bf16_is_read_from_the_cpu_flags():
    assert device.cpu_has_native_bf16(AVX2_EPYC) is False
    assert device.cpu_has_native_bf16(SAPPHIRE_RAPIDS) is True
    assert device.cpu_has_native_bf16(ARM) is None  # no x86 flags line: unknown, so nothing is said


def test_the_warning_names_the_key_and_what_to_do():
    message = device.bf16_cpu_warning(AVX2_EPYC)
    assert "agent.bf16=true" in message and "agent.bf16=false" in message
    assert device.bf16_cpu_warning(SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_warning(ARM) is None


@pytest.mark.parametrize("native", [False, True])
def test_a_bf16_agent_on_a_cpu_warns_only_without_bf16_hardware(monkeypatch, native):
    # a compile+bf16 Hopper run on an AVX2 EPYC was many times slower than fp32, without a word
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda cpuinfo=None: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SAC(4, 2, SACConfig(hidden_dims=[16], bf16=True))
        SAC(4, 2, SACConfig(hidden_dims=[16]))  # fp32: never
    messages = [str(w.message) for w in caught if "agent.bf16" in str(w.message)]
    assert len(messages) == (0 if native else 1)


def test_a_long_fp32_run_on_a_bf16_cpu_is_told_of_the_faster_switch():
    hint = device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS)
    assert "agent.compile=true agent.bf16=true" in hint
    # not where bf16 is emulated or unknown, already on, on a GPU, or for a run too short to repay compilation
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=AVX2_EPYC) is None
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=100_000, cpuinfo=ARM) is None
    assert device.bf16_cpu_hint("cpu", bf16=True, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_hint("cuda", bf16=False, steps=100_000, cpuinfo=SAPPHIRE_RAPIDS) is None
    assert device.bf16_cpu_hint("cpu", bf16=False, steps=10_000, cpuinfo=SAPPHIRE_RAPIDS) is None
