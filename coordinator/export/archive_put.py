"""Sending archive records to perfSONAR 5's Logstash as pScheduler's `http` archiver does: one
HTTP PUT per record, `Content-Type: application/json`, the `x-ps-observer` header and Basic
auth when given. The thin I/O shell round `perfsonar.records`; a timeout on every request."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from linkgrad.errors import InputError, Problem, RuntimeFailure

__all__ = ["TIMEOUT_S", "check_url", "headers", "put_records"]

TIMEOUT_S = 10.0


def check_url(url: str) -> None:
    """InputError unless `url` is an http(s) URL with a host."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise InputError(Problem(f"not a URL: {e}", field="--perfsonar")) from e
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(Problem(f"{url!r} is not an http:// or https:// URL with a host "
                                 "(perfSONAR's is https://ARCHIVE/logstash)",
                                 field="--perfsonar"))


def headers(observer: str, authorization: str | None) -> dict[str, str]:
    out = {"content-type": "application/json", "x-ps-observer": observer}
    if authorization is not None:
        out["authorization"] = authorization
    return out


def _refused(url: str, response: httpx.Response, sent: int, total: int, auth_file: str | None
             ) -> Exception:
    said = " ".join(response.text.split())[:200] or response.reason_phrase
    before = f"; {sent} of {total} records were archived before it" if sent else ""
    if response.status_code in (401, 403):
        where = f"the credentials in {auth_file}" if auth_file else "no credentials (--auth-file)"
        return InputError(Problem(f"the archive at {url} refused {where}: HTTP "
                                  f"{response.status_code} {said}{before}",
                                  auth_file, field=None if auth_file else "--auth-file"))
    return RuntimeFailure(f"the archive at {url} answered HTTP {response.status_code} "
                          f"({said}){before}")


def put_records(url: str, bodies: Sequence[str], observer: str, authorization: str | None,
                auth_file: str | None = None, verify_tls: bool = True,
                timeout_s: float = TIMEOUT_S) -> int:
    """PUTs each JSON body in turn; the number sent. The first failure stops it, its error
    saying how many records went before (the archive keeps those)."""
    sent = 0
    with httpx.Client(timeout=timeout_s, verify=verify_tls, follow_redirects=False) as client:
        for body in bodies:
            try:
                response = client.put(url, content=body.encode(),
                                      headers=headers(observer, authorization))
            except httpx.HTTPError as e:
                before = f"; {sent} of {len(bodies)} records were archived before" if sent else ""
                raise RuntimeFailure(f"cannot reach the archive at {url}: "
                                     f"{e or type(e).__name__}{before}") from e
            if not 200 <= response.status_code < 300:
                raise _refused(url, response, sent, len(bodies), auth_file)
            sent += 1
    return sent
