"""The docs site's reference pages are generated from the code: every key, command, flag,
export field, metric and exit status is on them, and a change in the code changes them."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import msgspec
import pytest

from pipeline.cli.parser import build_parser
from pipeline.exit_codes import EPILOG, ExitStatus
from pipeline.job import sections
from pipeline.reference import commands, exit_status, exports, job_keys, metrics
from pipeline.reference.pages import render_pages, undocumented
from pipeline.results.export.records import record_fields
from pipeline.watch import metrics as run_metrics


def _section_rows(page: str, section: str) -> str:
    start = page.index(f"\n## [{section}]\n")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else len(page)]


def test_every_key_of_every_section_is_on_the_job_file_page() -> None:
    page = job_keys.page()
    for field in msgspec.structs.fields(sections.RawJob):
        rows = _section_rows(page, field.name)
        for key in msgspec.structs.fields(field.type):
            assert f"| `{key.name}` |" in rows, f"[{field.name}] {key.name}"


def test_a_key_row_has_its_type_default_unit_and_feature() -> None:
    rows = _section_rows(job_keys.page(), "limits")
    assert "| `requests_per_minute` | integer (>= 1, <= 10,000,000) | `60` | a minute |" in rows
    assert "| `budget_usd` | number (>= 0, <= 1,000,000,000) | `0.0` | USD | [limits] |" in rows
    grounding = _section_rows(job_keys.page(), "grounding")
    assert '| `datastore` | string | `""` |  | vertex_ai_search |' in grounding
    assert '| `engine` | string | `""` |  | vertex_ai_search | See `datastore`. |' in grounding
    assert "**required**" in _section_rows(job_keys.page(), "job")
    assert "| Own retrieval ([retrieval]) where managed grounding fails |" in grounding


def _copy_of_sections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """The reference reads a copy of the job spec's sections in which ``old`` is ``new``."""
    source = inspect.getsource(sections)
    assert source.count(old) == 1
    copy = tmp_path / "sections_copy.py"
    copy.write_text(source.replace(old, new), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("sections_copy", copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sections_copy", module)  # msgspec and inspect look here
    spec.loader.exec_module(module)
    monkeypatch.setattr(job_keys, "sections", module)


def test_a_changed_default_in_a_copy_of_the_spec_changes_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = render_pages()["reference/job-file.md"]
    _copy_of_sections(
        tmp_path,
        monkeypatch,
        "MAX_REQUESTS_PER_MINUTE)] = 60\n",
        "MAX_REQUESTS_PER_MINUTE)] = 75\n",
    )
    after = render_pages()["reference/job-file.md"]
    assert after != before
    changed = [line for line in after.splitlines() if line not in before.splitlines()]
    assert len(changed) == 1
    assert changed[0].startswith(
        "| `requests_per_minute` | integer (>= 1, <= 10,000,000) | `75` | a minute | [limits] |"
        " Model requests a minute, shared by every process of the job"
    )


def test_a_new_key_with_its_comment_appears_in_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_of_sections(
        tmp_path,
        monkeypatch,
        "    # Input tokens per minute",
        "    # Seconds a storm of 503s is waited out.\n    storm_wait_s: Seconds = 600.0\n"
        "    # Input tokens per minute",
    )
    rows = _section_rows(job_keys.page(), "limits")
    assert (
        "| `storm_wait_s` | number (> 0, <= 604,800) | `600.0` | seconds | [limits] |"
        " Seconds a storm of 503s is waited out. |" in rows
    )


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_command_and_flag_is_on_the_commands_page() -> None:
    page = commands.page()
    for parser in _parsers(build_parser()):
        assert f"## `{parser.prog}`" in page, parser.prog
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert re.search(rf"`(?:[-\w]+, )?{re.escape(flag)}\b", page), flag
    assert "## `ground emulator`" in page and "`--port`" in page  # the emulator's own flags


def test_every_export_field_is_on_the_export_page() -> None:
    page = exports.page()
    for field in record_fields(versions=True):
        assert f"| `{field.name}` |" in page, field.name


def test_every_metric_in_the_metrics_module_table_is_on_the_metrics_page() -> None:
    page = metrics.page()
    listed = set(re.findall(r"``(ground_[a-z_]+)", run_metrics.__doc__ or ""))
    assert len(listed) > 15
    for name in listed:
        assert f"`{name}`" in page or f"`{name}_total`" in page, name


def test_every_exit_status_is_on_its_page() -> None:
    page = exit_status.page()
    assert EPILOG in page
    for status in ExitStatus:
        assert f"`{int(status)}`" in page


def test_the_site_hook_refuses_a_committed_generated_page_and_relinks_the_readme(
    tmp_path: Path,
) -> None:
    from mkdocs.config import load_config
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File, Files

    import mkdocs_hooks

    assert mkdocs_hooks._from_root(
        "[a](docs/guides/vertex.md#x) [b](BENCHMARKS.md)", "index.md"
    ) == ("[a](guides/vertex.md#x) [b](benchmarks.md)")
    config = load_config(str(Path(mkdocs_hooks.__file__).parent / "mkdocs.yml"))
    generated = Files(
        [
            File(
                "reference/job-file.md",
                str(tmp_path),
                str(tmp_path / "site"),
                use_directory_urls=True,
            )
        ]
    )
    with pytest.raises(PluginError, match="generated when the site is built"):
        config.plugins.on_files(generated, config=config)  # as a build runs the hook
    pages = config.plugins.on_files(Files([]), config=config)
    assert {"index.md", "benchmarks.md", "reference/job-file.md"} <= {f.src_uri for f in pages}


def test_every_key_command_and_flag_has_a_description() -> None:
    assert undocumented() == []


def test_a_key_without_its_comment_or_a_flag_without_help_is_undocumented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_of_sections(
        tmp_path,
        monkeypatch,
        "    # Input tokens per minute",
        "    storm_wait_s: Seconds = 600.0\n    # Input tokens per minute",
    )
    real = commands.build_parser

    def without_help() -> argparse.ArgumentParser:
        parser = real()
        parser.add_argument("--quietly", action="store_true")
        return parser

    monkeypatch.setattr(commands, "build_parser", without_help)
    assert undocumented() == [
        "[limits] storm_wait_s: no comment above it in pipeline/job/sections.py",
        "ground --quietly: no help=",
    ]


def test_the_site_hook_refuses_to_build_while_a_key_is_undocumented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mkdocs.config import load_config
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import Files

    import mkdocs_hooks

    _copy_of_sections(
        tmp_path,
        monkeypatch,
        "    # Input tokens per minute",
        "    storm_wait_s: Seconds = 600.0\n    # Input tokens per minute",
    )
    config = load_config(str(Path(mkdocs_hooks.__file__).parent / "mkdocs.yml"))
    with pytest.raises(PluginError, match=r"without a description[\s\S]*\[limits\] storm_wait_s"):
        config.plugins.on_files(Files([]), config=config)
