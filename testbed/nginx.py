"""nginx on the web host: front end and reverse proxy, logging `$request_time` and `$msec`.

Requests outside `/lb/` go to the upstream named by `$linkgrad_upstream`, which
`nginx/routes.conf` defines (by default: the first app server). Every app host is also an
upstream of its own name, so a routing policy — `linkgrad route --nginx`'s per-transaction map,
or a fixed ratio — is installed by replacing that file and reloading (thesis §5.5).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from linkgrad.errors import InputError, Problem, RuntimeFailure
from testbed.netns import TestbedPlan
from testbed.private_dir import create_empty, ensure_dir, write_file

# "combined" + $request_time + $msec: millisecond end stamps and the response time
LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $msec'
)
# The path benchmark's ground truth (never read by linkgrad itself): which client connection
# each request came on, and the id the app logs its calls under (X-Request-Id).
TRUTH_FORMAT = "$msec $request_time $remote_addr $remote_port $request_id"
TRUTH_LOG = "truth-web.log"
APP_PORT = 8000
ROUTES = "routes.conf"
# The variable `linkgrad route --nginx` sets (linkgrad.routing.VARIABLE; a test holds
# the two equal: the testbed sits below the coordinator and cannot import it).
VARIABLE = "linkgrad_upstream"
DEFAULT_ROUTES = f"map $request_uri ${VARIABLE} {{ default app_first; }}\n"  # all to app_first


def _head(directory: Path, extra_logs: str = "") -> str:
    """The configuration up to the http block's upstreams: the web log, temporary paths."""
    tmp = directory / "nginx"
    quoted = LOG_FORMAT.replace("'", "\\'")
    return f"""
user www-data;
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {directory}/logs/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format linkgrad '{quoted}';
    access_log {directory}/access.log linkgrad;
{extra_logs}    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_timeout 60;
"""


def nginx_conf(plan: TestbedPlan, directory: Path) -> str:
    web = plan.with_role("web")[0]
    apps = plan.with_role("app")
    tmp = directory / "nginx"
    every_app = "\n".join(f"        server {a.address}:{APP_PORT};" for a in apps)
    each_app = "".join(f"    upstream {a.name} {{ server {a.address}:{APP_PORT}; keepalive 64; }}\n"
                       for a in apps)
    truth = f"""    log_format truth '{TRUTH_FORMAT}';
    access_log {directory}/{TRUTH_LOG} truth;
"""
    return f"""{_head(directory, truth)}    upstream app_first {{
        server {apps[0].address}:{APP_PORT};
        keepalive 64;
    }}
    upstream app_all {{
{every_app}
        keepalive 64;
    }}
{each_app}    include {tmp}/{ROUTES};
    server {{
        listen {web.address}:80;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header X-Request-Id $request_id;
        location /lb/ {{ proxy_pass http://app_all; }}
        location / {{ proxy_pass http://${VARIABLE}; }}
    }}
}}
"""


def front_conf(web_address: str, upstream: str, directory: Path) -> str:
    """nginx in front of one local server (a generated application's front service): the web
    log, as the default application's, and every request passed on over keep-alive."""
    return f"""{_head(directory)}    upstream front {{ server {upstream}; keepalive 64; }}
    server {{
        listen {web_address}:80;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / {{ proxy_pass http://front; }}
    }}
}}
"""


def write_front_conf(web_address: str, upstream: str, directory: Path) -> None:
    tmp = ensure_dir(directory / "nginx", 0o711)
    write_file(tmp / "nginx.conf", front_conf(web_address, upstream, directory))
    create_empty(directory / "access.log")


def nginx_argv(directory: Path) -> list[str]:
    return ["nginx", "-c", str(directory / "nginx" / "nginx.conf"), "-p", str(directory / "nginx")]


def write_conf(plan: TestbedPlan, directory: Path) -> None:
    """The configuration, read by the master (root); the workers (www-data) only pass through
    `nginx/` to the temporary directories the master makes for them."""
    tmp = ensure_dir(directory / "nginx", 0o711)
    write_file(tmp / "nginx.conf", nginx_conf(plan, directory))
    write_file(tmp / ROUTES, DEFAULT_ROUTES)
    create_empty(directory / "access.log")  # the master opens it
    create_empty(directory / TRUTH_LOG)


def install_routes(directory: Path, namespace: str, routes: str, source: str = "<routes>"
                   ) -> None:
    """Make `routes` (an nginx snippet defining `$linkgrad_upstream`) the front end's routing:
    checked with `nginx -t` first (a bad one is put back and named), then a graceful reload,
    both in the web host's namespace (the check binds the listen address). Old workers finish
    their requests under the old routes."""
    path = directory / "nginx" / ROUTES
    if not (directory / "nginx" / "nginx.pid").exists():
        raise RuntimeFailure(f"no nginx running from {directory}: is the testbed up?")
    old = path.read_text()
    write_file(path, routes)
    inside = ["ip", "netns", "exec", namespace, *nginx_argv(directory)]
    check = subprocess.run([*inside, "-t", "-q"], capture_output=True,
                           text=True, check=False)
    if check.returncode != 0:
        write_file(path, old)
        raise InputError(Problem(f"nginx rejects these routes: {check.stderr.strip()}", source))
    reload = subprocess.run([*inside, "-s", "reload"], capture_output=True,
                            text=True, check=False)
    if reload.returncode != 0:
        write_file(path, old)
        raise RuntimeFailure(f"nginx reload failed: {reload.stderr.strip()}")
    time.sleep(0.5)  # the master starts new workers before the old ones stop taking requests
