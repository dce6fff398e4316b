"""``--snapshot``: the allocator snapshot as memory_viz reads it, written safely. The snapshot is
a CUDA allocator's; here a small dict of the same shape stands in for it, on the CPU."""

import base64
import json
import pickle
import pickletools
import re

import pytest

from leaklab.attribution import snapshot_html, write_snapshot
from leaklab.files import UnwritablePath

FAKE_SNAPSHOT = {
    "segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "segment_type": "large",
                  "blocks": [{"address": 4096, "size": 1048576, "requested_size": 1000000, "state": "active_allocated",
                              "frames": [{"filename": "train.py", "line": 12, "name": "step"}]}]}],
    "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1048576, "stream": 0,
                        "frames": [{"filename": "train.py", "line": 12, "name": "step"}]}]],
}


def protocol(data: bytes) -> int:
    return next(arg for op, arg, _ in pickletools.genops(data) if op.name == "PROTO")


def test_pickle_is_protocol_4_and_round_trips(tmp_path):
    path = tmp_path / "mem.pickle"
    assert write_snapshot(FAKE_SNAPSHOT, path) == [path]
    data = path.read_bytes()
    assert protocol(data) == 4
    assert pickle.loads(data) == FAKE_SNAPSHOT
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, nothing left over


def test_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "mem.pickle"
    path.write_bytes(b"last week's snapshot")
    with pytest.raises(UnwritablePath, match="exists already.*pass --overwrite"):
        write_snapshot(FAKE_SNAPSHOT, path)
    assert path.read_bytes() == b"last week's snapshot"
    fresh = tmp_path / "fresh.pickle"
    (tmp_path / "fresh.html").write_text("old page")
    with pytest.raises(UnwritablePath, match="fresh.html exists already"):
        write_snapshot(FAKE_SNAPSHOT, fresh, html=True)
    assert not fresh.exists()  # both files are checked before either is written
    write_snapshot(FAKE_SNAPSHOT, path, overwrite=True)
    assert pickle.loads(path.read_bytes()) == FAKE_SNAPSHOT


def test_html_viewer_beside_the_pickle_embeds_a_protocol_4_snapshot(tmp_path):
    path = tmp_path / "mem.pickle"
    assert write_snapshot(FAKE_SNAPSHOT, path, html=True) == [path, tmp_path / "mem.html"]
    page = (tmp_path / "mem.html").read_text()
    assert "add_local_files" in page  # torch.cuda._memory_viz's viewer page
    files = json.loads(re.search(r"const local_files = (\[.*\])", page).group(1))
    embedded = base64.b64decode(files[0]["base64"])
    assert protocol(embedded) == 4
    assert pickle.loads(embedded) == FAKE_SNAPSHOT  # the zero padding after STOP is ignored


def test_html_embeds_protocol_4_even_where_pythons_default_is_5(monkeypatch):
    monkeypatch.setattr(pickle, "DEFAULT_PROTOCOL", 5)
    import torch.cuda._memory_viz as memory_viz

    real_dumps = pickle.dumps
    monkeypatch.setattr(memory_viz.pickle, "dumps", lambda obj, protocol=5: real_dumps(obj, protocol=protocol))
    page = snapshot_html(FAKE_SNAPSHOT)
    embedded = base64.b64decode(json.loads(re.search(r"const local_files = (\[.*\])", page).group(1))[0]["base64"])
    assert protocol(embedded) == 4
