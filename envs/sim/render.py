"""Closing a `mujoco.Renderer` without breaking the other renderers of the process.

`mujoco.Renderer.close` (mujoco 3.x, EGL and OSMesa) frees its MuJoCo render context (`mjr_freeContext`) while
whatever GL context is current is current, and only then destroys its own GL context. When another renderer drew
last, that is the other renderer's context: its framebuffers and textures are freed, and from then on it returns
frames from the wrong camera, upside down or garbage, with no error (measured: an arm env's front frame 179 grey
levels off on 92% of its pixels after a second arm env was closed). Renderers dropped without `close` do the same
from `__del__`. Every env here owns one renderer per image size, so closing one env mid-process (an evaluation
env, a probe env, a rebinding in a notebook) must not touch the others: make the closing renderer's own context
current first.

An EGL context is current on one thread at a time, and a renderer's stays current on the thread that drew with it
last, so the closing thread cannot make it current when another one drew last (the simulated robot driver draws
on its own thread; an env dropped there is collected on whichever thread runs the collector): `eglMakeCurrent`
fails with EGL_BAD_ACCESS, which `close` and the envs' `__del__` used to raise. Then this thread is left with no
context current, so the free reaches no renderer's objects (GL calls without a context do nothing), and the
context is destroyed once its thread lets go of it.

A renderer still open when the interpreter exits (an env nobody closed) used to print three EGL tracebacks:
`mujoco.egl` terminates its display from an `atexit` hook, and the renderer's `__del__` ran after it, during
teardown. `open_renderer` registers the renderers it makes, and an `atexit` hook registered after mujoco's (hooks
run last-registered first) closes those still open while the display lives.
"""

from __future__ import annotations

import atexit
import sys
import weakref

import mujoco

__all__ = ["close_renderer", "open_renderer"]

_OPEN: weakref.WeakSet[mujoco.Renderer] = weakref.WeakSet()
_exit_hook_registered = False


def open_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """`mujoco.Renderer(model, height, width)`, closed at interpreter exit if nothing closed it before (module
    docstring)."""
    global _exit_hook_registered
    renderer = mujoco.Renderer(model, height, width)
    _OPEN.add(renderer)
    if not _exit_hook_registered:  # after the first renderer: its GL backend registers its own hook with it
        atexit.register(_close_open_renderers)
        _exit_hook_registered = True
    return renderer


def _close_open_renderers() -> None:
    for renderer in list(_OPEN):
        try:
            close_renderer(renderer)
        except Exception:  # noqa: BLE001 - exiting: a context another thread holds is freed with the process
            pass


def close_renderer(renderer: mujoco.Renderer | None) -> None:
    """Close `renderer` with its own GL context current (module docstring); None or an already closed one is a
    no-op."""
    if renderer is None:
        return
    gl_context = getattr(renderer, "_gl_context", None)  # private in mujoco; absent with the Filament backend
    if gl_context is not None and getattr(renderer, "_mjr_context", None) is not None:
        try:
            gl_context.make_current()
        except Exception:
            if not _release_egl_context(gl_context):
                raise
    renderer.close()


def _release_egl_context(gl_context: object) -> bool:
    """Make no EGL context current on this thread; False (nothing done) for a context of another GL backend."""
    if type(gl_context).__module__ != "mujoco.egl":
        return False
    egl = sys.modules["mujoco.egl"]  # imported: it defines the context's class
    egl.EGL.eglMakeCurrent(egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_CONTEXT)
    return True
