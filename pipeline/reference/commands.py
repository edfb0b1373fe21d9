"""Every command and flag, read from ``ground``'s own parser (:mod:`pipeline.cli.parser`) and,
for ``ground emulator``, from the emulator's (:mod:`pipeline.emulator.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from pipeline.cli.parser import build_parser
from pipeline.reference.markdown import GENERATED_NOTE, code, table


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _emulator_parser() -> argparse.ArgumentParser:
    from pipeline.emulator.cli import add_arguments  # the emulator parses its own flags

    parser = argparse.ArgumentParser(prog="ground emulator")
    add_arguments(parser)
    return parser


def _value(action: argparse.Action) -> str:
    if action.nargs == 0 or not action.option_strings:  # a flag, or a positional's own name
        return ""
    if action.choices is not None:
        return " / ".join(str(c) for c in action.choices)
    if action.metavar is not None:
        return str(action.metavar)
    return action.dest.upper()


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, [], argparse.SUPPRESS):
        return ""
    return str(default)


def _rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(action.option_strings) or action.dest.upper()
        default = _default(action)
        rows.append(
            (
                code(names),
                code(_value(action)) if _value(action) else "",
                code(default) if default else "",
                (action.help or "").replace("%(default)s", default),
            )
        )
    return rows


def commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(command line, help, parser)`` for ``ground`` and each command, nested ones too."""
    root = build_parser()
    found = [("ground", root.description or "", root)]
    for name, text, sub in _subcommands(root):
        if name == "emulator":
            sub = _emulator_parser()
        found.append((f"ground {name}", text, sub))
        for inner, inner_text, inner_sub in _subcommands(sub):
            found.append((f"ground {name} {inner}", inner_text, inner_sub))
    return found


def page() -> str:
    out = [
        "# Commands and flags",
        "",
        GENERATED_NOTE.format(source="`pipeline/cli/parser.py`"),
        "",
        "Every command that takes a job file (`JOB`) also takes `--set SECTION.KEY=VALUE`"
        " (repeatable) and `--log-format`. The exit statuses are in"
        " [Exit status](exit-status.md).",
    ]
    for line, text, parser in commands():
        out += ["", f"## `{line}`", ""]
        if text:
            out += [text[0].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
        rows = _rows(parser)
        if rows:
            out.append(table(("argument", "value", "default", "what it does"), rows))
        else:
            out.append("No arguments of its own.")
    return "\n".join(out) + "\n"
