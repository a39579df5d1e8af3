"""The base of every request body: strict, as the experiment config is.

Unknown fields are refused (a typo is an error, not silently dropped); every field takes only its
JSON type: integers are integral numbers (``3`` or ``3.0``, never ``3.5``, ``"3"`` or ``true``),
numbers are finite and never strings, booleans are ``true``/``false``. Error details quote a bad
value by a short prefix only (backend/error_handlers.py).
"""

from __future__ import annotations

from pydantic import BaseModel

from collapipe_core.config import STRICT, Integral

__all__ = ["Integral", "StrictBody"]


class StrictBody(BaseModel):
    model_config = STRICT
