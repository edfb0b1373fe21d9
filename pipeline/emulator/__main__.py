"""``python -m pipeline.emulator [--port N] ...``: the same as ``ground emulator``."""

from __future__ import annotations

import argparse
import sys

from pipeline.emulator.cli import add_arguments, run


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.emulator", description="Local Gemini-compatible server."
    )
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
