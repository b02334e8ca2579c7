"""The checked-in gRPC modules match ``bridge.proto`` (regenerate with ``make proto``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROTO_DIR = Path(__file__).resolve().parents[2] / "real" / "proto"


def test_generated_modules_are_up_to_date(tmp_path):
    protoc = pytest.importorskip("grpc_tools.protoc")
    shutil.copy(PROTO_DIR / "bridge.proto", tmp_path / "bridge.proto")
    args = ["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}", str(tmp_path / "bridge.proto")]
    assert protoc.main(args) == 0
    grpc_py = (tmp_path / "bridge_pb2_grpc.py").read_text()
    grpc_py = grpc_py.replace("import bridge_pb2 as bridge__pb2", "from . import bridge_pb2 as bridge__pb2")
    (tmp_path / "bridge_pb2_grpc.py").write_text(grpc_py)
    for name in ("bridge_pb2.py", "bridge_pb2.pyi", "bridge_pb2_grpc.py"):
        assert (tmp_path / name).read_text() == (PROTO_DIR / name).read_text(), f"{name} is stale: run make proto"


def test_protocol_constants():
    from robot_rl.real.proto import PROTOCOL, pb

    assert PROTOCOL == pb.DESCRIPTOR.package
