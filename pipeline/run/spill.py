"""Paid responses the database could not take, kept in a spill file until a run stores them.

When a commit fails for good (a full disk, a read-only or removed database file, an outage
longer than ``[job] database_outage_s``, or a stop while the database is away), the run's
writer appends each outcome it holds to a spill file: one JSON line per outcome, with the raw
paid response, the question's own id (``qid``), its state change and the ledger rows of its
calls (tokens, cost). The file is flushed and fsynced before the run says it stopped. The next
run of the job stores the kept outcomes first (:func:`read_spilled`, then the writer's
transaction), without calling the model for them again, and only then claims questions.

The spill file lives in the state directory (``[job] state_dir``; by default
``$XDG_STATE_HOME/ground``, else ``~/.local/state/ground``), best on another file system than
the database's, so that a full disk does not take both. Its name is the job's name, a digest
of the database it belongs to and the process id: several processes of one job each keep
their own, and a run stores those of processes no longer alive (and its own process's), never
a file another live process may still be writing. The directory is checked writable before a
run starts.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from pipeline.errors import GroundError
from pipeline.rows import AnswerRecord, CallRecord, StateChange, StructuredRecord
from pipeline.run.verdicts import Outcome

__all__ = [
    "SpillError",
    "SpillFile",
    "Spilled",
    "claim_spill_files",
    "ensure_writable",
    "read_spilled",
    "same_file_system",
]

STATE_DIR_NAME = "ground"  # under $XDG_STATE_HOME (or ~/.local/state)
SPILL_SUFFIX = ".spill.jsonl"


class SpillError(GroundError):
    """The state directory or a spill file cannot be used; the message is one line."""


@dataclass(slots=True)
class Spilled:
    """One kept outcome: what the writer would have stored, keyed by the question's own id."""

    qid: str
    change: StateChange | None
    answer: AnswerRecord | None = None
    structured: StructuredRecord | None = None
    calls: list[CallRecord] = field(default_factory=list)

    @property
    def cost_micro_usd(self) -> int:
        return sum(c.cost_micro_usd for c in self.calls)


def state_directory(configured: str, job_dir: Path) -> Path:
    """``[job] state_dir`` (relative to the job file's directory), or the XDG default."""
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else job_dir / path
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / STATE_DIR_NAME


def spill_prefix(state_dir: Path, job_name: str, database: str) -> Path:
    """Where the spill files of job ``job_name`` on ``database`` (its display form, no
    password) go: this, then ``.PID.spill.jsonl``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", job_name)[:80] or "job"
    digest = hashlib.sha256(database.encode()).hexdigest()[:12]
    return state_dir / f"{safe}-{digest}"


def spill_path(prefix: Path, pid: int | None = None) -> Path:
    """The spill file of process ``pid`` (this one by default)."""
    return prefix.with_name(f"{prefix.name}.{pid or os.getpid()}{SPILL_SUFFIX}")


def spill_files(prefix: Path) -> list[Path]:
    """The spill files under ``prefix`` a run may store: this process's, and those of
    processes no longer alive (another live one may still be writing its own)."""
    found = []
    for path in sorted(prefix.parent.glob(f"{prefix.name}.*{SPILL_SUFFIX}")):
        pid = _pid_of(prefix, path)
        if pid is not None and (pid == os.getpid() or not _alive(pid)):
            found.append(path)
    return found


def claim_spill_files(prefix: Path) -> list[Path]:
    """:func:`spill_files`, each made this process's by an atomic rename (``PID-N``), so that
    two runs starting together never store the same file twice; a file another run claimed
    first is left to it. A claimed file not stored (the database still refuses) is found
    again once this process has ended."""
    mine = []
    for path in spill_files(prefix):
        if _pid_of(prefix, path) == os.getpid():
            mine.append(path)
            continue
        number = 1
        while (target := _claimed(prefix, number)).exists():
            number += 1
        try:
            path.rename(target)
        except FileNotFoundError:
            continue  # claimed by another run a moment ago
        mine.append(target)
    return mine


def _claimed(prefix: Path, number: int) -> Path:
    return prefix.with_name(f"{prefix.name}.{os.getpid()}-{number}{SPILL_SUFFIX}")


def _pid_of(prefix: Path, path: Path) -> int | None:
    """The process a spill file is of: ``PREFIX.PID.spill.jsonl`` or ``PREFIX.PID-N...``."""
    middle = path.name[len(prefix.name) + 1 : -len(SPILL_SUFFIX)]
    pid = middle.split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure_writable(state_dir: Path) -> None:
    """Create ``state_dir`` when missing and prove a file can be written in it; SpillError
    in one line when not."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        probe = state_dir / f".probe-{os.getpid()}-{threading.get_ident()}"  # threads apart
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SpillError(
            f"[job] state_dir {state_dir}: cannot write there ({exc.strerror or exc}); paid"
            " responses the database cannot take are kept there: set [job] state_dir"
        ) from None


def same_file_system(state_dir: Path, database_file: str | None) -> bool:
    """Whether the spill would land on the database file's own file system."""
    if database_file is None:
        return False
    try:
        return os.stat(state_dir).st_dev == os.stat(Path(database_file).parent).st_dev
    except OSError:
        return False


class SpillFile:
    """Appends kept outcomes to one spill file (JSON lines), flushed and fsynced per group."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = 0  # outcomes kept by this run
        self.kept_cost_micro = 0  # what their calls cost

    def keep(self, outcomes: Sequence[Outcome], qid_of: Callable[[int], str | None]) -> None:
        """Append ``outcomes`` (those with something paid or a change to store); SpillError
        when the file cannot be written."""
        encoder = msgspec.json.Encoder()
        lines = []
        cost_micro = 0
        for outcome in outcomes:
            if outcome.change is None and not outcome.calls:
                continue
            question_id = _question_id(outcome)
            qid = qid_of(question_id) if question_id is not None else None
            if qid is None:
                continue  # not ours to store (no question)
            spilled = Spilled(
                qid, outcome.change, outcome.answer, outcome.structured, outcome.calls
            )
            lines.append(encoder.encode(spilled) + b"\n")
            cost_micro += spilled.cost_micro_usd
        if not lines:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as handle:
                handle.write(b"".join(lines))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise SpillError(
                f"the spill file {self.path} cannot be written: {exc.strerror or exc}"
            ) from None
        self.kept += len(lines)
        self.kept_cost_micro += cost_micro


def _question_id(outcome: Outcome) -> int | None:
    if outcome.change is not None:
        return outcome.change.question_id
    for call in outcome.calls:
        if call.question_id is not None:
            return call.question_id
    return None


def read_spilled(path: Path) -> list[Spilled]:
    """The outcomes kept in ``path`` (none when there is no file); SpillError in one line for
    a file that cannot be read. A torn last line (a crash while writing) is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SpillError(f"the spill file {path} cannot be read: {exc.strerror or exc}") from None
    decoder = msgspec.json.Decoder(Spilled)
    kept = []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            kept.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            if number == len(lines) or (number == len(lines) - 1 and not lines[-1]):
                continue  # torn while written: that outcome was never reported as kept
            raise SpillError(f"the spill file {path}, line {number}: {exc}") from None
    return kept
