"""perfSONAR's Logstash credentials file, `/etc/perfsonar/logstash/proxy_auth.json`: one JSON
member, `"Authorization":"Basic <base64 of user:password>"`, written by perfsonar-archive to be
pasted into an archive spec's `_headers` (its own troubleshooter reads it by wrapping it in
braces). A whole object, `{"Authorization": "Basic ..."}`, is taken too. Pure."""

from __future__ import annotations

import base64
import binascii
import json

from linkgrad.errors import InputError, Problem

__all__ = ["authorization", "redacted"]


def authorization(text: str, path: str) -> str:
    """The `Authorization` header's value from the file's text; InputError naming `path`."""
    body = text.strip()
    try:
        data = json.loads(body if body.startswith("{") else "{" + body + "}")
    except ValueError as e:
        raise InputError(Problem(
            'not perfSONAR\'s proxy_auth.json (one line: "Authorization":"Basic ..."): '
            f"{e}", path)) from e
    found = {k: v for k, v in data.items() if k.lower() == "authorization"} \
        if isinstance(data, dict) else {}
    if not found:
        raise InputError(Problem("no Authorization header in it", path, field="Authorization"))
    if len(found) > 1:  # HTTP header names are case-insensitive: which one is meant?
        keys = ", ".join(repr(k) for k in found)
        raise InputError(Problem(f"{len(found)} Authorization headers ({keys}): keep one",
                                 path, field="Authorization"))
    value = next(iter(found.values()))
    scheme, _, token = value.partition(" ") if isinstance(value, str) else ("", "", "")
    try:
        user, colon, _ = base64.b64decode(token.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        colon, user = "", ""
    if scheme != "Basic" or not colon or not user:
        raise InputError(Problem("not 'Basic ' and the base64 of user:password",
                                 path, field="Authorization"))
    return f"Basic {token.strip()}"


def redacted(header: str) -> str:
    """The header as a dry run shows it: the scheme, never the secret."""
    return header.split(" ", 1)[0] + " (from the auth file)"
