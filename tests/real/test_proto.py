"""The checked-in gRPC modules match ``bridge.proto`` and ``policy.proto`` (regenerate with ``make proto``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROTO_DIR = Path(__file__).resolve().parents[2] / "real" / "proto"


@pytest.mark.parametrize("stem", ["bridge", "policy"])
def test_generated_modules_are_up_to_date(tmp_path, stem):
    protoc = pytest.importorskip("grpc_tools.protoc")
    shutil.copy(PROTO_DIR / f"{stem}.proto", tmp_path / f"{stem}.proto")
    args = ["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}", str(tmp_path / f"{stem}.proto")]
    assert protoc.main(args) == 0
    grpc_py = (tmp_path / f"{stem}_pb2_grpc.py").read_text()
    grpc_py = grpc_py.replace(f"import {stem}_pb2 as {stem}__pb2", f"from . import {stem}_pb2 as {stem}__pb2")
    (tmp_path / f"{stem}_pb2_grpc.py").write_text(grpc_py)
    for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"):
        assert (tmp_path / name).read_text() == (PROTO_DIR / name).read_text(), f"{name} is stale: run make proto"


def test_protocol_constants():
    from robot_rl.real.proto import PROTOCOL, pb

    assert PROTOCOL == pb.DESCRIPTOR.package


def test_policy_protocol_constant():
    from robot_rl.real.proto import POLICY_PROTOCOL, policy_pb

    assert POLICY_PROTOCOL == policy_pb.DESCRIPTOR.package
