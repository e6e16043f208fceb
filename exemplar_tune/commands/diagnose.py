"""``diagnose``: captured signals (turbostat, perf, NCCL and step logs ...) mapped to layers."""

from __future__ import annotations

import argparse
import json
import os
import sys

from exemplar_tune.commands import SUMMARIES
from exemplar_tune.diagnose import (
    MAX_READ,
    DiagnoseError,
    compare_reports,
    diagnose_job,
    diagnose_paths,
    parallel as parallel_module,
)
from exemplar_tune.errors import EXIT_FINDINGS, EXIT_OK, UserError
from exemplar_tune.inputs import MAX_INPUT
from exemplar_tune.sim.fabric import parse_size
from exemplar_tune.terminal import escape, join_lines


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``diagnose``."""
    _add_diagnose(sub)


DIAGNOSE_EPILOG = """examples:
  exemplar-tune diagnose turbostat.txt numastat.txt perf-report.txt
  exemplar-tune diagnose megatron.log --format json
  exemplar-tune diagnose nvidia-smi-q.txt              pasted 'nvidia-smi -q' (or -q -x XML)
  exemplar-tune diagnose before.txt after.txt --compare   two nccl-tests runs, ratio per size
  exemplar-tune diagnose stats.txt report.sqlite           nsys stats output, nsys export
  exemplar-tune diagnose a.sqlite b.sqlite --compare       NCCL kernel time per collective
  exemplar-tune diagnose --ranks logs/                     one job, one step log per rank or host

Recognised from the content: turbostat, numastat (default and -p), perf report/top,
step-time logs (Megatron-LM, NeMo/Lightning, torchtitan, DeepSpeed, HF Trainer, litgpt, tqdm,
one number per line), nccl-tests, NCCL_DEBUG=INFO logs,
nvidia-smi -q text (whole or in part, as pasted into a ticket) and -q -x XML,
nsys stats reports (text, --format csv) and nsys SQLite exports (--type sqlite).
Every finding names the layer and the preflight check it bears on. A log holding several
ranks' lines (launcher prefixes: srun --label, torchrun, OpenMPI, Ray, 'HOST: ') is also read
rank by rank: workload.slow-ranks names the ranks that log slower steps again and again,
or a little slower throughout, and those that turn slow mid-job (from which iteration).
--ranks reads a job's files (one per rank or host, or their directory) together, each file's
name standing for its rank, in --jobs worker processes (contiguous chunks of the files, their
readings merged into the report one process gives). gzip and zstd files are read directly
(zstd needs the zstd program).
Logs are read as streams: NCCL logs, nccl-tests and step-time logs of any size in bounded
memory, a finding repeated on many lines or ranks reported once with its count, first and
last line and hosts; other captures (turbostat, nvidia-smi ...) are read whole, up to 64 MiB.
exit codes: 0 nothing failing, 1 a failing finding, 2 unreadable or unrecognised input.
"""


def _add_diagnose(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("diagnose", help=SUMMARIES["diagnose"],
                         description="Analyse files captured on a node or from a job and map "
                         "what they show to layers and checks.", epilog=DIAGNOSE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("files", nargs="+", metavar="FILE",
                     help="a captured output (a regular file; - reads standard input)")
    cmd.add_argument("--format", choices=("table", "json"), default="table",
                     help="output format (default table)")
    cmd.add_argument("--ranks", action="store_true",
                     help="the files (or directories of files) are one job's logs, one per "
                     "rank or host: one report, each line named by its file")
    cmd.add_argument("--jobs", type=_jobs, default=_cpus(), metavar="N",
                     help="with --ranks: read the job's files in up to N worker processes, "
                     "each a contiguous chunk of at least "
                     f"{parallel_module.MIN_CHUNK >> 20} MiB, the report the same as with 1 "
                     "(default: the CPUs this process may use, %(default)s here; 1 reads the "
                     "files in turn in this process)")
    cmd.add_argument("--max-input", type=_size, metavar="SIZE",
                     help="read at most this much (expanded) per file, or in all with --ranks "
                     f"(K, M or G; default: {MAX_READ >> 30}G, and {MAX_INPUT >> 20}M of a "
                     "format read whole); logs are read as streams, so this bounds the time "
                     "a run takes, not its memory")
    cmd.add_argument("--compare", action="store_true",
                     help="with two nccl-tests files: busbw ratio per size (second / first); "
                     "with two nsys reports: mean NCCL kernel time per collective")
    cmd.set_defaults(func=cmd_diagnose)


def _cpus() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return jobs


def _size(text: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if size < 1:
        raise argparse.ArgumentTypeError("must be more than 0")
    return size


def _bounds(args: argparse.Namespace) -> tuple[int, int]:
    """Bytes read at most as a stream, and of a format read whole: ``--max-input`` sets both."""
    return args.max_input or MAX_READ, args.max_input or MAX_INPUT


def cmd_diagnose(args: argparse.Namespace) -> int:
    """``exemplar-tune diagnose``."""
    if args.ranks and args.compare:
        raise UserError("--ranks reads one job's files together; --compare takes two reports")
    if args.ranks:
        try:
            reports, errors = [diagnose_job(args.files, *_bounds(args), jobs=args.jobs)], []
        except DiagnoseError as exc:
            raise UserError(str(exc)) from None
    else:
        reports, errors = diagnose_paths(args.files, None, *_bounds(args))
    if not reports:
        raise UserError(errors[0] if len(errors) == 1 else
                        f"none of the {len(errors)} files could be read: {'; '.join(errors)}")
    for error in errors:
        print(escape(f"exemplar-tune: skipped {error}"), file=sys.stderr)
    try:
        comparison = compare_reports(reports) if args.compare else None
    except DiagnoseError as exc:
        raise UserError(str(exc)) from None
    docs = [r.to_dict() for r in reports]
    if args.format == "json":
        print(json.dumps({"reports": docs, "comparison": comparison, "skipped": errors},
                         indent=2))
    else:
        print(_diagnose_table(docs, comparison, errors))
    failing = any(d["status"] == "fail" for d in docs)
    return EXIT_FINDINGS if failing or errors else EXIT_OK


def _diagnose_table(docs: list[dict], comparison: dict | None, errors: list[str]) -> str:
    """The reports as text, one line per finding and evidence, then the comparison and the
    files skipped; every line escaped (a file name or a captured line shows what it holds)."""
    lines = []
    for doc in docs:
        lines.append(f"== {doc['source']} ({doc['kind']}): {doc['status'].upper()}")
        for f in doc["findings"]:
            lines.append(f"  {f['status']:<4}  {f['check_id']}: {f['message']}")
            lines += [f"        evidence {e}" for e in f["evidence"]]
    lines += [f"== warning: {w}" for w in (comparison or {}).get("warnings", [])]
    for coll in (comparison or {}).get("collectives", []):
        lines.append(f"== {coll['text']}" if "text" in coll else f"== {coll['collective']}: "
                     f"busbw ratio (geometric mean) {coll['geomean_ratio']}")
    return join_lines(lines + [f"== skipped: {e}" for e in errors])
