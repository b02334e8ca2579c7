"""The command registry: `robot-rl --help` is built from it, and every registered command has a working `--help`."""

import pytest

from robot_rl.cli import COMMANDS, main


def test_help_lists_every_registered_command_with_its_summary(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert len(COMMANDS) == 14
    for name, command in COMMANDS.items():
        assert f"  {name} " in out and command.summary in out, name
    assert main(["trian"]) == 2
    assert f"choose one of: {', '.join(COMMANDS)}" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_a_help_page(capsys, name):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: robot-rl {name}") and "Keys" in out
    for example in COMMANDS[name].examples[:1]:
        assert example.split("  #")[0].rstrip() in out, example


def test_the_robot_commands_name_the_bridges_token_variable():
    """cli/robot.py names it itself, so that `robot-rl --help` imports no gRPC; it must stay the bridge's."""
    from robot_rl.real.guard import TOKEN_ENV as BRIDGE_TOKEN_ENV

    from robot_rl.cli.robot import TOKEN_ENV

    assert TOKEN_ENV == BRIDGE_TOKEN_ENV
