"""Every user-facing error derives from `UserError`, the one class `robot-rl` catches: one line, exit status 2."""

import pytest

from robot_rl import cli
from robot_rl.errors import UserError


def _errors() -> list[type]:
    from robot_rl.envs import UnknownEnvError
    from robot_rl.policies.encoders import BackboneWeightsError
    from robot_rl.policies.io import PolicyFormatError
    from robot_rl.real.client import BridgeError

    from robot_rl.bc import BCError
    from robot_rl.checkpoint import CheckpointError
    from robot_rl.classifier import ClassifierError
    from robot_rl.config import ConfigError
    from robot_rl.datasets import DatasetError
    from robot_rl.device import DeviceError
    from robot_rl.export import ExportError
    from robot_rl.finetune import FinetuneError
    from robot_rl.hil.connect import CommandError
    from robot_rl.replay import ReplayMemoryError
    from robot_rl.seeds import SeedsError

    return [ConfigError, UnknownEnvError, CheckpointError, DatasetError, BCError, PolicyFormatError, FinetuneError,
            SeedsError, ReplayMemoryError, DeviceError, ExportError, ClassifierError, BackboneWeightsError,
            CommandError, BridgeError]


@pytest.mark.parametrize("error", _errors(), ids=lambda e: e.__name__)
def test_each_error_is_one_line_and_exit_2(capsys, monkeypatch, error):
    assert issubclass(error, UserError)
    import dataclasses

    instance = error.__new__(error)
    Exception.__init__(instance, "what went wrong")  # BridgeError's own __init__ takes a gRPC status code
    monkeypatch.setitem(cli.COMMANDS, "export", dataclasses.replace(cli.COMMANDS["export"], run=_raise(instance)))
    assert cli.main(["export"]) == 2
    assert capsys.readouterr().err == "robot-rl: error: what went wrong\n"


def test_the_old_bases_still_catch_them():
    """`except ValueError` (or RuntimeError) around a call keeps working: the base class is added, none taken away."""
    from robot_rl.checkpoint import CheckpointError
    from robot_rl.config import ConfigError

    assert issubclass(ConfigError, ValueError) and issubclass(CheckpointError, RuntimeError)


def _raise(error: Exception):
    def run(args: list[str]) -> int:
        raise error

    return run
