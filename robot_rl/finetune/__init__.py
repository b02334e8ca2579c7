"""RL fine-tuning of saved behaviour-cloning policies (`robot_rl.policies.ChunkPolicy`), one module per method:
`residual` (ResFiT), `dsrl` (SAC in a diffusion/flow policy's noise space), `reinflow` and `dppo` (PPO over
a denoising chain, `ppo`), `rl100` (RL-100's rounds of offline improvement, each kept only if an off-policy
evaluation says it improved). `chunks` executes action chunks per env; `loop` is the run around a method
(`robot-rl finetune method=...`), configured by `config`."""

from robot_rl.errors import UserError


class FinetuneError(UserError, ValueError):
    """A base policy or dataset that does not fit the run; one line naming it."""
