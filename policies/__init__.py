"""Networks and policy models. Imports nothing from the rest of the project.

Behaviour-cloning policies (``MLPPolicy``, ``DiffusionPolicy``, ``FlowPolicy``) predict action chunks played with
receding horizon (``ActionChunker``); ``save_policy`` / ``load_policy`` store them as safetensors weights plus a
JSON config, loadable for inference without any training code. `ActorPolicy` (a SAC actor), `ResidualPolicy` and
`NoiseSteeredPolicy` (residual RL and DSRL results) save the same way (`robot-rl export`).
"""

from robot_rl.policies.actor import TanhGaussianActor
from robot_rl.policies.actor_policy import ActorPolicy
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.chunking import ActionChunker
from robot_rl.policies.composed import NoiseSteeredPolicy, ResidualPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.encoders import (
    CameraFusion,
    ConvEncoder,
    PretrainedEncoder,
    load_backbone,
    random_shift,
)
from robot_rl.policies.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleMLP, QEnsemble
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import PolicyFormatError, load_policy, save_policy
from robot_rl.policies.mlp import mlp
from robot_rl.policies.normalize import Normalizer

__all__ = [
    "ActionChunker",
    "ActorPolicy",
    "NoiseSteeredPolicy",
    "ResidualPolicy",
    "CameraFusion",
    "ConvEncoder",
    "PretrainedEncoder",
    "load_backbone",
    "random_shift",
    "ChunkPolicy",
    "DiffusionPolicy",
    "EnsembleLayerNorm",
    "EnsembleLinear",
    "EnsembleMLP",
    "FlowPolicy",
    "MLPPolicy",
    "Normalizer",
    "PolicyFormatError",
    "QEnsemble",
    "TanhGaussianActor",
    "load_policy",
    "mlp",
    "save_policy",
]
