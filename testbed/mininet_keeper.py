"""Builds a testbed's network with Mininet and holds it until SIGTERM (the nightly regression).

Run by Debian's /usr/bin/python3, which has the `mininet` package (the project's venv does
not), so it imports only the standard library and mininet. Equivalent to
`mn --switch lxbr --controller none`: one Linux bridge, no OpenFlow controller. Each Mininet
host's network namespace is then *named* (`ip netns attach lgtb-<tag>-<host> PID`), so the
testbed starts services, SSH and the injector in it exactly as in the plain-namespace build.

    /usr/bin/python3 testbed/mininet_keeper.py SPEC.json READY_FILE
"""

import json
import os
import signal
import subprocess
import sys


def build(spec):
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("warning")
    net = Mininet(topo=None, switch=LinuxBridge, controller=None, build=False,
                  autoSetMacs=False, waitConnected=False)
    bridge = net.addSwitch(spec["bridge"], dpid="1")
    for h in spec["hosts"]:
        host = net.addHost(h["name"], ip=f"{h['address']}/{spec['prefix']}")
        net.addLink(host, bridge)
    net.build()
    net.start()
    ip = ["ip", "addr", "add", f"{spec['gateway']}/{spec['prefix']}", "dev", spec["bridge"]]
    subprocess.run(ip, check=True)
    for h in spec["hosts"]:
        host = net.get(h["name"])
        host.cmd(f"ip route add default via {spec['gateway']}")
        subprocess.run(["ip", "netns", "attach", h["namespace"], str(host.pid)], check=True)
    return net


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    net = build(spec)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    # ready, with each host's shell: Mininet's own (an interactive bash, which ignores
    # SIGTERM); the testbed's teardown leaves them to net.stop(), which ends them cleanly
    ready = sys.argv[2]
    with open(ready + ".tmp", "w") as f:
        json.dump({"shells": {h["name"]: net.get(h["name"]).pid for h in spec["hosts"]}}, f)
    os.replace(ready + ".tmp", ready)
    try:
        while not stop:
            signal.pause()
    finally:
        for h in spec["hosts"]:
            subprocess.run(["ip", "netns", "del", h["namespace"]], check=False)
        net.stop()


if __name__ == "__main__":
    main()
