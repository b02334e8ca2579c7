"""Camera frames on the wire: uint8 ``(H, W, 3)`` RGB arrays to compressed bytes and back (Pillow).

``jpeg`` (lossy, the default: a few KiB for an 84x84 frame, well under a millisecond each way) or ``png``
(lossless: for tests and checks that need the exact frame). Pillow is already installed with the base package
(imageio and matplotlib depend on it) and is imported only when a frame is encoded or decoded, so a bridge
without cameras never loads it.

Errors are ``FrameError`` (a ``ValueError``) with one line naming the camera: a frame of the wrong shape or type,
one whose encoding exceeds the size limit, bytes that do not decode, or decode to another size than the spec's.
Decoding reads the header first and refuses a declared size other than the expected one before decompressing,
so corrupt or hostile bytes cannot make the client allocate a huge image.
"""

from __future__ import annotations

import io

import numpy as np

ENCODINGS = ("jpeg", "png")
_PIL_FORMAT = {"jpeg": "JPEG", "png": "PNG"}


class FrameError(ValueError):
    """A camera frame could not be encoded, sent or decoded; the message names the camera."""


def encode_frame(
    camera: str, frame: np.ndarray, encoding: str = "jpeg", *, quality: int = 90, max_bytes: int | None = None
) -> bytes:
    """Compress one uint8 ``(H, W, 3)`` frame. ``quality``: JPEG quality (1-95); chroma is not subsampled, which
    keeps small frames' colours (a few hundred bytes more at 84x84). Raises ``FrameError`` above ``max_bytes``."""
    if encoding not in ENCODINGS:
        raise FrameError(f"camera {camera!r}: unknown encoding {encoding!r} (choose {', '.join(ENCODINGS)})")
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        what = f"{frame.dtype} {frame.shape}" if isinstance(frame, np.ndarray) else type(frame).__name__
        raise FrameError(f"camera {camera!r}: a frame must be uint8 (H, W, 3) RGB, got {what}")
    from PIL import Image

    buf = io.BytesIO()
    image = Image.fromarray(np.ascontiguousarray(frame), "RGB")
    if encoding == "jpeg":
        image.save(buf, "JPEG", quality=int(quality), subsampling=0)
    else:
        image.save(buf, "PNG", compress_level=1)  # fast; PNG is for exactness, not size
    data = buf.getvalue()
    if max_bytes is not None and len(data) > max_bytes:
        raise FrameError(f"camera {camera!r}: encoded frame of {len(data):,} bytes exceeds the limit of "
                         f"{max_bytes:,} bytes (max_frame_bytes)")
    return data


def decode_frame(camera: str, data: bytes, encoding: str, shape: tuple[int, int, int]) -> np.ndarray:
    """The uint8 ``shape`` frame in ``data``; ``FrameError`` naming ``camera`` if it is not a valid ``encoding``
    image of that size."""
    if encoding not in ENCODINGS:
        raise FrameError(f"camera {camera!r}: unknown encoding {encoding!r} (choose {', '.join(ENCODINGS)})")
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data), formats=[_PIL_FORMAT[encoding]])
        size = (image.height, image.width)
        if size != tuple(shape[:2]):
            raise FrameError(f"camera {camera!r}: frame is {size[0]}x{size[1]}, the spec says {shape[0]}x{shape[1]}")
        if image.mode != "RGB":
            raise FrameError(f"camera {camera!r}: frame is {image.mode}, expected RGB")
        image.load()
        out = np.asarray(image, dtype=np.uint8)
    except FrameError:
        raise
    except Exception as e:  # Pillow raises UnidentifiedImageError, OSError (truncated), SyntaxError, ValueError...
        from PIL import UnidentifiedImageError

        why = "not an image of that format" if isinstance(e, UnidentifiedImageError) else \
            f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        raise FrameError(f"camera {camera!r}: {len(data):,} bytes do not decode as {encoding} ({why})") from None
    if out.shape != tuple(shape):
        raise FrameError(f"camera {camera!r}: decoded frame has shape {out.shape}, expected {tuple(shape)}")
    return out
