"""Action chunking with receding-horizon execution, for a batch of environments.

A chunked policy predicts `horizon` actions at once and plays the first `execute` of them before it plans
again (Diffusion Policy, ACT). With N environments the queues run out at different times once episodes end
at different steps, so the state is per env: `pos[i]` is the index of env i's next action in its chunk, and
the queue of env i is empty when `pos[i] >= execute`.

`act(plan)` asks `plan()` for a new chunk for the whole batch only when some queue is empty, and only those
envs take it; every other env keeps playing its current chunk. One prediction for the batch (rather than
one per env) keeps the policy call a single batched forward pass, and the merge is a `torch.where`, so
there is no Python loop over envs.

`reset(env_ids)` empties the queues of exactly those envs, so their next `act` plans from the new episode's
first observation. Call it for every env whose episode ended (`terminated | truncated` after `env.step`,
the envs autoreset); otherwise an env would start its next episode with the tail of a chunk planned in
the previous one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class ActionChunker:
    """Per-env queues of planned actions (see the module docstring).

    Args:
        horizon: actions per predicted chunk (H).
        execute: actions played from each chunk before planning again, 1 <= execute <= horizon
            (default: horizon, i.e. open-loop over the whole chunk).
    """

    def __init__(self, horizon: int, execute: int | None = None) -> None:
        execute = horizon if execute is None else execute
        if horizon < 1 or not 1 <= execute <= horizon:
            raise ValueError(f"need 1 <= execute <= horizon, got horizon={horizon}, execute={execute}")
        self.horizon, self.execute = int(horizon), int(execute)
        self.queue: Tensor | None = None  # [N, H, A]: the chunk each env is playing
        self.pos: Tensor | None = None  # [N] long: index of each env's next action in its chunk
        self.replanned: Tensor | None = None  # [N] bool: envs that took a new chunk at the last act

    def act(self, plan: Callable[[], Tensor]) -> Tensor:
        """The next action [N, A] of every env; calls `plan() -> [N, H, A]` when some queue is empty."""
        if self.queue is None or self.pos is None:
            chunk = self._check(plan(), None)
            self.queue = chunk.clone()
            self.pos = torch.zeros(chunk.shape[0], dtype=torch.long, device=chunk.device)
            self.replanned = torch.ones(chunk.shape[0], dtype=torch.bool, device=chunk.device)
        else:
            need = self.pos >= self.execute
            self.replanned = need
            if bool(need.any()):
                chunk = self._check(plan(), self.queue)
                self.queue = torch.where(need[:, None, None], chunk, self.queue)
                self.pos = torch.where(need, torch.zeros_like(self.pos), self.pos)
        action = self.queue[torch.arange(self.queue.shape[0], device=self.queue.device), self.pos]
        self.pos = self.pos + 1
        return action

    def reset(self, env_ids: Tensor | None = None) -> None:
        """Empty the queues of `env_ids` (bool mask [N] or indices); None empties all (and forgets N)."""
        if env_ids is None:
            self.queue = self.pos = self.replanned = None
            return
        if self.pos is None:
            return  # nothing planned yet: every queue is already empty
        ids = torch.as_tensor(env_ids, device=self.pos.device)
        if ids.dtype == torch.bool:
            if ids.shape != self.pos.shape:
                raise ValueError(f"reset mask has shape {tuple(ids.shape)}, expected ({self.pos.shape[0]},)")
            self.pos = torch.where(ids, torch.full_like(self.pos, self.execute), self.pos)
        else:
            self.pos = self.pos.index_fill(0, ids.reshape(-1).long(), self.execute)

    def _check(self, chunk: Tensor, queue: Tensor | None) -> Tensor:
        if chunk.dim() != 3 or chunk.shape[1] != self.horizon:
            raise ValueError(f"plan() must return [N, {self.horizon}, A], got {tuple(chunk.shape)}")
        if queue is not None and chunk.shape != queue.shape:
            raise ValueError(
                f"plan() returned {tuple(chunk.shape)} but the queues hold {tuple(queue.shape)}; "
                "call reset() (no arguments) when the batch size changes"
            )
        return chunk
