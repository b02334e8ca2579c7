"""Image encoders for camera observations: the building blocks the pixel learners of issue 16 stand on.

Two kinds, as the robot-learning results that learn from cameras use them:

* ``ConvEncoder``: a small convolutional encoder trained end to end with the critic (DrQ: four 3x3 conv layers of
  32 channels, the first with stride 2, then a linear layer, LayerNorm and tanh), with ``random_shift``, DrQ's
  augmentation (pad by repeating the border, crop back at a random offset per image);
* ``PretrainedEncoder``: a frozen ResNet backbone (``resnet18``, or the ``resnet10`` HIL-SERL uses: one basic
  block per stage) loaded from a weights file the user provides (no download at run time), followed by learned
  spatial pooling (``SpatialLearnedEmbeddings``, HIL-SERL's: per channel, ``num_features`` learned weightings of
  the feature map's positions) and a linear projection. The parameter names are torchvision's, so a
  ``torchvision.models.resnet18`` state dict (``.pth`` or ``.safetensors``) loads as it is; its ``fc.*``
  classifier is ignored. The same file may carry a frozen linear readout per camera (``readout.<camera>.*``, e.g. a
  pose estimator's head): with it the encoder hands on the readout's outputs and nothing in it trains.

``CameraFusion`` encodes every camera group of an observation (``pixels`` or ``pixels/<camera>``) and joins the
features with the proprioceptive ``state``. Images come in as the environments give them: uint8 ``[B, H, W, C]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robot_rl.errors import UserError

__all__ = [
    "ENCODERS", "POOLS", "BackboneWeightsError", "CameraFusion", "ConvEncoder", "PretrainedEncoder", "ResNetBackbone",
    "SpatialLearnedEmbeddings", "SpatialSoftmax",
    "camera_batch", "camera_fusion", "frozen_backbone", "load_backbone", "load_readouts", "random_shift",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESNET_BLOCKS = {"resnet10": (1, 1, 1, 1), "resnet18": (2, 2, 2, 2)}


def to_chw_float(pixels: Tensor) -> Tensor:
    """uint8 ``[B, H, W, C]`` -> float ``[B, C, H, W]`` in [0, 1], keeping the frames' channels-last strides (not
    copied to channels-first: the CPU's convolutions run 1.3-1.7x faster on it)."""
    return pixels.permute(0, 3, 1, 2).to(torch.float32, copy=True).div_(255.0)  # a new tensor: divided in place


def random_shift(frames: Tensor, pad: int = 4, generator: torch.Generator | None = None) -> Tensor:
    """DrQ's augmentation on frames ``[B, H, W, C]`` (uint8 as stored, or any dtype): each frame padded by ``pad``
    (border repeated) and cropped back to ``H x W`` at its own random offset in ``[0, 2 pad]`` (so shifted by up to
    ``pad`` pixels either way).

    It runs before the frames become floats: one gather of bytes instead of a float padding and two float gathers,
    and the result keeps the frames' channels-last layout, which the CPU's convolutions run fastest on (a small
    camera update took 75 ms with the float shift in the channels-first layout, 2026-12-06)."""
    if pad == 0:
        return frames
    b, h, w, c = frames.shape
    dev = frames.device
    oy = torch.randint(0, 2 * pad + 1, (b,), device=dev, generator=generator) - pad
    ox = torch.randint(0, 2 * pad + 1, (b,), device=dev, generator=generator) - pad
    # a clamped index is the repeated border; no value goes back to the host
    rows = (oy[:, None] + torch.arange(h, device=dev)).clamp_(0, h - 1)
    cols = (ox[:, None] + torch.arange(w, device=dev)).clamp_(0, w - 1)
    pixel = (rows[:, :, None] * w + cols[:, None, :]).reshape(b, h * w, 1).expand(b, h * w, c)
    return frames.reshape(b, h * w, c).gather(1, pixel).reshape(b, h, w, c)


def camera_batch(obs: Mapping[str, Tensor] | Tensor, cameras: Mapping[str, Sequence[int]], n: int, like: Tensor) -> list[Tensor]:
    """The uint8 images [N, H, W, C] of each camera group in `cameras` (in its order) on the device of `like`; a
    missing group, a wrong size or dtype is a ValueError naming the group and the expected shape."""
    out = []
    for group, shape in cameras.items():
        expected = f"uint8 [N, {', '.join(str(int(v)) for v in shape)}]"
        if not isinstance(obs, Mapping) or group not in obs:
            has = sorted(obs) if isinstance(obs, Mapping) else "a bare state tensor"
            raise ValueError(f"observation has no camera group {group!r} (expected {expected} images; got {has})")
        x = obs[group]
        if x.dtype != torch.uint8 or x.dim() != 4 or tuple(x.shape[1:]) != tuple(int(v) for v in shape) \
                or x.shape[0] != n:
            raise ValueError(f"camera group {group!r}: expected {expected} images with N={n} (the state's), got "
                             f"{str(x.dtype).replace('torch.', '')} {list(x.shape)}")
        out.append(x.to(like.device))
    return out


POOLS = ("flatten", "spatial_softmax")


class SpatialSoftmax(nn.Module):
    """``[B, C, H, W]`` -> ``[B, 2 C]``: each channel's expected image position (x, y in [-1, 1]) under a softmax
    over its positions, with one learned temperature (Levine et al. 2016's keypoints). It keeps where a feature is
    and drops what the rest of the map looks like: what a test that is a distance between two objects needs (is the
    cube at the target?), with a 2 C-wide output in place of a C H W one (25 x 25 x 32 flattened into 50 features is
    1M weights to fit from a few hundred labelled frames; 64 keypoint coordinates into 50 is 3.2k)."""

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.flatten(), ys.flatten()], dim=1))  # [H W, 2]
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, features: Tensor) -> Tensor:
        b, c = features.shape[:2]
        weights = torch.softmax(features.flatten(2) / self.log_temperature.exp(), dim=-1)  # [B, C, H W]
        return (weights @ self.grid).reshape(b, 2 * c)


class ConvEncoder(nn.Module):
    """DrQ's encoder: uint8 ``[B, H, W, C]`` -> ``[B, feature_dim]``, trained end to end (critic gradients).

    ``pool``: how the last feature map becomes the linear layer's input: ``"flatten"`` (DrQ's) or
    ``"spatial_softmax"`` (``SpatialSoftmax``, a keypoint per channel)."""

    def __init__(
        self, image_shape: Sequence[int] = (84, 84, 3), feature_dim: int = 50, channels: int = 32, layers: int = 4,
        shift_pad: int = 4, pool: str = "flatten",
    ) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")
        h, w, c = (int(v) for v in image_shape)
        # in-place ReLUs: a convolution's backward needs its input, not its output
        convs: list[nn.Module] = [nn.Conv2d(c, channels, 3, stride=2), nn.ReLU(inplace=True)]
        for _ in range(layers - 1):
            convs += [nn.Conv2d(channels, channels, 3, stride=1), nn.ReLU(inplace=True)]
        if pool == "spatial_softmax":
            convs = convs[:-1]  # a softmax over the map: a ReLU would flatten every negative position into one
        self.convs = nn.Sequential(*convs)
        with torch.no_grad():
            _, fc, fh, fw = self.convs(torch.zeros(1, c, h, w)).shape
        self.pool = nn.Flatten(1) if pool == "flatten" else SpatialSoftmax(fh, fw)
        flat = fc * fh * fw if pool == "flatten" else 2 * fc
        self.head = nn.Sequential(nn.Linear(flat, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())
        self.feature_dim, self.shift_pad = feature_dim, shift_pad

    def forward(self, pixels: Tensor, augment: bool = False) -> Tensor:
        x = to_chw_float(random_shift(pixels, self.shift_pad) if augment else pixels).sub_(0.5)
        return self.head(self.pool(self.convs(x)))


class _BasicBlock(nn.Module):
    """torchvision's ``BasicBlock`` (same parameter names): two 3x3 convs with batch norm and a residual."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNetBackbone(nn.Module):
    """A ResNet without its classifier: float ``[B, 3, H, W]`` (ImageNet-normalised) -> ``[B, 512, H/32, W/32]``."""

    def __init__(self, arch: str = "resnet18") -> None:
        super().__init__()
        if arch not in RESNET_BLOCKS:
            raise ValueError(f"unknown backbone {arch!r}; choose one of {', '.join(RESNET_BLOCKS)}")
        self.arch = arch
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), RESNET_BLOCKS[arch], strict=True)):
            layer = []
            for j in range(blocks):
                layer.append(_BasicBlock(inplanes, planes, 2 if (i > 0 and j == 0) else 1))
                inplanes = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class BackboneWeightsError(UserError, ValueError):
    """A backbone weights file that is missing, unreadable or not the architecture asked for."""


def _read_weights(path: Path, arch: str) -> Mapping[str, Tensor]:
    """The state dict in a local weights file (``.safetensors``, else ``torch.load(weights_only=True)``), or a
    `BackboneWeightsError` saying what is wrong with the file."""
    if not path.is_file():
        raise BackboneWeightsError(f"backbone weights {path}: no such file (robot_rl never downloads weights; give "
                                   f"a local {arch} state dict, e.g. torchvision's, saved with torch.save or safetensors)")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle and safetensors raise their own types for garbled files
        raise BackboneWeightsError(f"backbone weights {path}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(state, Mapping):
        raise BackboneWeightsError(f"backbone weights {path}: expected a state dict, got {type(state).__name__}")
    return state


def load_backbone(path: str | Path, arch: str = "resnet18") -> ResNetBackbone:
    """A frozen backbone (eval mode, no gradients) from a local weights file: a torchvision-style state dict in
    ``.pth``/``.pt`` (``torch.load(weights_only=True)``) or ``.safetensors``. Classifier keys (``fc.*``) are ignored;
    a missing or misshapen backbone weight is a `BackboneWeightsError` naming it."""
    path = Path(path)
    state = _read_weights(path, arch)
    backbone = ResNetBackbone(arch)
    wanted = backbone.state_dict()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise BackboneWeightsError(f"backbone weights {path}: not a {arch} state dict (missing {missing[0]!r} and "
                                   f"{len(missing) - 1} more)")
    wrong = [k for k in wanted if tuple(state[k].shape) != tuple(wanted[k].shape)]
    if wrong:
        raise BackboneWeightsError(f"backbone weights {path}: {wrong[0]!r} has shape "
                                   f"{tuple(state[wrong[0]].shape)}, {arch} needs {tuple(wanted[wrong[0]].shape)}")
    backbone.load_state_dict({k: state[k] for k in wanted})
    return backbone.eval().requires_grad_(False)


def frozen_backbone(weights: str | Path | None, arch: str = "resnet10") -> ResNetBackbone:
    """`load_backbone(weights, arch)`, or without a file an uninitialised frozen `arch` (for a saved model whose
    state dict carries the backbone's weights)."""
    return load_backbone(weights, arch) if weights else ResNetBackbone(arch).eval().requires_grad_(False)


def load_readouts(path: str | Path, readouts: Mapping[str, nn.Linear], arch: str = "resnet10") -> None:
    """Fill each camera group's frozen linear readout (group -> ``nn.Linear``, as `PretrainedEncoder` builds it) from
    a local weights file, read once: ``readout.<camera>.weight``/``.bias`` for ``pixels/<camera>`` (``readout.pixels``
    for a lone ``pixels`` group), or a ``readout.weight``/``readout.bias`` shared by every camera. What a perception
    model trained beside the backbone (a pose estimator's head, say) maps the flattened feature map to; a missing or
    misshapen readout is a `BackboneWeightsError` that says which keys and sizes it needs."""
    path = Path(path)
    state = _read_weights(path, arch)
    for group, linear in readouts.items():
        own = f"readout.{group.split('/', 1)[-1]}"
        prefix = own if f"{own}.weight" in state else "readout"
        if f"{prefix}.weight" not in state or f"{prefix}.bias" not in state:
            raise BackboneWeightsError(
                f"backbone weights {path}: no readout for camera group {group!r} (a readout needs {own}.weight and "
                ".bias, or readout.weight and .bias for every camera)")
        weight, bias = state[f"{prefix}.weight"], state[f"{prefix}.bias"]
        out_features, in_features = linear.weight.shape
        if tuple(weight.shape) != (out_features, in_features) or tuple(bias.shape) != (out_features,):
            raise BackboneWeightsError(
                f"backbone weights {path}: {prefix}.weight has shape {tuple(weight.shape)}, the camera's "
                f"{in_features} backbone features into encoder_feature_dim={out_features} outputs need "
                f"({out_features}, {in_features}) (set encoder_feature_dim to the readout's outputs)")
        linear.load_state_dict({"weight": weight, "bias": bias})


class SpatialLearnedEmbeddings(nn.Module):
    """Learned pooling of a feature map ``[B, C, H, W]`` -> ``[B, C * num_features]``: per channel,
    ``num_features`` learned weightings of the positions (where in the image a channel's activation matters)."""

    def __init__(self, channels: int, height: int, width: int, num_features: int = 8) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(channels, height, width, num_features))
        nn.init.normal_(self.kernel, std=(height * width) ** -0.5)  # unit-variance output for unit-variance maps

    def forward(self, features: Tensor) -> Tensor:
        return torch.einsum("bchw,chwk->bck", features, self.kernel).flatten(1)


class PretrainedEncoder(nn.Module):
    """Frozen ResNet + learned spatial pooling + linear: uint8 ``[B, H, W, 3]`` -> ``[B, feature_dim]``. Only the
    pooling and projection train; with ``augment`` the input is randomly shifted first.

    With ``readout`` (a frozen ``nn.Linear`` from the flattened feature map to ``feature_dim`` outputs, e.g. the
    head of a pose estimator trained with the backbone, built here and filled by `load_readouts`) the encoder is a
    frozen perception model:
    its features are the readout's outputs, nothing in it trains, and what a replay caches per frame is those
    ``feature_dim`` numbers. Why: a learned pooling trained by the critic's gradient alone did not turn a backbone
    that sees the cube to ~1 cm into features a policy could find the cube with (bench/results/push_pixels_pretrained);
    the readout hands the policy what the backbone was taught to see."""

    def __init__(
        self, backbone: ResNetBackbone, image_shape: Sequence[int] = (128, 128, 3), feature_dim: int = 256,
        num_features: int = 8, shift_pad: int = 4, readout: bool = False,
    ) -> None:
        super().__init__()
        self.backbone = backbone.eval().requires_grad_(False)
        h, w, _ = (int(v) for v in image_shape)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        with torch.no_grad():
            _, c, fh, fw = self.backbone(torch.zeros(1, 3, h, w)).shape
        self.readout: nn.Linear | None = None
        self.pool: nn.Module | None = None
        self.head: nn.Module | None = None
        if readout:
            self.readout = nn.Linear(c * fh * fw, feature_dim).requires_grad_(False)
        else:
            self.pool = SpatialLearnedEmbeddings(c, fh, fw, num_features)
            self.head = nn.Sequential(nn.Linear(c * num_features, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())
        # what `backbone_features` gives per image
        self.backbone_shape = (int(c), int(fh), int(fw)) if self.readout is None else (int(feature_dim),)
        self.feature_dim, self.shift_pad = feature_dim, shift_pad

    def train(self, mode: bool = True) -> PretrainedEncoder:
        super().train(mode)
        self.backbone.eval()  # frozen: batch-norm statistics stay ImageNet's
        return self

    def backbone_features(self, pixels: Tensor, augment: bool = False) -> Tensor:
        """The frozen part: what a learner may cache per stored frame, since it never changes."""
        x = to_chw_float(random_shift(pixels, self.shift_pad) if augment else pixels)
        with torch.no_grad():
            features = self.backbone((x - self.mean) / self.std)
            return features if self.readout is None else self.readout(features.flatten(1))

    def forward(self, pixels: Tensor, augment: bool = False) -> Tensor:
        """uint8 frames ``[B, H, W, 3]``, or their cached ``backbone_features`` ``[B, *backbone_shape]`` (any float
        type; what a replay that caches embeddings hands back, already augmented or not)."""
        features = pixels.float() if pixels.is_floating_point() else self.backbone_features(pixels, augment)
        if self.readout is not None:
            return features
        return self.head(self.pool(features))


class CameraFusion(nn.Module):
    """One encoder per camera group (``pixels``, ``pixels/<camera>``), features joined with ``state``:
    ``{"state": [B, S], "pixels/front": uint8 [B, H, W, C], ...}`` -> ``[B, S + sum of feature dims]``."""

    def __init__(self, encoders: Mapping[str, nn.Module], state_dim: int) -> None:
        super().__init__()
        bad = [k for k in encoders if k != "pixels" and not k.startswith("pixels/")]
        if bad:
            raise ValueError(f"camera groups are 'pixels' or 'pixels/<camera>', got {bad[0]!r}")
        self.keys = sorted(encoders)
        self.encoders = nn.ModuleDict({k.replace("/", "__"): encoders[k] for k in self.keys})
        self.out_dim = state_dim + sum(int(m.feature_dim) for m in encoders.values())

    def frozen_features(self, group: str, pixels: Tensor) -> Tensor:
        """The frozen backbone's features of a camera group's uint8 frames, in float16 (half the bytes; feature
        values stay far inside its range): what a replay caching embeddings stores in place of the frames, and what
        `forward` accepts for that group. Only for `PretrainedEncoder` groups."""
        encoder = self.encoders[group.replace("/", "__")]
        if not isinstance(encoder, PretrainedEncoder):
            raise TypeError(f"camera group {group!r} has a {type(encoder).__name__}: only a frozen pretrained "
                            "backbone's features can be cached")
        return encoder.backbone_features(pixels).half()

    def shared_inputs(self, obs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """`obs` as the encoder and its target copy both read it (a critic update's next frames; DrQ shifts those
        once for both): each camera's frames shifted at random (`random_shift`, its encoder's `shift_pad`), and a
        pretrained encoder's frames turned into its frozen backbone's features, once for the two copies that share
        the backbone (a third of a frozen ResNet update). Encode the result without `augment`; cached features
        (floats) pass as they are."""
        out = dict(obs)
        for k in self.keys:
            if not obs[k].is_floating_point():
                encoder = self.encoders[k.replace("/", "__")]
                frames = random_shift(obs[k], encoder.shift_pad)
                out[k] = encoder.backbone_features(frames) if isinstance(encoder, PretrainedEncoder) else frames
        return out

    def forward(self, obs: Mapping[str, Tensor], augment: bool = False) -> Tensor:
        missing = [k for k in self.keys if k not in obs]
        if missing:
            raise KeyError(f"observation has no camera group {missing[0]!r} (has {sorted(obs)})")
        feats = [self.encoders[k.replace("/", "__")](obs[k], augment) for k in self.keys]
        return torch.cat([obs["state"].float(), *feats], dim=1)


ENCODERS = ("conv", "pretrained")


def camera_fusion(
    cameras: Mapping[str, Sequence[int]], state_dim: int, *, encoder: str = "conv", feature_dim: int = 50,
    channels: int = 32, layers: int = 4, shift_pad: int = 4, backbone: str = "resnet10", spatial_features: int = 8,
    weights: str | Path | None = None, readout: bool = False,
) -> CameraFusion:
    """One encoder per camera group (group -> image shape (H, W, C)) fused with a ``state_dim`` state: the one
    constructor for the pixel SAC learner and for the policy exported from it, so its weights always load.

    ``encoder="conv"``: a ``ConvEncoder`` (``channels``, ``layers``) per camera, trained end to end.
    ``encoder="pretrained"``: a ``PretrainedEncoder`` per camera on *one* frozen ``backbone`` shared by all cameras
    (frozen, so sharing changes nothing but memory and load time), with its own pooling (``spatial_features``) and
    projection. ``weights`` is the user's local backbone file (``load_backbone``); without it the backbone is built
    uninitialised, for a saved policy whose state dict carries the backbone's weights. ``readout``: each camera's
    features are the frozen linear readout in ``weights`` (`load_readouts`, ``feature_dim`` outputs) in place of the
    learned pooling and projection; without ``weights`` it is built uninitialised, as the backbone is.
    """
    if encoder == "conv":
        encoders = {k: ConvEncoder(shape, feature_dim, channels, layers, shift_pad) for k, shape in cameras.items()}
    elif encoder == "pretrained":
        frozen = frozen_backbone(weights, backbone)
        encoders = {k: PretrainedEncoder(frozen, shape, feature_dim, spatial_features, shift_pad, readout)
                    for k, shape in cameras.items()}
        if readout and weights:
            load_readouts(weights, {k: e.readout for k, e in encoders.items()}, backbone)
    else:
        raise ValueError(f"unknown encoder {encoder!r}; choose one of {', '.join(ENCODERS)}")
    return CameraFusion(encoders, state_dim)
