"""The experiment ledger: one SQLite file that records every tuning and apply run.

Default ``<state_dir>/ledger.sqlite3`` (see :func:`exemplar_tune.runs.state_dir`). An
*experiment* is one controller invocation (``apply`` or ``tune``); it tests *layers* in order,
each applied under its own host-journal run id, and records per-host results, benchmark
*samples* for the baseline and candidate arms, the keep/restore *decision* and a timeline of
*events*. Everything needed to inspect, resume or roll back a run after the controller dies is
here; what changed on each host stays authoritative in that host's journal.

Durability: WAL mode, ``synchronous=FULL``, foreign keys on, and every write is one
``BEGIN IMMEDIATE`` transaction, so a SIGKILL at any point leaves a consistent file. The schema
is versioned with ``PRAGMA user_version`` and migrated on open; ``PRAGMA application_id`` marks
the file as ours. A file that is not a readable ledger is a ``UserError`` naming the path.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ansible_collections.exemplar.tune.plugins.module_utils.bounded_lock import (
    holder_of,
    wait_seconds,
)

from exemplar_tune.errors import UserError
from exemplar_tune.runs import new_run_id, state_dir
from exemplar_tune.signals import signals_deferred

APPLICATION_ID = 0x45544C47  # "ETLG"
KINDS = ("apply", "tune", "sweep")
EXPERIMENT_STATUSES = ("running", "finished", "failed", "rolled_back", "interrupted")
LAYER_STATUSES = ("pending", "baseline", "applied", "measuring", "kept", "restored", "failed",
                  "skipped")
LAYER_DONE = ("kept", "restored", "failed", "skipped")
ARMS = ("baseline", "candidate")  # tune's arms; a sweep's arms are its settings
SWEEP_ARM = re.compile(r"^[A-Z][A-Z0-9_]*=[^,=\s]*(,[A-Z][A-Z0-9_]*=[^,=\s]*)*$")
ACTIONS = ("keep", "restore")
LEVELS = ("debug", "info", "warning", "error")
LAYER_FIELDS = ("run_id", "reboot_required", "started_at", "finished_at")
# a host row of a restore (record_restore): the layer put back there, or not (with the error)
RESTORED, NOT_RESTORED = "restored", "not restored"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


_EXPERIMENT_COLUMNS = ("id, kind, started_at, finished_at, status, profile_name, target_json, "
                       "controller_pid, controller_host, options_json, summary_json")
_SAMPLE_COLUMNS = ("id, experiment_id, layer, arm, shape, run_index, value, unit, samples_json, "
                   "log_path, seconds, recorded_at")

# One tuple of statements per schema version; index 0 migrates user_version 0 -> 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = ((
    f"""CREATE TABLE experiments (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('apply', 'tune')),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL CHECK (status IN {_in(EXPERIMENT_STATUSES)}),
    profile_name TEXT,
    target_json TEXT NOT NULL,
    controller_pid INTEGER NOT NULL,
    controller_host TEXT NOT NULL,
    options_json TEXT NOT NULL
)""",
    f"""CREATE TABLE layers (
    experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    layer TEXT NOT NULL,
    position INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN {_in(LAYER_STATUSES)}),
    reboot_required INTEGER NOT NULL DEFAULT 0 CHECK (reboot_required IN (0, 1)),
    started_at TEXT,
    finished_at TEXT,
    PRIMARY KEY (experiment_id, layer)
)""",
    """CREATE TABLE hosts (
    id INTEGER PRIMARY KEY,
    experiment_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    host TEXT NOT NULL,
    changed_json TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    recorded_at TEXT NOT NULL,
    FOREIGN KEY (experiment_id, layer) REFERENCES layers(experiment_id, layer) ON DELETE CASCADE
)""",
    """CREATE TABLE samples (
    id INTEGER PRIMARY KEY,
    experiment_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('baseline', 'candidate')),
    shape TEXT NOT NULL,
    run_index INTEGER NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    samples_json TEXT NOT NULL,
    log_path TEXT,
    seconds REAL,
    recorded_at TEXT NOT NULL,
    UNIQUE (experiment_id, layer, arm, shape, run_index),
    FOREIGN KEY (experiment_id, layer) REFERENCES layers(experiment_id, layer) ON DELETE CASCADE
)""",
    f"""CREATE TABLE decisions (
    experiment_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN {_in(ACTIONS)}),
    reason TEXT NOT NULL,
    comparisons_json TEXT NOT NULL,
    decided_at TEXT NOT NULL,
    PRIMARY KEY (experiment_id, layer),
    FOREIGN KEY (experiment_id, layer) REFERENCES layers(experiment_id, layer) ON DELETE CASCADE
)""",
    f"""CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    at TEXT NOT NULL,
    level TEXT NOT NULL CHECK (level IN {_in(LEVELS)}),
    message TEXT NOT NULL
)""",
    "CREATE INDEX experiments_started ON experiments(started_at)",
    "CREATE INDEX hosts_layer ON hosts(experiment_id, layer)",
    "CREATE INDEX events_experiment ON events(experiment_id, id)",
), (
    # v2: the experiment's outcome against the profile's reference (tune's summary).
    "ALTER TABLE experiments ADD COLUMN summary_json TEXT",
), (
    # v3: sweeps -- an experiment kind, and arms named by their settings. SQLite cannot change
    # a CHECK in place: both tables are rebuilt (foreign keys off, see _migrate).
    f"""CREATE TABLE experiments_v3 (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN {_in(KINDS)}),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL CHECK (status IN {_in(EXPERIMENT_STATUSES)}),
    profile_name TEXT,
    target_json TEXT NOT NULL,
    controller_pid INTEGER NOT NULL,
    controller_host TEXT NOT NULL,
    options_json TEXT NOT NULL,
    summary_json TEXT
)""",
    f"INSERT INTO experiments_v3 SELECT {_EXPERIMENT_COLUMNS} FROM experiments",  # noqa: S608 - constants
    "DROP TABLE experiments",
    "ALTER TABLE experiments_v3 RENAME TO experiments",
    "CREATE INDEX experiments_started ON experiments(started_at)",
    """CREATE TABLE samples_v3 (
    id INTEGER PRIMARY KEY,
    experiment_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (length(arm) BETWEEN 1 AND 1000),
    shape TEXT NOT NULL,
    run_index INTEGER NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    samples_json TEXT NOT NULL,
    log_path TEXT,
    seconds REAL,
    recorded_at TEXT NOT NULL,
    UNIQUE (experiment_id, layer, arm, shape, run_index),
    FOREIGN KEY (experiment_id, layer) REFERENCES layers(experiment_id, layer) ON DELETE CASCADE
)""",
    f"INSERT INTO samples_v3 SELECT {_SAMPLE_COLUMNS} FROM samples",  # noqa: S608 - constants
    "DROP TABLE samples",
    "ALTER TABLE samples_v3 RENAME TO samples",
), (
    # v4: preflight results kept per host (preflight --record), for repeat offenders.
    """CREATE TABLE preflight_runs (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    host TEXT NOT NULL,
    profile_name TEXT
)""",
    """CREATE TABLE preflight_failures (
    run_id INTEGER NOT NULL REFERENCES preflight_runs(id) ON DELETE CASCADE,
    check_id TEXT NOT NULL,
    PRIMARY KEY (run_id, check_id)
)""",
    "CREATE INDEX preflight_runs_host ON preflight_runs(host, at)",
))
SCHEMA_VERSION = len(MIGRATIONS)
_T = TypeVar("_T")


class NoLedger(UserError):
    """A command that only reads the ledger was pointed at a file that does not exist."""


def resumable(experiment: dict[str, Any]) -> bool:
    """Whether ``resume`` can continue ``experiment`` (a ledger row): a measured one (``tune``,
    ``apply --bench``) records the loop options it needs; a plain ``apply`` and a ``sweep``
    do not, and are rolled back instead."""
    return "profile" in (experiment.get("options") or {})


def next_steps(experiment: dict[str, Any]) -> str:
    """What puts right an experiment left unfinished: rollback, and resume where it works."""
    steps = f"'exemplar-tune rollback --run {experiment['id']}' restores it"
    if resumable(experiment):
        steps += f", 'exemplar-tune resume --run {experiment['id']}' continues it"
    return steps


def default_path() -> Path:
    """``<state_dir>/ledger.sqlite3``."""
    return state_dir() / "ledger.sqlite3"


def _now() -> str:
    """UTC, ISO 8601 with microseconds: sorts as text."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(allowed)}")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rpartition(")")[2].split()[0] != "Z"


def _row(row: sqlite3.Row, drop: tuple[str, ...] = ("experiment_id",)) -> dict[str, Any]:
    """A row as a dict: ``*_json`` columns decoded under their short name, flags as bools."""
    out: dict[str, Any] = {}
    for key, value in zip(row.keys(), tuple(row), strict=True):
        if key in drop:
            continue
        if key.endswith("_json"):
            out[key.removesuffix("_json")] = None if value is None else json.loads(value)
        elif key == "reboot_required":
            out[key] = bool(value)
        else:
            out[key] = value
    return out


def _guarded(method: Callable[..., _T]) -> Callable[..., _T]:
    """Report SQLite failures (corruption, a lock held too long ...) as one line naming the file.

    Integrity errors are left alone: the methods turn the expected ones into ``ValueError``.
    """
    @functools.wraps(method)
    def wrapper(self: Ledger, *args: Any, **kwargs: Any) -> _T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise UserError(f"{self.path}: ledger error: {exc}") from None
            raise UserError(f"{self.path}: the ledger stayed locked for {wait_seconds():g} s by "
                            f"{self.holder()}; nothing was recorded (if that process is stuck, "
                            "stop it and try again)") from None
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{self.path}: ledger error: {exc}") from None
        except json.JSONDecodeError as exc:
            raise UserError(f"{self.path}: a ledger record is corrupt (a JSON column: {exc}); "
                            "'exemplar-tune history' lists what is still readable") from None
    return wrapper


class Ledger:
    """One open ledger file. Use as a context manager; every method is one transaction.

    Unknown experiment ids or layers raise ``UserError``; invalid enum values (a status, an
    arm ...) and duplicate records are programming errors and raise ``ValueError``.
    """

    def __init__(self, path: Path | str | None = None, *, create: bool = True,
                 read_only: bool = False) -> None:
        """Open (or, with ``create``, create) the ledger at ``path``. ``read_only``: the
        caller only reads, and a ledger it cannot write (a read-only filesystem or
        directory) is opened for reading, neither created nor upgraded."""
        self.path = Path(path) if path is not None else default_path()
        if (read_only or not create) and not self.path.exists():
            raise NoLedger(f"no ledger at {self.path}: nothing has been recorded there (tune, "
                           "apply and sweep write it; --ledger names another)")
        read_only = read_only and not (os.access(self.path.parent, os.W_OK)
                                       and os.access(self.path, os.W_OK))
        if not read_only:
            self._make_directory()
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise UserError(f"{self.path}: the ledger is empty (0 bytes): if it held "
                            "experiments, put back a copy; to start a new ledger, remove the file")
        try:
            self._conn = sqlite3.connect(self._address(read_only), isolation_level=None,
                                         timeout=wait_seconds(), uri=True)
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None
        self._conn.row_factory = sqlite3.Row
        try:
            self._check_identity()
            if read_only:
                self._check_current()
            else:
                self._configure()
                self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise self._unreadable(exc) from None
        except UserError:
            self._conn.close()
            raise

    def holder(self) -> str:
        """Who holds a lock on the ledger (its database, WAL or shared-memory file)."""
        found = []
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                found.append(os.stat(f"{self.path}{suffix}"))
        return holder_of(*found)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (committed data is already on disk)."""
        self._conn.close()

    # -- opening -------------------------------------------------------------------------------

    def _make_directory(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{self.path}: cannot create the ledger's directory "
                            f"({exc.strerror}); --ledger names another place") from None
        if not os.access(self.path.parent, os.W_OK):
            raise UserError(f"{self.path}: the ledger's directory is not writable (a read-only "
                            "filesystem?); --ledger names another place")

    def _address(self, read_only: bool) -> str:
        """The SQLite URI of the ledger. Opened read-only, it is read as an unchanging file
        (no WAL shared memory, which would need a writable directory)."""
        address = f"file:{urllib.parse.quote(str(self.path.resolve()))}"
        return address + "?mode=ro&immutable=1" if read_only else address

    def _check_current(self) -> None:
        """A ledger opened read-only is never upgraded: an older schema is refused."""
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise UserError(f"{self.path}: ledger schema v{version}, this exemplar-tune reads "
                            f"v{SCHEMA_VERSION}; a command that writes the ledger upgrades it")

    def _unreadable(self, exc: Exception) -> UserError:
        return UserError(f"{self.path}: not a readable exemplar-tune ledger ({exc})")

    def _check_identity(self) -> None:
        """Refuse another application's SQLite file before anything is written to it."""
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != APPLICATION_ID and (version or tables):
            raise UserError(f"{self.path}: an SQLite file, but not an exemplar-tune ledger")

    def _configure(self) -> None:
        mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise UserError(f"{self.path}: cannot use WAL mode (got {mode})")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")

    def _migrate(self) -> None:
        """Create or upgrade the schema; a no-op when already current. Foreign keys are off
        while tables are rebuilt (SQLite's documented way to change a table's constraints)
        and checked before the upgrade commits."""
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(f"{self.path}: ledger schema v{version} is newer than this "
                            f"exemplar-tune understands (v{SCHEMA_VERSION}); upgrade it")
        if version == SCHEMA_VERSION:
            return
        self._conn.execute("PRAGMA foreign_keys=OFF")
        try:
            with self._write():
                version = self._conn.execute("PRAGMA user_version").fetchone()[0]
                for statements in MIGRATIONS[version:]:
                    for statement in statements:
                        self._conn.execute(statement)
                if self._conn.execute("PRAGMA foreign_key_check").fetchone():
                    raise UserError(f"{self.path}: the ledger's records do not fit together "
                                    "after the upgrade; nothing was changed")
                self._conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        finally:
            self._conn.execute("PRAGMA foreign_keys=ON")

    def _begin(self, statement: str) -> None:
        """Start a transaction, first rolling back one that was left open."""
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        self._conn.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on any exception.

        SIGINT and SIGTERM wait until it ends (:func:`signals_deferred`), so a stop never
        leaves a transaction open that would refuse every later write.
        """
        with signals_deferred():
            self._begin("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so that a multi-table read sees one snapshot."""
        with signals_deferred():
            self._begin("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    def _require_experiment(self, exp: str) -> None:
        found = self._conn.execute("SELECT 1 FROM experiments WHERE id = ?", (exp,)).fetchone()
        if not found:
            raise UserError(f"no experiment {exp!r} in {self.path}")

    def _require_layer(self, exp: str, layer: str) -> None:
        self._require_experiment(exp)
        found = self._conn.execute("SELECT 1 FROM layers WHERE experiment_id = ? AND layer = ?",
                                   (exp, layer)).fetchone()
        if not found:
            raise UserError(f"no layer {layer!r} in experiment {exp!r} in {self.path}")

    # -- writing -------------------------------------------------------------------------------

    @_guarded
    def record_preflight(self, hosts: Mapping[str, tuple[str | None, list[str]]]) -> None:
        """Record one preflight: per host its profile and the checks that failed there."""
        now = _now()
        with self._write():
            for host, (profile, failing) in sorted(hosts.items()):
                run = self._conn.execute(
                    "INSERT INTO preflight_runs (at, host, profile_name) VALUES (?, ?, ?)",
                    (now, host, profile)).lastrowid
                self._conn.executemany(
                    "INSERT INTO preflight_failures (run_id, check_id) VALUES (?, ?)",
                    [(run, check) for check in sorted(set(failing))])

    @_guarded
    def start_experiment(self, kind: str, profile_name: str | None, target: Mapping[str, Any],
                         options: Mapping[str, Any]) -> str:
        """Record a new ``running`` experiment owned by this process; return its id.

        ``target`` is what reaches the same hosts again (inventory path, limit, sysroot) and
        ``options`` the settings the loop runs with; both must be JSON-serialisable.
        """
        _check(kind, KINDS, "experiment kind")
        row = (kind, _now(), profile_name, json.dumps(dict(target), sort_keys=True), os.getpid(),
               socket.gethostname(), json.dumps(dict(options), sort_keys=True))
        with self._write() as conn:
            while True:
                exp = new_run_id()
                try:
                    conn.execute("INSERT INTO experiments (id, kind, started_at, status, "
                                 "profile_name, target_json, controller_pid, controller_host, "
                                 "options_json) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                                 (exp, *row))
                except sqlite3.IntegrityError:
                    continue  # same second, same 16 random bits: draw again
                return exp

    @_guarded
    def resume_experiment(self, exp: str) -> None:
        """Take over an unfinished experiment: ``running`` again, owned by this process."""
        with self._write() as conn:
            self._require_experiment(exp)
            conn.execute("UPDATE experiments SET status = 'running', finished_at = NULL, "
                         "controller_pid = ?, controller_host = ? WHERE id = ?",
                         (os.getpid(), socket.gethostname(), exp))

    @_guarded
    def add_layer(self, exp: str, layer: str, position: int, run_id: str) -> None:
        """Add ``layer`` as ``pending`` at ``position``, applied under host-journal ``run_id``."""
        with self._write() as conn:
            self._require_experiment(exp)
            try:
                conn.execute("INSERT INTO layers (experiment_id, layer, position, run_id) "
                             "VALUES (?, ?, ?, ?)", (exp, layer, position, run_id))
            except sqlite3.IntegrityError:
                raise ValueError(f"layer {layer!r} is already in experiment {exp!r}") from None

    @_guarded
    def reset_layer(self, exp: str, layer: str) -> None:
        """Forget a layer's hosts, samples and decision and make it ``pending`` again
        (measuring it anew when an interrupted experiment is resumed)."""
        with self._write() as conn:
            self._require_layer(exp, layer)
            for table in ("hosts", "samples", "decisions"):
                conn.execute(f"DELETE FROM {table} WHERE experiment_id = ? AND layer = ?",  # noqa: S608
                             (exp, layer))
            conn.execute("UPDATE layers SET status = 'pending', reboot_required = 0, "
                         "finished_at = NULL WHERE experiment_id = ? AND layer = ?", (exp, layer))

    @_guarded
    def set_layer_status(self, exp: str, layer: str, status: str, **fields: Any) -> None:
        """Move ``layer`` to ``status``; ``fields`` may set run_id, reboot_required,
        started_at, finished_at. ``started_at`` is stamped the first time a layer leaves
        ``pending`` and ``finished_at`` when it reaches kept/restored/failed/skipped, unless
        given explicitly."""
        _check(status, LAYER_STATUSES, "layer status")
        unknown = sorted(set(fields) - set(LAYER_FIELDS))
        if unknown:
            raise ValueError(f"set_layer_status: unknown field(s) {', '.join(unknown)}")
        values = {"status": status, **fields}
        if "reboot_required" in values:
            values["reboot_required"] = int(bool(values["reboot_required"]))
        sets = [f"{key} = ?" for key in values]
        params = list(values.values())
        if status != "pending" and "started_at" not in fields:
            sets.append("started_at = COALESCE(started_at, ?)")
            params.append(_now())
        if status in LAYER_DONE and "finished_at" not in fields:
            sets.append("finished_at = ?")
            params.append(_now())
        sql = f"UPDATE layers SET {', '.join(sets)} WHERE experiment_id = ? AND layer = ?"  # noqa: S608
        with self._write() as conn:
            self._require_layer(exp, layer)
            conn.execute(sql, (*params, exp, layer))

    @_guarded
    def record_restore(self, exp: str, layer: str, host_results: Mapping[str, str | None],
                       ) -> bool:
        """Record a restore of ``layer`` from the host journals: ``{host: None}`` where it was
        put back, ``{host: error}`` where not, one row each (status ``restored`` or ``not
        restored``, no changes) after the layer's earlier rows. The layer becomes ``restored``
        once every host a row shows changing it has a ``restored`` row after its newest
        change; returns whether it is."""
        now = _now()
        rows = [(exp, layer, host, json.dumps([]), NOT_RESTORED if error else RESTORED,
                 error or None, now) for host, error in sorted(host_results.items())]
        with self._write() as conn:
            self._require_layer(exp, layer)
            conn.executemany("INSERT INTO hosts (experiment_id, layer, host, changed_json, "
                             "status, error, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            done = self._restored(exp, layer)
            if done:
                conn.execute("UPDATE layers SET status = 'restored', finished_at = "
                             "COALESCE(finished_at, ?) WHERE experiment_id = ? AND layer = ?",
                             (now, exp, layer))
            return done

    def _restored(self, exp: str, layer: str) -> bool:
        """Whether every host a row shows changing ``layer`` was restored after its newest
        change (and some host changed it)."""
        changed: dict[str, int] = {}
        restored: dict[str, int] = {}
        for row in self._conn.execute("SELECT id, host, status, changed_json FROM hosts WHERE "
                                      "experiment_id = ? AND layer = ? ORDER BY id", (exp, layer)):
            if row["status"] == RESTORED:
                restored[row["host"]] = row["id"]
            elif json.loads(row["changed_json"] or "null"):
                changed[row["host"]] = row["id"]
        return bool(changed) and all(restored.get(h, -1) > i for h, i in changed.items())

    @_guarded
    def record_hosts(self, exp: str, layer: str, host_results: Mapping[str, Mapping[str, Any]],
                     ) -> None:
        """Append one row per host: ``{host: {"status": str, "changed": <JSON>, "error":
        str | None}}``. Rows are never overwritten, so an apply and a later restore of the
        same layer both stay on record (newest last)."""
        now = _now()
        rows = [(exp, layer, host, json.dumps(result.get("changed"), sort_keys=True),
                 str(result["status"]), result.get("error") or None, now)
                for host, result in sorted(host_results.items())]
        with self._write() as conn:
            self._require_layer(exp, layer)
            conn.executemany("INSERT INTO hosts (experiment_id, layer, host, changed_json, "
                             "status, error, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    @_guarded
    def add_sample(self, exp: str, layer: str, arm: str, shape: str, run_index: int,
                   value: float, unit: str, samples: list[float], log_path: str | None,
                   seconds: float | None) -> None:
        """Record one benchmark run: its summary ``value`` and the within-run ``samples``.

        A second sample for the same (layer, arm, shape, run_index) is a ``ValueError``.
        """
        if arm not in ARMS and not SWEEP_ARM.match(arm):
            raise ValueError(f"arm {arm!r} is neither {' nor '.join(ARMS)} nor NAME=VALUE,...")
        row = (exp, layer, arm, shape, int(run_index), float(value), unit,
               json.dumps([float(s) for s in samples]),
               None if log_path is None else str(log_path), seconds, _now())
        with self._write() as conn:
            self._require_layer(exp, layer)
            try:
                conn.execute("INSERT INTO samples (experiment_id, layer, arm, shape, run_index, "
                             "value, unit, samples_json, log_path, seconds, recorded_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            except sqlite3.IntegrityError:
                raise ValueError(f"sample {arm}/{shape}/{run_index} of layer {layer!r} is "
                                 f"already recorded in experiment {exp!r}") from None

    @_guarded
    def record_decision(self, exp: str, layer: str, action: str, reason: str,
                        comparisons: Any) -> None:
        """Record the keep/restore decision for ``layer`` (once) with its evidence."""
        _check(action, ACTIONS, "decision")
        row = (exp, layer, action, reason, json.dumps(comparisons, sort_keys=True), _now())
        with self._write() as conn:
            self._require_layer(exp, layer)
            try:
                conn.execute("INSERT INTO decisions (experiment_id, layer, action, reason, "
                             "comparisons_json, decided_at) VALUES (?, ?, ?, ?, ?, ?)", row)
            except sqlite3.IntegrityError:
                raise ValueError(f"layer {layer!r} of experiment {exp!r} already has a "
                                 "decision") from None

    @_guarded
    def log_event(self, exp: str, level: str, message: str) -> None:
        """Append one line to the experiment's timeline."""
        _check(level, LEVELS, "event level")
        with self._write() as conn:
            self._require_experiment(exp)
            conn.execute("INSERT INTO events (experiment_id, at, level, message) "
                         "VALUES (?, ?, ?, ?)", (exp, _now(), level, message))

    @_guarded
    def set_summary(self, exp: str, summary: Mapping[str, Any]) -> None:
        """Store the experiment's summary (JSON-serialisable), replacing any earlier one."""
        with self._write() as conn:
            self._require_experiment(exp)
            conn.execute("UPDATE experiments SET summary_json = ? WHERE id = ?",
                         (json.dumps(dict(summary), sort_keys=True), exp))

    @_guarded
    def finish(self, exp: str, status: str) -> None:
        """Close the experiment as finished, failed, rolled_back or interrupted."""
        _check(status, EXPERIMENT_STATUSES[1:], "final status")
        with self._write() as conn:
            self._require_experiment(exp)
            conn.execute("UPDATE experiments SET status = ?, finished_at = ? WHERE id = ?",
                         (status, _now(), exp))

    # -- reading -------------------------------------------------------------------------------

    @_guarded
    def unfinished(self) -> list[dict[str, Any]]:
        """``running`` experiments whose controller is gone or cannot be checked, oldest first.

        Each has ``controller_alive``: ``False`` when its pid is dead on this host, ``None``
        when it ran on another host (it may still be running there). Experiments whose
        controller is alive on this host are in progress, not unfinished, and are left out.
        """
        here = socket.gethostname()
        out = []
        rows = self._conn.execute("SELECT * FROM experiments WHERE status = 'running' "
                                  "ORDER BY started_at, rowid").fetchall()
        for row in rows:
            experiment = _row(row, drop=())
            if row["controller_host"] != here:
                experiment["controller_alive"] = None
            elif pid_alive(row["controller_pid"]):
                continue
            else:
                experiment["controller_alive"] = False
            out.append(experiment)
        return out

    @_guarded
    def history(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest ``limit`` experiments, newest first, each with its layer count."""
        rows = self._conn.execute(
            "SELECT e.*, (SELECT count(*) FROM layers l WHERE l.experiment_id = e.id) AS layers "
            "FROM experiments e ORDER BY e.started_at DESC, e.rowid DESC LIMIT ?", (limit,))
        return [_row(row, drop=()) for row in rows]

    def _resolve(self, exp: str) -> str:
        """An experiment id, ``latest``, or the host-journal run id of one of its layers
        (``apply --run-id NAME``) as the id of its experiment."""
        if exp != "latest":
            found = self._conn.execute("SELECT id FROM experiments WHERE id = ?", (exp,))
            if found.fetchone():
                return exp
            owner = self._conn.execute("SELECT experiment_id FROM layers WHERE run_id = ? "
                                       "ORDER BY rowid DESC LIMIT 1", (exp,)).fetchone()
            if owner is None:
                raise UserError(f"no experiment {exp!r} in {self.path}")
            return owner["experiment_id"]
        row = self._conn.execute("SELECT id FROM experiments "
                                 "ORDER BY started_at DESC, rowid DESC LIMIT 1").fetchone()
        if row is None:
            raise UserError(f"no experiment recorded yet in {self.path}")
        return row["id"]

    @_guarded
    def show(self, exp: str) -> dict[str, Any]:
        """Everything about one experiment (or ``latest``), JSON-ready: ``experiment`` plus
        ``layers``, ``hosts``, ``samples``, ``decisions`` and ``events`` in recorded order."""
        with self._read():
            return self._show(self._resolve(exp))

    def _show(self, exp: str) -> dict[str, Any]:
        def rows(table: str, order: str) -> list[dict[str, Any]]:
            sql = f"SELECT * FROM {table} WHERE experiment_id = ? ORDER BY {order}"  # noqa: S608
            cursor = self._conn.execute(sql, (exp,))
            return [_row(row) for row in cursor]

        experiment = self._conn.execute("SELECT * FROM experiments WHERE id = ?", (exp,))
        return {
            "experiment": _row(experiment.fetchone(), drop=()),
            "layers": rows("layers", "position, layer"),
            "hosts": [_drop_id(r) for r in rows("hosts", "id")],
            "samples": [_drop_id(r) for r in rows("samples", "layer, arm, shape, run_index")],
            "decisions": rows("decisions", "decided_at"),
            "events": [_drop_id(r) for r in rows("events", "id")],
        }

    @_guarded
    def preflight_history(self, runs: int, since: str,
                          hosts: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Per host its last ``runs`` recorded preflights at or after ``since`` (the same
        form as the ledger's times), newest first: ``[{at, failing: [check ids]}]``;
        ``hosts`` limits the hosts read."""
        out: dict[str, list[dict[str, Any]]] = {}
        wanted = None if hosts is None else set(hosts)
        with self._read():
            rows = self._conn.execute(
                "SELECT r.id, r.host, r.at, f.check_id FROM (SELECT *, row_number() OVER "
                "(PARTITION BY host ORDER BY at DESC, id DESC) AS n FROM preflight_runs "
                "WHERE at >= ?) r LEFT JOIN preflight_failures f ON f.run_id = r.id "
                "WHERE r.n <= ? ORDER BY r.host, r.at DESC, r.id DESC", (since, runs))
            seen: dict[int, dict[str, Any]] = {}
            for row in rows:
                if wanted is not None and row["host"] not in wanted:
                    continue
                run = seen.get(row["id"])
                if run is None:
                    run = seen[row["id"]] = {"at": row["at"], "failing": []}
                    out.setdefault(row["host"], []).append(run)
                if row["check_id"]:
                    run["failing"].append(row["check_id"])
        return out

    @_guarded
    def sample_seconds(self, shapes: list[str], limit: int = 200) -> dict[str, list[float]]:
        """Seconds of the most recent runs (at most ``limit`` each) of these shapes, any
        experiment: what a plan's time estimate is made of."""
        out: dict[str, list[float]] = {}
        with self._read():
            for shape in shapes:
                rows = self._conn.execute(
                    "SELECT seconds FROM samples WHERE shape = ? AND seconds IS NOT NULL "
                    "ORDER BY recorded_at DESC LIMIT ?", (shape, limit)).fetchall()
                if rows:
                    out[shape] = [row[0] for row in rows]
        return out

    @_guarded
    def export(self, exp: str | None = None) -> dict[str, Any]:
        """A JSON-serialisable dump: one experiment, or all of them oldest first."""
        with self._read():
            if exp is not None:
                ids = [self._resolve(exp)]
            else:
                ids = [row["id"] for row in self._conn.execute(
                    "SELECT id FROM experiments ORDER BY started_at, rowid")]
            return {"ledger": str(self.path), "schema_version": SCHEMA_VERSION,
                    "experiments": [self._show(i) for i in ids]}

    @_guarded
    def samples_for(self, exp: str, layer: str) -> dict[str, dict[str, list[float]]]:
        """The run values of ``layer`` as ``{arm: {shape: [value by run_index]}}``."""
        with self._read():
            self._require_layer(exp, layer)
            rows = self._conn.execute(
                "SELECT arm, shape, value FROM samples WHERE experiment_id = ? AND layer = ? "
                "ORDER BY arm, shape, run_index", (exp, layer)).fetchall()
        out: dict[str, dict[str, list[float]]] = {}
        for row in rows:
            out.setdefault(row["arm"], {}).setdefault(row["shape"], []).append(row["value"])
        return out


def _drop_id(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "id"}
