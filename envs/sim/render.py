"""Closing a `mujoco.Renderer` without breaking the other renderers of the process.

`mujoco.Renderer.close` (mujoco 3.x, EGL and OSMesa) frees its MuJoCo render context (`mjr_freeContext`) while
whatever GL context is current is current, and only then destroys its own GL context. When another renderer drew
last, that is the other renderer's context: its framebuffers and textures are freed, and from then on it returns
frames from the wrong camera, upside down or garbage, with no error (measured: an arm env's front frame 179 grey
levels off on 92% of its pixels after a second arm env was closed). Renderers dropped without `close` do the same
from `__del__`. Every env here owns one renderer per image size, so closing one env mid-process (an evaluation
env, a probe env, a rebinding in a notebook) must not touch the others: make the closing renderer's own context
current first.
"""

from __future__ import annotations

import mujoco

__all__ = ["close_renderer"]


def close_renderer(renderer: mujoco.Renderer | None) -> None:
    """Close `renderer` with its own GL context current (module docstring); None or an already closed one is a
    no-op."""
    if renderer is None:
        return
    gl_context = getattr(renderer, "_gl_context", None)  # private in mujoco; absent with the Filament backend
    if gl_context is not None and getattr(renderer, "_mjr_context", None) is not None:
        gl_context.make_current()
    renderer.close()
