"""Web server logs (nginx, Apache, CSV) turned into per-request start times and response times."""

from linkgrad.weblog.model import MalformedLines, RequestLog
from linkgrad.weblog.read import read_log

__all__ = ["MalformedLines", "RequestLog", "read_log"]
