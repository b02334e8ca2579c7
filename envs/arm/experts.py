"""Scripted experts for the ``arm:`` tasks, batched in torch and driven by the full task state.

In the state tasks that state is the observation. In the ``-pixels`` tasks the observation hides it (proprioception
and cameras only); there the expert is *privileged*: it acts on ``BatchedEnv.privileged_state()``, the simulator's
full state, while the recorded demonstrations hold only the observation (``make_expert(..., privileged=True)``,
``robot-rl collect``).

``ScriptedExpert(task, num_envs, noise=0.0, seed=None, device="cpu")`` keeps a small phase machine per env
and maps a batch of observations (``{"state": [N, 29], ...}`` or the bare ``[N, 29]`` tensor, layout
``robot_rl.envs.arm.STATE_LAYOUT``) to actions ``[N, 4]`` in [-1, 1]. Motions are proportional moves of the grip
point towards a waypoint, saturated at the env's 2.5 cm per step:

* ``reach``: straight to the target, gripper open.
* ``track``: to where the moving target will be two control steps ahead (its velocity follows from its position),
  gripper open.
* ``push``: gripper closed; rise to 7 cm, move to a point 6 cm behind the cube on the target-cube line,
  descend to the table, then push along the line while steering back onto it; if the hand drifts more than
  2 cm off the line (or ends up beside or in front of the cube) it lifts and approaches again.
* ``pick_place``: above the cube with the gripper open, descend to the cube's centre, close (until the pads
  stop moving), carry the grip point to the target; if the cube is lost it starts over.

``noise`` is the standard deviation of i.i.d. Gaussian noise added to every action component (then clipped
to [-1, 1]); it comes from the expert's own ``torch.Generator`` (seeded with ``seed``), so runs are
reproducible. Noise degrades the experts gracefully, which is what mixed-quality demonstration datasets need.

Episode boundaries: call ``reset(env_ids)`` for envs whose episode ended (e.g. ``terminated | truncated``
after ``env.step``). As a safety net the expert also resets an env's phase by itself when that env's target
moves, which happens on every env reset.

Measured success rates (harness: ``robot_rl.envs.make("arm:<task>", num_envs=25, seed=0)``, expert
``seed=0``, the first 4 episodes of each env = 100 episodes per cell; ``reset(done)`` after every step):

==========  =======  =========  =========  =========  =========
task        noise 0  noise 0.3  noise 0.4  noise 0.5  noise 1.0
==========  =======  =========  =========  =========  =========
reach       100 %    100 %      100 %      100 %      100 %
push        100 %    96 %       67 %       35 %       25 %
pick_place  100 %    99 %       91 %       74 %       4 %
==========  =======  =========  =========  =========  =========

(The env's starts now come from ``ArmTask``'s counter-based stream; with the earlier numpy stream the same
harness gave push 93 / 66 / 37 / 21 % and pick_place 99 / 92 / 81 / 5 % at noise 0.3 / 0.4 / 0.5 / 1.0, and 400
more episodes per cell at noise 0.5 gave pick_place 78 % vs 75.5 %, push 36.8 % vs 38.0 % (old vs new stream):
the differences are sampling noise.) Without noise, a second run (env seed 1, 200 episodes per task, numpy
stream) also gave 100 % on all three tasks; mean
episode lengths are about 5 (reach), 19 (push) and 15 (pick_place) control steps. Reach is closed-loop and
far from its 50-step limit, so noise only makes its episodes longer (5.3 steps at noise 0, 6.9 at 0.5, 9.7
at 1.0), not less successful; push and pick_place degrade steadily, which makes them the tasks for
mixed-quality datasets.
"""

from __future__ import annotations

import torch

from ..arm_specs import PREFIX, parse
from .constants import CONTROL_DT, MAX_DELTA, STATE_LAYOUT, TASKS, TRACK_CENTRE_XY, TRACK_SPEED

_L = STATE_LAYOUT
_OPEN, _CLOSED = -1.0, 1.0
_HOVER = 0.07  # grip height for moves above the cube (pads clear its top face by 1.5 cm)
_TABLE = 0.02  # grip height for pushing / grasping (cube centre height)
_BEHIND = 0.06  # push start point, distance behind the cube centre
_OFF_LINE = 0.02  # push: lateral drift that triggers a new approach
_GAIN = 1.0  # action per MAX_DELTA of position error
_PUSH_STRIDE = 0.015  # push speed (m per step): faster pushes kick the cube and it slides off the line
_TRACK_LEAD = 2.0  # track: aim this many control steps ahead of the target (the servos lag the command)

# Phases.
_APPROACH, _DESCEND, _PUSH, _CLOSE, _CARRY, _LIFT = range(6)


class ScriptedExpert:
    """Batched scripted policy for one arm task (see the module docstring).

    Args:
        task: ``"reach"``, ``"push"``, ``"pick_place"`` or ``"track"``.
        num_envs: batch size of the observations it will be given.
        noise: std of Gaussian noise added to each action component before clipping to [-1, 1].
        seed: seed of the noise generator (None: nondeterministic).
        device: device of the phase state and the returned actions.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        noise: float = 0.0,
        seed: int | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.task, self.num_envs, self.noise = task, int(num_envs), float(noise)
        self.device = torch.device(device)
        self._gen = torch.Generator(device=self.device)
        if seed is None:
            self._gen.seed()
        else:
            self._gen.manual_seed(int(seed))
        self._phase = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._count = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._last_target: torch.Tensor | None = None

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """Restart the phase machine of ``env_ids`` (indices or a bool mask [N]); None = all envs."""
        if env_ids is None:
            self._phase.zero_()
            self._count.zero_()
            self._last_target = None
            return
        ids = torch.as_tensor(env_ids, device=self.device)
        self._phase[ids] = 0
        self._count[ids] = 0

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """Actions [N, 4] in [-1, 1] for a batch of observations (dict with ``"state"``, or the state tensor)."""
        state = obs["state"] if isinstance(obs, dict) else obs
        state = state.to(self.device, torch.float32)
        if state.shape != (self.num_envs, max(s.stop for s in _L.values())):
            raise ValueError(
                f"expected a state batch of shape ({self.num_envs}, 29), got {tuple(state.shape)}"
            )
        target = state[:, _L["target_pos"]]
        if self._last_target is not None:
            moved = (target - self._last_target).abs().amax(dim=1) > 1e-6
            self._phase[moved] = 0
            self._count[moved] = 0
        self._last_target = target.clone()

        if self.task == "reach":
            waypoint, grip = target, torch.full_like(target[:, 0], _OPEN)
        elif self.task == "track":
            waypoint, grip = self._track(target), torch.full_like(target[:, 0], _OPEN)
        elif self.task == "push":
            waypoint, grip = self._push(state)
        else:
            waypoint, grip = self._pick_place(state)
        ee = state[:, _L["ee_pos"]]
        move = ((waypoint - ee) * (_GAIN / MAX_DELTA)).clamp(-1.0, 1.0)
        action = torch.cat([move, grip[:, None]], dim=1)
        if self.noise > 0:
            action = action + self.noise * torch.randn(
                action.shape, generator=self._gen, device=self.device, dtype=action.dtype
            )
        return action.clamp(-1.0, 1.0)

    # ------------------------------------------------------------------ task scripts
    def _push(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ee, cube, target = state[:, _L["ee_pos"]], state[:, _L["cube_pos"]], state[:, _L["target_pos"]]
        to_target = target[:, :2] - cube[:, :2]
        direction = to_target / to_target.norm(dim=1, keepdim=True).clamp_min(1e-6)
        rel = ee[:, :2] - cube[:, :2]
        along = (rel * direction).sum(dim=1)
        lateral = rel - along[:, None] * direction
        behind = cube[:, :2] - _BEHIND * direction
        phase = self._phase

        # Transitions (evaluated before choosing the waypoint, one phase per step at most).
        off_line = (lateral.norm(dim=1) > _OFF_LINE) | (along > -0.015)
        at_behind = (ee[:, :2] - behind).norm(dim=1) < 0.012
        new = phase.clone()
        new[(phase == _APPROACH) & at_behind & (ee[:, 2] > _HOVER - 0.02)] = _DESCEND
        new[(phase == _DESCEND) & (ee[:, 2] < _TABLE + 0.012)] = _PUSH
        new[(phase == _DESCEND) & ~at_behind] = _APPROACH
        new[(phase == _PUSH) & off_line] = _LIFT
        new[(phase == _LIFT) & (ee[:, 2] > _HOVER - 0.02)] = _APPROACH
        # The approach starts by rising when the hand is low (it may be next to the cube).
        new[(new == _APPROACH) & (ee[:, 2] < _HOVER - 0.03) & (phase != _DESCEND)] = _LIFT
        self._phase = phase = new

        waypoint = ee.clone()
        hover_z = torch.full_like(ee[:, 2], _HOVER)
        table_z = torch.full_like(ee[:, 2], _TABLE)
        approach = torch.cat([behind, hover_z[:, None]], dim=1)
        descend = torch.cat([behind, table_z[:, None]], dim=1)
        # Push: advance along the line (by at most one step, less near the goal) and cancel lateral drift.
        remaining = to_target.norm(dim=1, keepdim=True)
        stride = remaining.clamp(max=_PUSH_STRIDE)
        push_xy = ee[:, :2] + stride * direction - 0.7 * lateral
        push = torch.cat([push_xy, table_z[:, None]], dim=1)
        lift = torch.cat([ee[:, :2], hover_z[:, None]], dim=1)
        waypoint = torch.where((phase == _APPROACH)[:, None], approach, waypoint)
        waypoint = torch.where((phase == _DESCEND)[:, None], descend, waypoint)
        waypoint = torch.where((phase == _PUSH)[:, None], push, waypoint)
        waypoint = torch.where((phase == _LIFT)[:, None], lift, waypoint)
        return waypoint, torch.full_like(ee[:, 0], _CLOSED)

    def _track(self, target: torch.Tensor) -> torch.Tensor:
        """Where the target will be ``_TRACK_LEAD`` steps from now (its velocity follows from its position)."""
        rel = target[:, :2] - torch.tensor(TRACK_CENTRE_XY, dtype=target.dtype, device=target.device)
        tangent = torch.stack([-rel[:, 1], rel[:, 0]], dim=1) / rel.norm(dim=1, keepdim=True).clamp_min(1e-6)
        ahead = target[:, :2] + tangent * (TRACK_SPEED * CONTROL_DT * _TRACK_LEAD)
        return torch.cat([ahead, target[:, 2:]], dim=1)

    def _pick_place(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ee, cube, target = state[:, _L["ee_pos"]], state[:, _L["cube_pos"]], state[:, _L["target_pos"]]
        opening = state[:, _L["gripper"]][:, 0]
        rel = cube - ee
        xy_err = rel[:, :2].norm(dim=1)
        phase = self._phase

        new = phase.clone()
        new[(phase == _APPROACH) & (xy_err < 0.01)] = _DESCEND
        new[(phase == _DESCEND) & (xy_err < 0.012) & (rel[:, 2].abs() < 0.008)] = _CLOSE
        new[(phase == _DESCEND) & (xy_err > 0.02)] = _APPROACH
        self._count[new == _CLOSE] += 1
        closed_on_cube = (self._count >= 3) & (opening < 0.06)
        new[(phase == _CLOSE) & closed_on_cube] = _CARRY
        lost = rel.norm(dim=1) > 0.03
        new[((phase == _CARRY) | (phase == _CLOSE)) & lost] = _APPROACH
        self._count[new != _CLOSE] = 0
        self._phase = phase = new

        above = cube.clone()
        above[:, 2] = cube[:, 2] + 0.06
        waypoint = torch.where((phase == _APPROACH)[:, None], above, cube)
        waypoint = torch.where((phase == _CARRY)[:, None], target, waypoint)
        grip = torch.where(
            (phase == _CLOSE) | (phase == _CARRY),
            torch.full_like(ee[:, 0], _CLOSED),
            torch.full_like(ee[:, 0], _OPEN),
        )
        return waypoint, grip


def make_expert(
    spec: str,
    num_envs: int,
    noise: float = 0.0,
    seed: int | None = None,
    device: str | torch.device = "cpu",
    *,
    privileged: bool = False,
) -> ScriptedExpert:
    """``ScriptedExpert`` for an ``arm:`` spec (the ``-sparse`` suffix is ignored).

    A ``-pixels`` spec needs ``privileged=True``: its observed state is proprioception only, so the caller must feed
    ``act`` the env's full task state, ``BatchedEnv.privileged_state()``, instead of the observation (a privileged
    expert, as in SERL / HIL-SERL demos; ``robot-rl collect`` does this). Without it the spec is refused.
    """
    if not spec.startswith(PREFIX):
        raise ValueError(f"scripted experts exist only for {PREFIX!r} specs, got {spec!r}")
    task, _, pixels = parse(spec[len(PREFIX) :])
    if pixels and not privileged:
        raise ValueError(f"no scripted expert for {spec!r} from its observation: a -pixels state has no cube or "
                         f"target position; pass privileged=True and act on env.privileged_state()")
    return ScriptedExpert(task, num_envs, noise=noise, seed=seed, device=device)
