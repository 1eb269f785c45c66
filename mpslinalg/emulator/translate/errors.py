"""The translator's exceptions (every pass raises them with a ``file:line: error: ...`` message,
the location of the offending token in the Metal source)."""

from __future__ import annotations

__all__ = ["TranslateError", "CudaUnsupportedError"]


class TranslateError(SyntaxError):
    """A Metal source the emulator cannot (or must not) accept.

    The message is ``file:line: error: ...``.
    """


class CudaUnsupportedError(TranslateError):
    """A Metal construct the CUDA executor cannot map (``file:line: error: ...``)."""
