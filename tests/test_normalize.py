"""Input normalisation: prefixes and terminal noise removed line by line, sources kept."""

from __future__ import annotations

import pytest

from exemplar_tune.diagnose.normalize import clean_line, normalize
from tests.corpus import REALWORLD

ROW = "           8             2     float     sum      -1    164.3    0.00    0.00      0"


@pytest.mark.parametrize(("prefixed", "source", "kind"), [
    (f"0: {ROW}", "rank 0", "srun --label"),
    (f" 12: {ROW}", "rank 12", "srun --label"),
    (f"[1,7]<stdout>:{ROW}", "rank 7", "OpenMPI tag"),
    (f"[1,3]<stderr>: {ROW}", "rank 3", "OpenMPI tag"),
    (f"[default3]:{ROW}", "local rank 3", "torchrun"),
    (f"[rank5]: {ROW}", "local rank 5", "torchrun"),
    (f"gpu-node017: {ROW}", "gpu-node017", "host label"),
    (f"(RayTrainWorker pid=8121, ip=10.0.4.2) {ROW}", "10.0.4.2", "ray"),
    (f"(head, rank=1, pid=2231, ip=10.1.0.9) {ROW}", "10.1.0.9 rank 1", "ray"),
    (f"2026-04-28T14:14:42.123Z {ROW}", None, "timestamp"),
    (f"2026-04-28T14:14:42.123456789Z stdout F {ROW}", None, "timestamp"),
    (f"[2026-04-28 14:14:42] {ROW}", None, "timestamp"),
    (f"[2026-04-28 14:14:42,120] {ROW}", None, "timestamp"),
    (f"Apr 28 14:14:42 gpu01 kernel: [ 1234.567890] {ROW}", "gpu01", "syslog"),
    (f"> > {ROW}", None, "quote"),
    (f"\x1b[32m{ROW}\x1b[0m", None, None),
    (f"{ROW}\r", None, None),
    (f" 10%|#         | 1/10\r 20%|##        | 2/10\r{ROW}", None, None),
    (f"2026-04-28T14:14:42Z [1,2]<stdout>:0: {ROW}", "rank 2", "OpenMPI tag"),  # stacked
])
def test_every_prefix_and_noise_is_removed_and_the_source_kept(prefixed, source, kind):
    clean = normalize("\n".join([prefixed] * 4))
    assert [line.lstrip() for line in clean.split("\n")] == [ROW.lstrip()] * 4
    assert clean.sources == (source,) * 4
    if kind:
        assert clean.stripped[kind] == 4
    line, seen = clean_line(prefixed)  # one line alone: no shared indentation to remove
    assert (line.lstrip(), seen) == (clean.split("\n")[0].lstrip(), source)


def test_indentation_every_written_line_shares_is_removed_and_no_more():
    """A table pasted into a Markdown list: four spaces on every written line go, the rows'
    own alignment stays; a text whose lines do not all share it is left as it is."""
    pasted = "    # size count\n\n    " + ROW + "\n   \n      " + ROW.strip() + "\n"
    clean = normalize(pasted)
    assert clean.split("\n") == ["# size count", "", ROW, "", "  " + ROW.strip(), ""]
    assert clean.noise == {"indentation": 3}
    assert normalize("    # size\n8 2 float\n") == "    # size\n8 2 float\n"
    assert normalize("\t# a\n    # b\n") == "\t# a\n    # b\n"  # tab and spaces differ


def test_ambiguous_prefixes_only_when_most_lines_have_them():
    """``12: `` and ``word1: `` can be content: removed only when most lines carry them."""
    text = "# step times\n1: 105.2\nepoch 3 done\nloss: 1.2\nnode7: up\nsummary\n"
    assert normalize(text) == text
    labelled = normalize("0: a\n1: b\n0: c\nplain\n")
    assert labelled == "a\nb\nc\nplain\n"
    assert {source for source in labelled.sources if source} == {"rank 0", "rank 1"}


def test_line_numbers_stay_those_of_the_file():
    text = "a\r\nb\rc\n\x1b[1mdd\x1b[0m\n"
    clean = normalize(text)
    assert clean.split("\n") == ["a", "c", "dd", ""]
    assert clean.noise == {"crlf": 1, "carriage return": 1, "ansi": 1}


def test_a_real_srun_label_capture_reads_as_the_program_wrote_it():
    path = (REALWORLD / "nccl-tests" /
            "aws-samples-awsome-distributed-training-readme-p4de-srun-label-allreduce.txt")
    raw = path.read_text()
    clean = normalize(raw)
    assert clean.stripped == {"srun --label": len([x for x in raw.splitlines() if x.strip()])}
    assert all(not line.startswith("0: ") for line in clean.splitlines())
    assert clean.described()["source_names"] == ["rank 0"]


def test_plain_text_is_left_alone():
    text = "#  size count type redop root time algbw busbw #wrong\n" + ROW + "\n"
    clean = normalize(text)
    assert clean == text and clean.described() == {}
    assert normalize(clean) is clean
