"""Image encoders: DrQ's random shift, the end-to-end conv encoder, a frozen ResNet from a local weights file with
learned spatial pooling, and the fusion of several cameras with the state."""

from __future__ import annotations

import pytest
import torch
from robot_rl.policies.encoders import (
    BackboneWeightsError,
    CameraFusion,
    ConvEncoder,
    PretrainedEncoder,
    ResNetBackbone,
    SpatialSoftmax,
    load_backbone,
    random_shift,
)


def _pixels(b: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, h, w, 3), generator=g, dtype=torch.uint8)


def test_random_shift_is_a_crop_of_the_border_padded_image() -> None:
    x = torch.randint(0, 256, (6, 10, 12, 3), dtype=torch.uint8)  # frames as stored: [B, H, W, C]
    g = torch.Generator().manual_seed(1)
    out = random_shift(x, pad=2, generator=g)
    assert out.dtype == torch.uint8 and out.shape == x.shape
    padded = torch.nn.functional.pad(x.permute(0, 3, 1, 2).float(), (2, 2, 2, 2), mode="replicate")
    g = torch.Generator().manual_seed(1)
    oy, ox = torch.randint(0, 5, (6,), generator=g), torch.randint(0, 5, (6,), generator=g)
    for i in range(6):
        assert torch.equal(out[i].permute(2, 0, 1).float(), padded[i, :, oy[i]:oy[i] + 10, ox[i]:ox[i] + 12])
    assert len({(int(a), int(b)) for a, b in zip(oy, ox, strict=True)}) > 1  # not one offset for the batch
    assert torch.equal(random_shift(x, pad=0), x)


def test_the_encoders_convolutions_see_frames_channels_last() -> None:
    """The layout the CPU's convolutions run fastest on, with and without the shift."""
    seen = []
    enc = ConvEncoder((16, 16, 3), feature_dim=8, channels=4, layers=2, shift_pad=2)
    enc.convs[0].register_forward_pre_hook(lambda _, args: seen.append(args[0].is_contiguous(
        memory_format=torch.channels_last)))
    enc(_pixels(5, 16, 16), augment=True).sum().backward()
    enc(_pixels(5, 16, 16))
    assert seen == [True, True]


def test_conv_encoder_trains_end_to_end() -> None:
    enc = ConvEncoder((84, 84, 3), feature_dim=50)
    pix = _pixels(4, 84, 84)
    feats = enc(pix, augment=True)
    assert feats.shape == (4, 50) and feats.abs().max() <= 1.0  # tanh
    feats.sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    assert torch.equal(enc(pix), enc(pix))  # without augmentation: deterministic


def test_spatial_softmax_gives_each_channels_peak_position() -> None:
    """A keypoint per channel: a sharp peak at row 2, column 7 of an 11 x 9 map is at x = 7/8 * 2 - 1, y = 2/10 * 2 - 1
    (the grid spans [-1, 1]); a flat map's keypoint is the centre."""
    pool = SpatialSoftmax(11, 9)
    maps = torch.zeros(2, 3, 11, 9)
    maps[0, 0, 2, 7] = 50.0  # channel 0 of image 0 peaks; everything else is flat
    out = pool(maps)
    assert out.shape == (2, 6)
    assert out[0, :2].tolist() == pytest.approx([7 / 8 * 2 - 1, 2 / 10 * 2 - 1], abs=1e-4)
    assert out[0, 2:].abs().max() < 1e-5 and out[1].abs().max() < 1e-5


def test_conv_encoder_with_keypoints_trains_and_keeps_drq_weights_names() -> None:
    """`pool="spatial_softmax"` trains end to end (temperature included); the default keeps DrQ's parameter names,
    so saved pixel policies load as before."""
    enc = ConvEncoder((48, 48, 3), feature_dim=16, channels=8, layers=3, pool="spatial_softmax")
    enc(_pixels(4, 48, 48), augment=True).sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    assert sum(p.numel() for p in enc.parameters()) < sum(p.numel() for p in ConvEncoder((48, 48, 3), 16, 8, 3).parameters())
    assert sorted(ConvEncoder((32, 32, 3), 8, 4, 2).state_dict()) == [
        "convs.0.bias", "convs.0.weight", "convs.2.bias", "convs.2.weight", "head.0.bias", "head.0.weight",
        "head.1.bias", "head.1.weight"]
    with pytest.raises(ValueError, match="unknown pool 'max'; choose one of flatten, spatial_softmax"):
        ConvEncoder((32, 32, 3), pool="max")


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_local_resnet_weights_file_loads_frozen(tmp_path, suffix: str) -> None:
    """A torchvision-style resnet18 state dict (with its fc classifier) made here, as a user would provide one."""
    torch.manual_seed(0)
    source = ResNetBackbone("resnet18")
    for m in source.modules():  # non-trivial batch-norm statistics, as trained weights have
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    state = {**source.state_dict(), "fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)}
    path = tmp_path / f"resnet18{suffix}"
    if suffix == ".pt":
        torch.save(state, path)
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    backbone = load_backbone(path)
    x = torch.rand(2, 3, 64, 64)
    assert torch.allclose(backbone(x), source.eval()(x))
    assert not any(p.requires_grad for p in backbone.parameters())

    enc = PretrainedEncoder(backbone, image_shape=(64, 64, 3), feature_dim=32, num_features=4)
    enc.train()
    assert not enc.backbone.training  # batch-norm statistics stay frozen in training mode
    out = enc(_pixels(3, 64, 64), augment=True)
    assert out.shape == (3, 32)
    out.sum().backward()
    trainable = [n for n, p in enc.named_parameters() if p.requires_grad]
    assert trainable and all(n.startswith(("pool.", "head.")) for n in trainable)


def test_bad_weights_files_are_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such file .*never downloads"):
        load_backbone(tmp_path / "nothing.pth")
    torch.save(ResNetBackbone("resnet10").state_dict(), tmp_path / "r10.pt")
    with pytest.raises(ValueError, match="not a resnet18 state dict"):
        load_backbone(tmp_path / "r10.pt", "resnet18")
    assert load_backbone(tmp_path / "r10.pt", "resnet10").arch == "resnet10"  # HIL-SERL's size


def test_cameras_fuse_with_the_state() -> None:
    fusion = CameraFusion({"pixels/front": ConvEncoder((32, 32, 3), 16), "pixels/wrist": ConvEncoder((24, 24, 3), 8)},
                          state_dim=7)
    obs = {"state": torch.rand(5, 7), "pixels/front": _pixels(5, 32, 32), "pixels/wrist": _pixels(5, 24, 24, 1)}
    out = fusion(obs)
    assert out.shape == (5, 7 + 16 + 8) == (5, fusion.out_dim)
    assert torch.equal(out[:, :7], obs["state"])
    with pytest.raises(KeyError, match="pixels/wrist"):
        fusion({"state": obs["state"], "pixels/front": obs["pixels/front"]})
    with pytest.raises(ValueError, match="camera groups"):
        CameraFusion({"front": ConvEncoder((32, 32, 3), 16)}, state_dim=7)


def test_shared_inputs_are_one_shift_and_one_frozen_backbone_pass_for_both_copies() -> None:
    """A critic update's next frames, prepared once, give the encoder and its target copy what each would compute
    from those shifted frames; the frozen backbone runs once (the copies share it)."""
    import copy

    torch.manual_seed(0)
    backbone = ResNetBackbone("resnet10").eval().requires_grad_(False)
    fusion = CameraFusion({"pixels/front": PretrainedEncoder(backbone, (32, 32, 3), feature_dim=8, num_features=2,
                                                             shift_pad=2),
                           "pixels/wrist": ConvEncoder((24, 24, 3), 8, shift_pad=2)}, state_dim=3)
    target = copy.deepcopy(fusion, memo={id(backbone): backbone})
    for p in target.parameters():
        p.data.add_(0.01)  # the target lags the encoder
    obs = {"state": torch.rand(4, 3), "pixels/front": _pixels(4, 32, 32), "pixels/wrist": _pixels(4, 24, 24, 1)}
    calls = []
    backbone.register_forward_hook(lambda *_: calls.append(1))
    torch.manual_seed(1)
    shared = fusion.shared_inputs(obs)
    assert len(calls) == 1 and shared["pixels/wrist"].dtype == torch.uint8
    torch.manual_seed(1)
    shifted = {**obs, **{k: random_shift(obs[k], 2) for k in ("pixels/front", "pixels/wrist")}}
    for module in (fusion, target):
        assert torch.allclose(module(shared), module(shifted), atol=1e-6)


def test_a_garbled_weights_file_is_named(tmp_path) -> None:
    (tmp_path / "r10.pt").write_bytes(b"not a pickle")
    with pytest.raises(BackboneWeightsError, match=r"r10.pt: unreadable"):
        load_backbone(tmp_path / "r10.pt", "resnet10")
