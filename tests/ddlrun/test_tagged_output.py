"""Open MPI's --tag-output undone (ddlrun/tagged.py): the bytes below are what Debian's Open MPI
4.1.4 wrote for two ranks printing ``abc\\ndef``, then ``ghi\\n`` 0.2 s later, and ``err`` on
stderr (``mpiexec --tag-output sh -c ...``); Open MPI 5 (PMIx) writes a space after the colon.
The real launches are in test_real_runs.py (test_openmpi_*)."""
from __future__ import annotations

import io

import pytest

from wmlce_tools.ddlrun.tagged import Untagger, tag_style, whole_lines

OPEN_MPI_4 = (b"[1,0]<stdout>:abc\n"
              b"[1,0]<stdout>:def[1,1]<stdout>:abc\n"
              b"[1,1]<stdout>:def[1,0]<stdout>:ghi\n"
              b"[1,1]<stdout>:ghi\n")


def test_each_ranks_line_put_back_together():
    assert list(whole_lines(io.BytesIO(OPEN_MPI_4), "orte")) == [b"abc\n", b"abc\n", b"defghi\n", b"defghi\n"]


def test_open_mpi_5_space_and_a_line_that_starts_with_one():
    text = OPEN_MPI_4.replace(b">:", b">: ").replace(b"<stdout>: abc\n", b"<stdout>:  abc\n", 1)
    assert list(whole_lines(io.BytesIO(text), "pmix")) == [b" abc\n", b"abc\n", b"defghi\n", b"defghi\n"]
    # Open MPI 4 writes no space: a rank's own leading space is kept
    assert Untagger("orte").feed(b"[1,3]<stderr>: x\n") == [b" x\n"]


def test_streams_kept_apart_launcher_lines_pass_and_the_rest_comes_at_the_end():
    u = Untagger("orte")
    assert u.feed(b"[1,0]<stdout>:out-part") == []
    assert u.feed(b"[1,0]<stderr>:err-part[1,1]<stdout>:one\n") == [b"one\n"]
    assert u.feed(b"mpiexec: a message of its own\n") == [b"mpiexec: a message of its own\n"]
    assert u.feed(b"[1,0]<stdout>:-end\n") == [b"out-part-end\n"]
    assert u.finish() == [b"err-part\n"]
    assert u.finish() == []


@pytest.mark.parametrize("version, style", [
    ("mpiexec.openmpi (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", "orte"),
    ("mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n", "pmix"),
])
def test_tag_style_from_the_version(version, style):
    assert tag_style(version) == style


def test_mpiexec_message_right_after_a_cut_chunk():
    """Rank 2 failed while rank 0 printed on: Open MPI's message (untagged, its 74-dash rule
    first) came on the line of rank 0's cut chunk; rank 0's line ends when the rest of it comes."""
    rule = b"-" * 74 + b"\n"
    u = Untagger("orte")
    assert u.feed(b"[1,0]<stderr>:line-0-1661-xx" + rule) == [rule]
    assert u.feed(b"Primary job  terminated normally, but 1 process returned\n") == [
        b"Primary job  terminated normally, but 1 process returned\n"]
    assert u.feed(b"[1,0]<stderr>:xx\n") == [b"line-0-1661-xxxx\n"]
    assert u.feed(b"[1,1]<stderr>:" + rule) == [rule]          # a rank's own rule stays its line
