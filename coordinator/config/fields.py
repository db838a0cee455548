"""Field types every input model uses: strict where lax would guess (`port: true` is not 1,
`cycles: 2.5` is not 2, `"10"` is not a number), finite, and names that stay names.

A model built on `InputModel` also refuses NaN and infinity in every float, unknown fields, and
is frozen.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

Int = Annotated[int, Strict()]  # not a bool, a float or a string
Float = Annotated[float, Strict()]  # an int or a float, not a bool or a string
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]  # not bytes (YAML's !!binary) nor a number
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]


def is_none(value: object) -> bool:
    """For `Field(exclude_if=is_none)`: a field the file or output leaves out when None."""
    return value is None

# A run's directory is `output/NAME-TIME`: a name is one path component, never `..`
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A DNS name has at most 253 characters (RFC 1035); an IP address fewer (IPv6 with a zone)
HOST_ADDRESS = re.compile(r"^[^\s/@]{1,253}$")
# `linkgrad testbed`'s tags (testbed.netns.TAG): 1-4 lowercase letters or digits
TESTBED_TAG = re.compile(r"^[a-z0-9]{1,4}$")


def _run_name(name: str) -> str:
    if not RUN_NAME.fullmatch(name):
        raise ValueError("a name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                         f"letter or digit (it names the run's directory), got {name!r}")
    return name


def _host_address(address: str) -> str:
    if not HOST_ADDRESS.fullmatch(address):
        shown = address if len(address) <= 40 else f"{address[:37]}... ({len(address):,} " \
            "characters)"
        raise ValueError("an address is a host name of at most 253 characters or an IP "
                         f"address, with no spaces, '/' or '@', got {shown!r}")
    return address


def _testbed_tag(tag: str) -> str:
    if not TESTBED_TAG.fullmatch(tag):
        raise ValueError(f"a testbed tag is 1-4 lowercase letters or digits, got {tag!r}")
    return tag


def compile_regex(pattern: str, what: str) -> re.Pattern[str]:
    """`pattern` compiled; ValueError naming `what` for any pattern Python refuses (re.error,
    and OverflowError for a repetition count too large)."""
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise ValueError(f"{what}: bad regex {pattern!r}: {e}") from None


RunName = Annotated[str, Strict(), AfterValidator(_run_name)]
HostAddress = Annotated[str, Strict(), AfterValidator(_host_address)]
TestbedTag = Annotated[str, Strict(), AfterValidator(_testbed_tag)]


class InputModel(BaseModel):
    """An input model: unknown fields are errors, floats are finite, instances frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
