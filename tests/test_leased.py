"""`python -m injector.leased`: a command lives as long as its stdin (the SSH channel)."""

import os
import subprocess
import sys


def test_the_command_ends_when_the_lease_ends():
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "injector.leased", "--", "sh", "-c", "echo $$; exec sleep 60"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(wrapper.stdout.readline())
    os.kill(child, 0)  # running
    wrapper.stdin.close()  # the channel closes
    wrapper.stdout.close()
    assert wrapper.wait(timeout=15) != 0  # sleep was killed: not its own exit
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("the command outlived its lease")


def test_a_command_that_ends_by_itself_gives_its_status():
    wrapper = subprocess.Popen([sys.executable, "-m", "injector.leased", "--", "sh", "-c",
                                "exit 3"], stdin=subprocess.PIPE)  # the lease stays open
    try:
        assert wrapper.wait(timeout=15) == 3
    finally:
        wrapper.stdin.close()
