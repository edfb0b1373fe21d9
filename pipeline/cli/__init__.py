"""``ground``, the command line: argument parsing (:mod:`.parser`) and dispatch (:mod:`.main`)
only; each command calls one function in :mod:`pipeline.commands`."""

from pipeline.cli.dispatch import main

__all__ = ["main"]
