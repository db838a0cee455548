"""nginx on the web host: front end and reverse proxy, logging `$request_time` and `$msec`."""

from __future__ import annotations

from pathlib import Path

from testbed.netns import TestbedPlan

# "combined" + $request_time + $msec: millisecond end stamps and the response time
LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $msec'
)
APP_PORT = 8000


def nginx_conf(plan: TestbedPlan, directory: Path) -> str:
    web = plan.with_role("web")[0]
    apps = plan.with_role("app")
    tmp = directory / "nginx"
    every_app = "\n".join(f"        server {a.address}:{APP_PORT};" for a in apps)
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
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_timeout 60;
    upstream app_first {{
        server {apps[0].address}:{APP_PORT};
        keepalive 64;
    }}
    upstream app_all {{
{every_app}
        keepalive 64;
    }}
    server {{
        listen {web.address}:80;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location /lb/ {{ proxy_pass http://app_all; }}
        location / {{ proxy_pass http://app_first; }}
    }}
}}
"""


def nginx_argv(directory: Path) -> list[str]:
    return ["nginx", "-c", str(directory / "nginx" / "nginx.conf"), "-p", str(directory / "nginx")]


def write_conf(plan: TestbedPlan, directory: Path) -> None:
    tmp = directory / "nginx"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "nginx.conf").write_text(nginx_conf(plan, directory))
    (directory / "access.log").touch()
