"""Networks and policy models. Imports nothing from the rest of the project."""

from policies.actor import TanhGaussianActor
from policies.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleMLP, QEnsemble
from policies.mlp import mlp

__all__ = [
    "EnsembleLayerNorm",
    "EnsembleLinear",
    "EnsembleMLP",
    "QEnsemble",
    "TanhGaussianActor",
    "mlp",
]
