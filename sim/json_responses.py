"""The simulator's JSON answers outside the inference hot path: a body, or OpenAI's error object."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from restorelens.sim.openai_requests import error_body

__all__ = ["error_response", "json_response"]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")), status_code=status, media_type="application/json", headers=headers
    )


def error_response(status: int, message: str, *, param: str | None = None, error_type: str | None = None) -> Response:
    return json_response(error_body(status, message, param=param, error_type=error_type), status)
