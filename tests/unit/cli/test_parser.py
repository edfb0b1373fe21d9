"""``ground``'s parser: a mistyped command or choice names the closest one ("did you mean"),
in one line with status 2; a word like none of them lists the choices as argparse does."""

from __future__ import annotations

import pytest

from pipeline.cli.parser import build_parser, closest_choice


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rnu", "job.toml"], "invalid choice: 'rnu'; did you mean 'run'?"),
        (["stauts", "job.toml"], "invalid choice: 'stauts'; did you mean 'status'?"),
        (["inti"], "invalid choice: 'inti'; did you mean 'init'?"),
        (["batch", "cancle", "job.toml"], "invalid choice: 'cancle'; did you mean 'cancel'?"),
        (["export", "j.toml", "--format", "jsnl"], "did you mean 'jsonl'?"),
    ],
)
def test_a_typo_names_the_closest_choice(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert says in line and line.endswith("--help)")


def test_a_word_like_no_command_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["xyzzy"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "(choose from 'init', 'run'," in err


def test_closest_choice() -> None:
    assert closest_choice("exprot", ["export", "estimate"]) == "export"
    assert closest_choice("zzz", ["run", "load"]) is None
    assert closest_choice(3, [1, 2]) is None  # only words are guessed at
    assert closest_choice("run", None) is None


def test_init_takes_a_directory_and_two_flags() -> None:
    args = build_parser().parse_args(["init", "first-job", "--vertex", "--no-structure"])
    assert (args.command, args.directory, args.vertex, args.structure) == (
        "init",
        "first-job",
        True,
        False,
    )
    defaults = build_parser().parse_args(["init"])
    assert (defaults.directory, defaults.vertex, defaults.structure) == (".", False, True)


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_worker_processes_below_one_is_a_usage_error_at_parse_time(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["worker", "job.toml", "--processes", value])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ground worker: error: argument --processes") and "Traceback" not in line
    assert build_parser().parse_args(["worker", "job.toml", "--processes", "2"]).processes == 2
