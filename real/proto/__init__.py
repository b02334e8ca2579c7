"""Generated gRPC modules for ``bridge.proto`` (the bridge's wire protocol) and ``policy.proto`` (the policy
server's, ``robot-rl serve-policy``).

Regenerate after editing the .proto with ``make proto`` (needs ``grpcio-tools``, in the ``dev`` extra). The
generated code checks at import that the installed ``protobuf`` and ``grpcio`` are at least the versions it
was generated with; ``pyproject.toml`` pins those lower bounds. ``tests/real/test_proto.py`` fails when the
checked-in modules are stale.
"""

from . import bridge_pb2 as pb
from . import bridge_pb2_grpc as pb_grpc
from . import policy_pb2 as policy_pb
from . import policy_pb2_grpc as policy_pb_grpc

PROTOCOL = "robot_rl.bridge.v1"
POLICY_PROTOCOL = "robot_rl.policy.v1"

__all__ = ["POLICY_PROTOCOL", "PROTOCOL", "pb", "pb_grpc", "policy_pb", "policy_pb_grpc"]
