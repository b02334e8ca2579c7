"""Episode-level view of a classifier on its held-out episodes: as a terminating reward with `consecutive` k, does it
fire before the true success (a false early end), at it, late, or never?"""
import sys

import torch

from robot_rl.classifier import load_classifier
from robot_rl.classifier_train import load_labelled_frames

clf = load_classifier(sys.argv[2])
frames = load_labelled_frames(sys.argv[1])
held = clf.metrics["heldout_episodes"]
for thr in (0.5, 0.7, 0.9):
    for k in (1, 2, 3):
        early = exact = late = missed = fired_fail = ok_fail = 0
        for e in held:
            sel = frames.episode == e
            prob = clf.probability({c: frames.obs[c][sel] for c in clf.cameras})
            hit = (prob >= thr).int()
            streak = torch.zeros_like(hit)
            for t in range(len(hit)):
                streak[t] = (streak[t - 1] + 1 if t else 1) * hit[t]
            fire = torch.nonzero(streak >= k).flatten()
            true = torch.nonzero(frames.label[sel]).flatten()
            f = int(fire[0]) if len(fire) else None
            s = int(true[0]) if len(true) else None
            if s is None:
                fired_fail += f is not None
                ok_fail += f is None
            elif f is None:
                missed += 1
            elif f < s:
                early += 1
            elif f <= s + k - 1:
                exact += 1
            else:
                late += 1
        print(f"threshold {thr} consecutive {k}: successful episodes: on time {exact}, late {late}, early {early}, "
              f"missed {missed} | failed episodes: fired {fired_fail}, silent {ok_fail}")
