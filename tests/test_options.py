"""One spelling for a command's output file; the old ones work for a release, said."""

import argparse
from pathlib import Path

from coordinator.cli.options import add_output


def test_the_old_spelling_still_works_with_a_note(capsys):
    p = argparse.ArgumentParser()
    add_output(p, "write it", old="--save")
    assert p.parse_args([]).output is None
    assert p.parse_args(["--output", "a.json"]).output == Path("a.json")
    assert capsys.readouterr().err == ""
    assert p.parse_args(["--save", "b.json"]).output == Path("b.json")
    assert capsys.readouterr().err == ("linkgrad: --save is now --output (the old spelling "
                                       "goes after this release)\n")
    assert "--save" not in p.format_help()
