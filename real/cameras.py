"""Cameras for real drivers: something that returns the latest uint8 ``(H, W, 3)`` RGB frame, fast.

A driver's ``observe()`` runs in the server's control loop once per tick, so reading a camera there must not wait
for the next frame (33 ms at 30 fps). A ``Camera`` therefore hands out the **latest** frame it has; a real camera
grabs in a thread of its own. Two kinds:

* ``CallableCamera(name, height, width, capture)``: any ``capture()`` returning a frame (your own grabber, a ROS
  subscriber's latest image, a test pattern). Tested.
* ``OpenCVCamera(name, source, height, width)``: a USB camera index or a stream URL through OpenCV's
  ``cv2.VideoCapture``, read continuously in a background thread, converted BGR -> RGB and resized to
  ``(height, width)`` with ``INTER_AREA``. **Untested**: written against OpenCV's documented API
  (``VideoCapture(source)``, ``isOpened``, ``set(CAP_PROP_FRAME_WIDTH/HEIGHT)``, ``read``, ``release``,
  ``cvtColor``, ``resize``); OpenCV is not a dependency (``pip install opencv-python-headless``) and is imported
  only by ``open()``. A frame older than ``stale_s`` is an error (a driver fault: the server stops the robot).

``make_cameras`` turns the ``cameras=`` argument of a driver (Camera objects, or ``{name: source}`` for OpenCV)
into a tuple of cameras.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .robot import CameraSpec

INSTALL_HINT = "OpenCVCamera needs OpenCV: pip install opencv-python-headless"


class Camera(abc.ABC):
    """The interface: ``spec``, ``open()``, ``read()`` (latest frame, a fresh array every call), ``close()``.
    A camera implements ``read``; ``open`` and ``close`` default to nothing."""

    spec: CameraSpec

    def open(self) -> None:
        return None

    @abc.abstractmethod
    def read(self) -> np.ndarray:
        """The latest frame, uint8 (height, width, 3) RGB."""

    def close(self) -> None:
        return None


class CallableCamera(Camera):
    """A camera whose frames come from ``capture()`` (called once per observation; must return quickly)."""

    def __init__(self, name: str, height: int, width: int, capture: Callable[[], np.ndarray]) -> None:
        self.spec = CameraSpec(name, height, width)
        self._capture = capture

    def read(self) -> np.ndarray:
        return np.array(self._capture(), copy=True)  # a wrong dtype or shape fails the reply, not silently cast


class OpenCVCamera(Camera):
    """A ``cv2.VideoCapture`` source read in a background thread (see the module docstring; untested)."""

    def __init__(self, name: str, source: int | str, height: int, width: int, *, fps: float | None = None,
                 stale_s: float = 0.5, open_timeout_s: float = 5.0) -> None:
        self.spec = CameraSpec(name, height, width)
        self.source, self.fps, self.stale_s, self.open_timeout_s = source, fps, stale_s, open_timeout_s
        self._capture: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._frame: np.ndarray | None = None
        self._stamp = 0.0
        self._error = ""

    def open(self) -> None:
        try:
            import cv2
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        self._cv2 = cv2
        cap = cv2.VideoCapture(self.source)
        if not cap.isOpened():
            cap.release()
            raise ConnectionError(f"camera {self.spec.name!r}: cannot open video source {self.source!r}")
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.spec.width)  # a request: the frame is resized anyway
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.spec.height)
        if self.fps:
            cap.set(cv2.CAP_PROP_FPS, self.fps)
        self._capture = cap
        self._stop.clear()
        self._thread = threading.Thread(target=self._grab, name=f"camera-{self.spec.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.open_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._frame is not None:
                    return
            time.sleep(0.01)
        self.close()
        raise ConnectionError(f"camera {self.spec.name!r}: no frame from {self.source!r} within "
                              f"{self.open_timeout_s:g} s {self._error}".rstrip())

    def _grab(self) -> None:
        cv2 = self._cv2
        h, w = self.spec.height, self.spec.width
        while not self._stop.is_set():
            ok, frame = self._capture.read()
            if not ok or frame is None:
                self._error = "(read failed)"
                time.sleep(0.01)
                continue
            rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            if rgb.shape[:2] != (h, w):
                rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
            with self._lock:
                self._frame, self._stamp = np.ascontiguousarray(rgb, dtype=np.uint8), time.monotonic()

    def read(self) -> np.ndarray:
        with self._lock:
            frame, stamp = self._frame, self._stamp
        if frame is None or time.monotonic() - stamp > self.stale_s:
            age = "no frame yet" if frame is None else f"last frame {time.monotonic() - stamp:.2f} s old"
            raise RuntimeError(f"camera {self.spec.name!r}: {age} (source {self.source!r}) {self._error}".rstrip())
        return frame.copy()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        if self._capture is not None:
            self._capture.release()
            self._capture = None


def make_cameras(cameras: Sequence[Camera] | Mapping[str, int | str] | None,
                 size: Sequence[int] = (84, 84)) -> tuple[Camera, ...]:
    """Camera objects as they are, or ``{name: OpenCV source}`` as ``OpenCVCamera``s of ``size`` (height, width)."""
    if not cameras:
        return ()
    if isinstance(cameras, Mapping):
        h, w = (int(v) for v in size)
        return tuple(OpenCVCamera(str(name), source, h, w) for name, source in cameras.items())
    out = tuple(cameras)
    bad = [c for c in out if not isinstance(c, Camera)]
    if bad:
        raise TypeError(f"cameras must be Camera objects or {{name: OpenCV source}}, got {type(bad[0]).__name__}")
    return out
