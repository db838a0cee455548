"""The envelope every daemon shares: requests, replies, errors and the lifecycle events."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from linkgrad.errors import InputError, Problem
from linkgrad.protocol.fields import RequestId

__all__ = [
    "LIFECYCLE",
    "UNION_FIELDS",
    "Empty",
    "ErrorInfo",
    "Failed",
    "Message",
    "Reply",
    "Request",
    "Result",
    "Stopped",
    "parse_request",
    "validation_problems",
]


class Message(BaseModel):
    """Every protocol message: frozen, an unknown field is an error, a number is finite (NaN
    and Infinity are no JSON, though Python writes and reads them). A field named in
    `absent_when_none` is left out of the wire form when it is None (as it always was)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    absent_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _leave_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:  # wire form
        data = handler(self)
        return {k: v for k, v in data.items()
                if v is not None or k not in self.absent_when_none}


class Result(Message):
    """What a request gets back (each request names its own)."""


class Empty(Result):
    pass


R = TypeVar("R", bound=Result)


class Request(Message, Generic[R]):
    """A command; `Request[X]` says its answer carries a result of type X (`reply`). Unknown
    top-level fields are ignored, as the daemons always did (a field inside a link or a
    schedule is checked: that is where a misspelling would mean "no delay")."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)
    reply: ClassVar[type[Result]] = Empty
    id: RequestId = None  # echoed in the reply
    cmd: str

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for base in cls.__mro__:
            args = getattr(base, "__pydantic_generic_metadata__", {}).get("args", ())
            if args and isinstance(args[0], type) and issubclass(args[0], Result):
                cls.reply = args[0]
                return


class ErrorInfo(Message):
    kind: Literal["input", "runtime"]
    message: str


class Reply(Message):
    """`result` when ok, `error` when not; the other is absent on the wire."""

    absent_when_none = ("result", "error")
    id: Any
    ok: bool
    result: dict[str, Any] | None = None  # free-form: the caller validates it as its Result
    error: ErrorInfo | None = None


class Stopped(Message):
    """The daemon's last word: it stopped and undid what it did."""

    event: Literal["stopped"] = "stopped"
    reason: str


class Failed(Message):
    """The daemon could not start (its message says why)."""

    event: Literal["error"] = "error"
    message: str


LIFECYCLE = ("ready", "stopped", "error")  # events that answer the coordinator, not report


def parse_request(adapter: TypeAdapter[Any], data: object) -> Request[Any]:
    """A request of the daemon's union, or InputError naming each wrong field."""
    if not isinstance(data, dict):
        raise InputError(Problem("a request is one JSON object"))
    try:
        return adapter.validate_python(data)
    except ValidationError as e:
        raise InputError(validation_problems(e)) from e


def validation_problems(e: ValidationError, where: str = "") -> list[Problem]:
    """pydantic's errors (from validating a discriminated union) as Problems, each with the
    field path a person reads: the branch tags pydantic puts in the path are left out."""
    problems = []
    for err in e.errors():
        loc = [str(p) for p in err["loc"]]
        path = [p for i, p in enumerate(loc[1:], 1) if p not in UNION_FIELDS.get(loc[i - 1], ())]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            ctx = err.get("ctx", {})
            tag = str(ctx.get("discriminator", "")).strip("'")
            path.append(tag)
            message = (f"unknown {'command' if tag == 'cmd' else tag} {ctx.get('tag')!r}"
                       if err["type"] == "union_tag_invalid" else "missing")
        else:
            message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(Problem(message, field=".".join(p for p in (where, *path) if p) or None))
    return problems


# field -> the tags of the union it holds (pydantic writes the branch after the field)
UNION_FIELDS: dict[str, tuple[str, ...]] = {}
