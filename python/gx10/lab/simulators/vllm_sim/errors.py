"""How the simulator fails.

SimFatal ends the process as the real stack ends it (a final `Type: message`); ApiError is an
OpenAI-style error response."""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class SimFatal(Exception):
    """An error that ends the process the way the real stack ends: a final `Type: message`."""

    def __init__(self, exc_type: str, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.code = code


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


def validation_error(
    kind: str, loc: str, msg: str, body_size: int, ctx: str | None = None
) -> ApiError:
    """A request FastAPI refuses before vLLM reads it, as vLLM answers it: status 400, type
    "Bad Request", param the field's location (captured from vLLM: tests/fixtures/vllm-engine/)."""
    detail = (
        f"{{'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}', "
        f"'input': '<dict of {body_size} items>'"
    )
    if ctx is not None:
        detail += f", 'ctx': {{'error': '{ctx}'}}"
    return ApiError(400, f"1 validation error:\n  {detail}}}", "Bad Request", loc)


def missing_field(field: str, body: dict[str, Any]) -> ApiError:
    """A required field the request lacks (``body.<field>``)."""
    return validation_error("missing", f"body.{field}", "Field required", len(body))
