"""Pretrain a ResNet-10 backbone on simulated push frames, for `agent.encoder.kind=pretrained` (a frozen backbone).

Usage: python pretrain_backbone.py OUT_DIR [--episodes 300] [--size 48] [--epochs 6] [--seed 0] [--threads 1]
                                   [--no-mirror]

Why: HIL-SERL and SERL learn from cameras through a frozen ImageNet ResNet-10; this machine cannot download one, and
end to end from 48x48 frames RLPD on push reached 8% in 40k env steps (bench/results/push_pixels: the policies
never find the cube). In simulation the scene's state is known, so a backbone can be taught to *see* the task:
regress, from each camera's frame, where the cube, the target and the hand are. The RL run then loads the backbone
frozen from the file written here, exactly as a user's ImageNet weights would load, and learns only the pooling,
projection, actor and critic (with `agent.encoder.cache_embeddings=true` its updates cost what state-based updates cost).
The policy still sees pixels and proprioception only; the simulator's state is used here, offline, as labels.

Data: `ArmEnv("push", "sparse", pixels=True)` at `--size`, env seeds 10,000,000 + episode (the training and
evaluation envs of `robot-rl train` use small seeds), each episode run to the 100-step limit without ending at
success (the frames past success are the ones a success classifier must see), under one of four behaviours by
episode index: the scripted push expert (acting on the simulator's state) with action noise 0.1, 0.3 or 1.0, or
uniform random actions. Labels (world frame, metres): cube x y, target x y, hand x y z, cube - hand x y z,
target - cube x y, and the cube-to-target distance in the table plane; clipped to the training set's 0.5-99.5th
percentiles (a cube pushed off the table falls without end) and standardised over the training set.

Model: torchvision-layout ResNet-10 (`robot_rl.policies.encoders.ResNetBackbone("resnet10")`, ImageNet-normalised
input, as `PretrainedEncoder` feeds it) -> per camera a linear head on the flattened feature map (the downstream
learned pooling also weights positions). Adam 1e-3, batch 128, MSE; 10% of the episodes held out, their error
(in cm, per label) printed after every epoch and written to OUT_DIR/pretrain.json with the time taken. Unless
`--no-mirror`, each training frame is flipped left to right with probability 1/2 and its y labels negated: the
task's mirror symmetry (y -> -y; both cameras lie in the mirror plane), which the RL runs use on their frames
(`data.mirror`, `train.mirror_online`), so the backbone and heads must read reflected frames as well as plain ones.
Writes OUT_DIR/resnet10_push{size}.pt: the backbone's state dict in torchvision's names plus each camera's head as
its frozen readout (`readout.front.*`, `readout.wrist.*`: 13 standardised estimates from the flattened feature map,
for `agent.encoder.readout=true`; `load_backbone` ignores them), and keeps the collected frames in
OUT_DIR/frames_{episodes}x{size}.npz (read instead of collecting again when present).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import STATE_LAYOUT
from robot_rl.envs.arm.experts import ScriptedExpert
from robot_rl.policies.encoders import IMAGENET_MEAN, IMAGENET_STD, ResNetBackbone
from torch import nn

CAMERAS = ("pixels/front", "pixels/wrist")
LABELS = ("cube_x", "cube_y", "target_x", "target_y", "hand_x", "hand_y", "hand_z", "cube_rel_hand_x",
          "cube_rel_hand_y", "cube_rel_hand_z", "target_rel_cube_x", "target_rel_cube_y", "cube_target_distance")
SEED_BASE = 10_000_000
MIRRORED = [i for i, name in enumerate(LABELS) if name.endswith("_y")]  # negated by the reflection y -> -y


def labels_of(full: np.ndarray) -> np.ndarray:
    s = STATE_LAYOUT
    cube, target, hand = full[s["cube_pos"]], full[s["target_pos"]], full[s["ee_pos"]]
    rel = full[s["target_rel_cube"]][:2]
    return np.concatenate([cube[:2], target[:2], hand, full[s["cube_rel_ee"]], rel,
                           [np.linalg.norm(rel)]]).astype(np.float32)


def collect(episodes: int, size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    env = ArmEnv("push", "sparse", pixels=True, pixel_size=(size, size), end_on_success=False)
    frames = {c: [] for c in CAMERAS}
    labels, episode_of = [], []
    rng = np.random.default_rng(SEED_BASE)
    t0 = time.time()
    for e in range(episodes):
        kind = e % 4
        expert = ScriptedExpert("push", 1, noise=(0.1, 0.3, 1.0)[kind], seed=SEED_BASE + e) if kind < 3 else None
        obs, _ = env.reset(seed=SEED_BASE + e)
        for _ in range(100):
            full = env.privileged_state()
            for c in CAMERAS:
                frames[c].append(obs[c])
            labels.append(labels_of(full))
            episode_of.append(e)
            if expert is None:
                action = rng.uniform(-1, 1, 4).astype(np.float32)
            else:
                action = expert.act(torch.from_numpy(full)[None])[0].numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        if (e + 1) % 50 == 0:
            print(f"collected {e + 1}/{episodes} episodes, {len(labels)} frames, {time.time() - t0:.0f}s", flush=True)
    env.close()
    return {c: np.stack(v) for c, v in frames.items()}, np.stack(labels), np.asarray(episode_of)


class Pretrainer(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.backbone = ResNetBackbone("resnet10")
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        with torch.no_grad():
            flat = self.backbone(torch.zeros(1, 3, size, size)).numel()
        self.heads = nn.ModuleDict({c.replace("/", "__"): nn.Linear(flat, len(LABELS)) for c in CAMERAS})

    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).float() / 255.0
        return self.backbone((x - self.mean) / self.std).flatten(1)

    def forward(self, camera: str, pixels: torch.Tensor) -> torch.Tensor:
        return self.heads[camera.replace("/", "__")](self.features(pixels))

    def both(self, front: torch.Tensor, wrist: torch.Tensor) -> torch.Tensor:
        f = self.features(torch.cat([front, wrist]))
        n = front.shape[0]
        return torch.cat([self.heads["pixels__front"](f[:n]), self.heads["pixels__wrist"](f[n:])])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--episodes", type=int, default=300)
    p.add_argument("--size", type=int, default=48)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-mirror", dest="mirror", action="store_false", help="no left-right flips of training frames")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cache = out / f"frames_{args.episodes}x{args.size}.npz"  # the collected data, for another training run
    if cache.is_file():
        data = np.load(cache)
        frames, labels, episode_of = {c: data[c.replace("/", "__")] for c in CAMERAS}, data["labels"], data["episode"]
    else:
        frames, labels, episode_of = collect(args.episodes, args.size)
        np.savez(cache, labels=labels, episode=episode_of, **{c.replace("/", "__"): v for c, v in frames.items()})
    collect_s = time.time() - t0
    held = episode_of % 10 == 9
    # A cube knocked off the table falls tens of metres (no floor): clipped to the training set's 0.5-99.5th
    # percentiles, such outliers stop dominating the scale and the squared error
    lo, hi = np.percentile(labels[~held], 0.5, axis=0), np.percentile(labels[~held], 99.5, axis=0)
    labels = np.clip(labels, lo, hi)
    mean, std = labels[~held].mean(0), labels[~held].std(0) + 1e-6
    y = torch.from_numpy((labels - mean) / std)
    signs = np.ones(len(LABELS), np.float32)
    signs[MIRRORED] = -1.0
    y_mirrored = torch.from_numpy((labels * signs - mean) / std)  # the labels of the reflected scene
    x = {c: torch.from_numpy(v) for c, v in frames.items()}
    train_idx, test_idx = np.flatnonzero(~held), np.flatnonzero(held)
    model = Pretrainer(args.size)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps_per_epoch = len(train_idx) // args.batch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs * steps_per_epoch)
    gen = np.random.default_rng(args.seed)
    history = []
    for epoch in range(args.epochs):
        model.train()
        order = gen.permutation(train_idx)
        t1 = time.time()
        for i in range(steps_per_epoch):
            idx = torch.from_numpy(order[i * args.batch:(i + 1) * args.batch])
            # both cameras in one batch: batch norm's running statistics (what the frozen backbone normalises with
            # downstream) are then those of the batches it trained on; camera-by-camera batches left them a blend of
            # two distributions that neither batch had, and held-out errors of 5-20 cm in eval mode
            front, wrist, target = x["pixels/front"][idx], x["pixels/wrist"][idx], y[idx]
            if args.mirror:
                flip = torch.from_numpy(gen.random(len(idx)) < 0.5)
                front = torch.where(flip[:, None, None, None], front.flip(-2), front)
                wrist = torch.where(flip[:, None, None, None], wrist.flip(-2), wrist)
                target = torch.where(flip[:, None], y_mirrored[idx], target)
            pred = model.both(front, wrist)
            loss = (pred - torch.cat([target, target])).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        errors = {}
        with torch.no_grad():
            for c in CAMERAS:
                pred = torch.cat([model(c, x[c][torch.from_numpy(test_idx[j:j + 512])])
                                  for j in range(0, len(test_idx), 512)])
                err = ((pred - y[test_idx]).abs() * torch.from_numpy(std)).mean(0) * 100  # cm
                errors[c] = {name: round(float(v), 2) for name, v in zip(LABELS, err, strict=True)}
                if args.mirror:  # the reflected held-out frames against the reflected scene's labels
                    pred = torch.cat([model(c, x[c][torch.from_numpy(test_idx[j:j + 512])].flip(-2))
                                      for j in range(0, len(test_idx), 512)])
                    err = ((pred - y_mirrored[test_idx]).abs() * torch.from_numpy(std)).mean(0) * 100
                    errors[f"{c} mirrored"] = {name: round(float(v), 2) for name, v in zip(LABELS, err, strict=True)}
        history.append({"epoch": epoch + 1, "seconds": round(time.time() - t1), "held_out_mean_abs_error_cm": errors})
        print(f"epoch {epoch + 1}: {time.time() - t1:.0f}s, held-out error (cm) front "
              f"{errors['pixels/front']} wrist {errors['pixels/wrist']}", flush=True)
    weights = out / f"resnet10_push{args.size}.pt"
    readouts = {f"readout.{c.split('/')[1]}.{k}": v for c in CAMERAS
                for k, v in model.heads[c.replace("/", "__")].state_dict().items()}
    torch.save({**model.backbone.state_dict(), **readouts}, weights)
    (out / "pretrain.json").write_text(json.dumps({
        "command": f"python pretrain_backbone.py {args.out} --episodes {args.episodes} --size {args.size} "
                   f"--epochs {args.epochs} --seed {args.seed} --threads {args.threads}"
                   + ("" if args.mirror else " --no-mirror"),
        "readout_labels": list(LABELS), "mirror": args.mirror,
        "frames": int(len(labels)), "train_frames": int(len(train_idx)), "held_out_frames": int(len(test_idx)),
        "episodes": args.episodes, "size": args.size, "collect_seconds": round(collect_s),
        "train_seconds": round(time.time() - t0 - collect_s), "label_std_cm": {
            n: round(float(s) * 100, 2) for n, s in zip(LABELS, std, strict=True)},
        "history": history, "weights": weights.name}, indent=1))
    print(f"wrote {weights} ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main()
