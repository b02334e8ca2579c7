"""Networks and policy models. Imports nothing from the rest of the project.

Behaviour-cloning policies (``MLPPolicy``, ``DiffusionPolicy``, ``FlowPolicy``) predict action chunks played with
receding horizon (``ActionChunker``); ``save_policy`` / ``load_policy`` store them as safetensors weights plus a
JSON config, loadable for inference without any training code.
"""

from policies.actor import TanhGaussianActor
from policies.bc_mlp import MLPPolicy
from policies.chunk_policy import ChunkPolicy
from policies.chunking import ActionChunker
from policies.diffusion import DiffusionPolicy
from policies.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleMLP, QEnsemble
from policies.flow import FlowPolicy
from policies.io import PolicyFormatError, load_policy, save_policy
from policies.mlp import mlp
from policies.normalize import Normalizer

__all__ = [
    "ActionChunker",
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
