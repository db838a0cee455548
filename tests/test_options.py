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


def test_paths_window_and_predict_window_s_are_old_spellings(capsys):
    """`paths --window` is `--window-s` (the experiment's paths.window_s); predict's
    `--window-s`, a time measured, is `--duration` as every other command's."""
    from coordinator.cli.main import build_parser

    args = build_parser(["paths"]).parse_args(["paths", "--trace", "t", "--window", "1.5"])
    assert args.window_s == 1.5
    assert "--window is now --window-s" in capsys.readouterr().err
    args = build_parser(["predict"]).parse_args(
        ["predict", "--gradients", "g", "--placement", "p", "--window-s", "30"])
    assert args.duration == 30
    assert "--window-s is now --duration" in capsys.readouterr().err
