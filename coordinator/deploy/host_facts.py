"""What `linkgrad deploy` needs to know of a host, read by one POSIX shell script over SSH (a
host may have no Python fit to run a probe of ours), and judged here in plain functions.

A kernel feature is judged from the kernel's own build configuration (/proc/config.gz or
/boot/config-RELEASE): `y` is built in, `m` a module, which must be loaded or on disk under
/lib/modules/RELEASE. Without a configuration it is what the running kernel shows (a /proc or
/sys entry), else unknown: said, not guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["FEATURES", "MIN_PYTHON", "Feature", "HostFacts", "feature_state",
           "parse_facts", "probe_script"]

MIN_PYTHON = (3, 11)

# name shown -> (kernel CONFIG_ options, all needed; modules; what the running kernel shows
# when it has it; what it is for). NFQUEUE needs the queue and iptables' target.
FEATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str, str]] = {
    "nfqueue": (("NETFILTER_NETLINK_QUEUE", "NETFILTER_XT_TARGET_NFQUEUE"),
                ("nfnetlink_queue", "xt_NFQUEUE"), "/proc/net/netfilter/nfnetlink_queue",
                "the injector holds packets in it"),
    "sock_diag": (("INET_DIAG", "INET_TCP_DIAG"), ("inet_diag", "tcp_diag"),
                  "/proc/net/sockstat", "the sniffer reads sockets and their counters"),
    "tracing": (("TRACEPOINTS", "BPF_EVENTS", "DEBUG_INFO_BTF"), (), "/sys/kernel/btf/vmlinux",
                "SNAP's socket-call tracer (bpftrace on the sock tracepoints, with BTF)"),
    "netem": (("NET_SCH_NETEM",), ("sch_netem",), "", "the injector's per-interface backend"),
    "cgroups": (("CGROUPS",), (), "/proc/cgroups", "host probes read processes' cgroups"),
}

Feature = Literal["yes", "no", "unknown"]

_CONFIG_LINE = re.compile(r"CONFIG_([A-Z0-9_]+)=(.*)")


def probe_script(venv: str) -> str:
    """The shell script printing `key=value` lines about this host; `venv` is where linkgrad's
    own venv is (or will be): its deploy manifest is printed if it has one."""
    options = sorted({o for c, _, _, _ in FEATURES.values() for o in c})
    modules = sorted({m for _, ms, _, _ in FEATURES.values() for m in ms})
    shown = sorted({s for _, _, s, _ in FEATURES.values() if s})
    quoted = venv.replace("'", "'\\''")
    return f"""
python3 - <<'PROBE' 2>/dev/null
import os, sys, sysconfig
print("python=%d.%d.%d" % tuple(sys.version_info[:3]))
print("libc=" + (os.confstr("CS_GNU_LIBC_VERSION") or ""))
print("python_path=" + sys.executable)
try:
    import venv
    print("venv_module=yes")
except ImportError:
    pass
include = sysconfig.get_paths()["include"]
if os.path.exists(os.path.join(include, "Python.h")):
    print("python_headers=yes")
PROBE
echo "machine=$(uname -m)"
echo "release=$(uname -r)"
echo "cc=$(command -v cc || command -v gcc)"
test -e /usr/include/libnetfilter_queue/libnetfilter_queue.h && echo nfq_headers=yes
echo "iptables=$(command -v iptables)"
echo "bpftrace=$(command -v bpftrace)"
echo "uid=$(id -u)"
test "$(id -u)" = 0 || {{ sudo -n true 2>/dev/null && echo sudo=yes; }}
release=$(uname -r)
boot="/boot/config-$release"
if [ -r /proc/config.gz ]; then echo config=/proc/config.gz; gzip -dc /proc/config.gz
elif [ -r "$boot" ]; then echo "config=$boot"; cat "$boot"
fi 2>/dev/null | grep -E '^config=|^CONFIG_({"|".join(options)})='
for m in {" ".join(modules)}; do
  if [ -d "/sys/module/$m" ]; then echo "module.$m=loaded"
  elif grep -qs "/$m\\.ko" "/lib/modules/$release/modules.dep"; then echo "module.$m=on-disk"
  elif grep -qs "/$m\\.ko" "/lib/modules/$release/modules.builtin"; then echo "module.$m=built-in"
  fi
done
for f in {" ".join(shown)}; do test -e "$f" && echo "shows=$f"; done
test -d /lib/modules/"$release" && echo modules_dir=yes
venv='{quoted}'
if [ -e "$venv" ] && [ ! -e "$venv/linkgrad-deploy.made" ] && [ -n "$(ls -A "$venv" 2>&1)" ]
then echo occupied=yes
fi
record="$venv/linkgrad-deploy.json"
test -r "$record" && echo "installed=$(tr -d '\\n' < "$record")"
exit 0
"""


@dataclass(frozen=True)
class HostFacts:
    python: tuple[int, int, int] | None  # python3's version; None: no python3
    python_path: str
    venv_module: bool
    python_headers: bool
    glibc: tuple[int, int] | None  # None: another libc (musl) or none found
    machine: str
    release: str
    compiler: str
    nfq_headers: bool
    iptables: str
    bpftrace: str
    root: bool
    sudo: bool
    config_source: str  # "" when the kernel's build configuration could not be read
    config: dict[str, str]  # CONFIG_ option (without the prefix) -> y/m/...
    modules: dict[str, str]  # module -> loaded / on-disk / built-in
    modules_dir: bool
    shows: frozenset[str]  # the /proc and /sys entries present
    installed: str  # the deploy manifest in the venv (JSON text), "" if none
    occupied: bool = False  # something deploy did not make is where its venv goes

    @property
    def python_fits(self) -> bool:
        return self.python is not None and self.python[:2] >= MIN_PYTHON

    @property
    def builds_injector(self) -> list[str]:
        """What the injector's C build (netfilterqueue) lacks here, each with its package."""
        missing = []
        if not self.compiler:
            missing.append("a C compiler (gcc)")
        if not self.python_headers:
            missing.append("Python's headers (python3-dev)")
        if not self.nfq_headers:
            missing.append("libnetfilter-queue's headers (libnetfilter-queue-dev)")
        return missing


def _version(text: str, parts: int) -> tuple[int, ...] | None:
    m = re.fullmatch(r"\D*(\d+(?:\.\d+)*)\D*", text.strip())
    if not m:
        return None
    numbers = tuple(int(x) for x in m[1].split("."))
    return numbers[:parts] if len(numbers) >= parts else None


def parse_facts(text: str) -> HostFacts:
    """The probe script's output as facts; a line it does not know is ignored (a later probe
    may say more)."""
    one: dict[str, str] = {}
    config: dict[str, str] = {}
    modules: dict[str, str] = {}
    shows: set[str] = set()
    for line in text.splitlines():
        if m := _CONFIG_LINE.fullmatch(line.strip()):
            config[m[1]] = m[2]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key.startswith("module."):
            modules[key.removeprefix("module.")] = value
        elif key == "shows":
            shows.add(value)
        else:
            one[key] = value
    python = _version(one.get("python", ""), 3)
    libc = one.get("libc", "")
    glibc = _version(libc, 2) if libc.startswith("glibc") else None
    return HostFacts(
        python=python if python is None else (python[0], python[1], python[2]),
        python_path=one.get("python_path", ""), venv_module=one.get("venv_module") == "yes",
        python_headers=one.get("python_headers") == "yes",
        glibc=None if glibc is None else (glibc[0], glibc[1]),
        machine=one.get("machine", ""), release=one.get("release", ""),
        compiler=one.get("cc", ""), nfq_headers=one.get("nfq_headers") == "yes",
        iptables=one.get("iptables", ""), bpftrace=one.get("bpftrace", ""),
        root=one.get("uid") == "0", sudo=one.get("sudo") == "yes",
        config_source=one.get("config", ""), config=config, modules=modules,
        modules_dir=one.get("modules_dir") == "yes", shows=frozenset(shows),
        installed=one.get("installed", ""), occupied=one.get("occupied") == "yes")


def feature_state(facts: HostFacts, name: str) -> tuple[Feature, str]:
    """Whether the host's kernel has feature `name` (of FEATURES), and why it is judged so."""
    options, modules, shown, _ = FEATURES[name]
    if facts.config_source:
        values = {o: facts.config.get(o, "") for o in options}
        off = [o for o, v in values.items() if v not in ("y", "m")]
        if off:
            return "no", f"CONFIG_{off[0]} is not set in {facts.config_source}"
        as_module = [o for o, v in values.items() if v == "m"]
        if not as_module:
            return "yes", f"built into the kernel ({facts.config_source})"
        absent = [m for m in modules if m not in facts.modules]
        if absent and facts.modules_dir:
            return "no", f"module {absent[0]} is neither loaded nor in /lib/modules"
        if absent:
            return "unknown", (f"a module ({', '.join(absent)}), and /lib/modules/"
                               f"{facts.release} is not there to look in")
        return "yes", "as modules: " + ", ".join(f"{m} {facts.modules[m]}" for m in modules)
    if shown and shown in facts.shows:
        return "yes", f"{shown} is there (no kernel configuration to read)"
    if modules and all(m in facts.modules for m in modules):
        return "yes", ", ".join(f"{m} {facts.modules[m]}" for m in modules)
    return "unknown", "no kernel configuration (/proc/config.gz, /boot/config-*) to read"
