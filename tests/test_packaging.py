"""The installed package layout: the top-level folders install under robot_rl and nothing of theirs can be shadowed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
MAPPED = {"envs": "robot_rl.envs", "policies": "robot_rl.policies", "real": "robot_rl.real",
          "configs": "robot_rl.configs"}


def test_every_package_folder_is_listed_in_pyproject():
    """A wheel holds only the listed packages; a new subfolder left out would import in a checkout only."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {package: folder for folder, package in MAPPED.items()}
    found = {"robot_rl" + ("." + ".".join(p.parent.relative_to(REPO / "robot_rl").parts) if p.parent != REPO /
                           "robot_rl" else "") for p in (REPO / "robot_rl").rglob("__init__.py")}
    for folder, package in MAPPED.items():
        for p in (REPO / folder).rglob("__init__.py"):
            found.add(".".join([package, *p.parent.relative_to(REPO / folder).parts]))
    assert sorted(tool["packages"]) == sorted(found)


def test_a_user_script_beside_folders_named_like_ours_runs(tmp_path):
    """A user's own envs/, configs/, policies/ and real/ beside their script must not replace robot_rl's."""
    for name in MAPPED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} package')\n")
    (tmp_path / "script.py").write_text(
        "import torch\n"
        "from robot_rl import envs\n"
        "from robot_rl.config import compose_train_config\n"
        "from robot_rl.trainer import Trainer, build_agent\n"
        "from robot_rl.real.teleop import make_teleop\n"
        "cfg = compose_train_config(['env.spec=gym:Pendulum-v1'])\n"
        "env = envs.make(cfg.env.spec, num_envs=1, seed=0)\n"
        "obs = env.reset()\n"
        "agent = build_agent(cfg, env)\n"
        "obs, reward, terminated, truncated, info = env.step(torch.zeros(1, env.action_dim))\n"
        "make_teleop('scripted', task='reach')\n"
        "print('ran', type(agent).__name__, float(reward[0]) <= 0.0)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                            env=environ, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ran SAC True" in result.stdout


def test_building_the_package_prints_no_warnings(tmp_path):
    """Before: ~160 lines of setuptools warnings on every install (the preset folders under configs/ were data
    directories that setuptools treats as unlisted packages)."""
    source = tmp_path / "src"  # a copy: building in place would leave build/ in the checkout
    source.mkdir()
    for name in ["pyproject.toml", "README.md", "LICENSE"]:
        shutil.copy(REPO / name, source / name)
    for folder in ["robot_rl", *MAPPED]:
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "warn" not in (out.stdout + out.stderr).lower(), (out.stdout + out.stderr)[:2000]
