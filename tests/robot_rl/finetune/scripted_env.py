"""A scripted batched env for bookkeeping tests: known rewards and episode ends, the BatchedEnv contract."""

from __future__ import annotations

import torch
from robot_rl.envs.core import BatchedEnv


class ScriptedEnv(BatchedEnv):
    """State = [env index, step in episode, episode count]; reward = 1 + step in episode (so sums identify the
    steps); env i's episodes end after `lengths[i]` steps, terminated if `terminate[i]` else truncated."""

    def __init__(self, lengths: list[int], terminate: list[bool]) -> None:
        self.num_envs, self.device, self.action_dim = len(lengths), torch.device("cpu"), 2
        self.observation_spec = {"state": ((3,), torch.float32)}
        self.lengths = torch.tensor(lengths)
        self.terminate = torch.tensor(terminate)
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        self.episodes = torch.zeros(self.num_envs, dtype=torch.long)
        self.returns = torch.zeros(self.num_envs)
        self.actions: list[torch.Tensor] = []
        self.closed = False

    def _obs(self) -> dict[str, torch.Tensor]:
        return {"state": torch.stack([torch.arange(self.num_envs), self.t, self.episodes], 1).float()}

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        self.t.zero_()
        self.returns.zero_()
        return self._obs()

    def step(self, action: torch.Tensor):
        self.actions.append(action.clone())
        reward = (1 + self.t).float()
        self.t += 1
        self.returns += reward
        done = self.t >= self.lengths
        final = self._obs()
        terminated, truncated = done & self.terminate, done & ~self.terminate
        info = {"final_obs": final, "episode_return": self.returns.clone(), "success": terminated}
        self.t[done] = 0
        self.returns[done] = 0.0
        self.episodes[done] += 1
        return self._obs(), reward, terminated, truncated, info

    def render(self, index: int = 0):
        raise RuntimeError("no rendering in the scripted test env")

    def close(self) -> None:
        self.closed = True
