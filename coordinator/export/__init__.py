"""`linkgrad export`: a run directory's results where operators already look. What a run
measured is read once (`source`), turned into plain metric families (`metrics` for the
gradients and SNAP, `host_metrics` for the host probes, in node_exporter's names) and into
Prometheus's text exposition (`prometheus`), into pScheduler-shaped archive records for
perfSONAR 5's Logstash (`perfsonar`), and into esmond's metadata and data documents
(`esmond`); `proxy_auth` reads perfSONAR's credentials file and `archive_put` sends records.

Layer: above config (it reads run directories through `coordinator.config`), below cli: no
SSH, no daemons, no presentation. May import `linkgrad`, `coordinator.config`, pydantic,
prometheus_client and httpx (`archive_put` only).
"""
