"""The daemons' protocol, typed: what the coordinator sends the injector and the sniffer, what
they answer and report, and the injection record (docs/offline.md).

JSON lines on the daemon's stdin and stdout. A request is `{"id": N, "cmd": NAME, ...}`; its
reply `{"id": N, "ok": true, "result": {...}}` or `{"id": N, "ok": false, "error": {"kind":
"input"|"runtime", "message": ...}}`; anything else a daemon writes is an event (`{"event":
"ready"|"report"|"stopped"|"error", ...}`). Every model forbids unknown fields: a misspelt
field is an error, never a silent default.

`base` holds the envelope, `fields` the checked field types every request shares (finite,
bounded numbers of their own JSON type; IPv4 endpoints, an IPv4-mapped one as its IPv4
address), `injector` and `sniffer` each daemon's requests, replies and events, `record` the
injection record. `linkgrad.protocol.jsonlines` moves these over a channel.
"""

from linkgrad.protocol.record import InjectionRecord, load_injection_record, parse_injection_record

__all__ = ["InjectionRecord", "load_injection_record", "parse_injection_record"]
