"""Uploads are untrusted: bounded before and after decompression, read by content, never named
after the user's file, cleaned up (the process folder holding their stores: test_source.py)."""

from __future__ import annotations

import gzip
import io
import struct
import tracemalloc
from pathlib import Path

import pytest
import streamlit as st
import zstandard
from dashboard_stores import moflux_files
from rendered import seen
from streamlit.testing.v1 import AppTest

from restorelens.analysis import Analysis
from restorelens.collector import NOT_A_TRACE_FILE
from restorelens.dashboard import cli as dashboard_cli
from restorelens.dashboard import environment, queries, source, uploads
from restorelens.errors import InputError

APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"
MIB = 1024 * 1024
UPLOAD = "upload an OTLP file"


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture(scope="module")
def spans_jsonl(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return moflux_files(tmp_path_factory.mktemp("upload-spans"))[0].read_bytes()


def bomb(line_bytes: int) -> bytes:
    """A small gzip holding one JSON line of ``line_bytes`` (the issue's 1 MiB gzip of a 1 GiB line, scaled)."""
    return gzip.compress(b'{"resourceSpans": "' + b"a" * line_bytes + b'"}\n', compresslevel=9)


def test_a_small_gzip_inflating_past_the_limit_is_refused_naming_the_file_and_the_limit(folder: Path) -> None:
    payload = bomb(64 * MIB)
    assert len(payload) < MIB
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as caught:
            uploads.load_upload(io.BytesIO(payload), "innocent.jsonl", max_bytes=4 * MIB, folder=folder)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert message.startswith("innocent.jsonl: ") and "4 MiB limit" in message and "--max-upload-bytes" in message
    assert "once decompressed" in message and str(folder) not in message
    # decompressed a chunk at a time: memory stays far below the 64 MiB the line holds
    assert peak_bytes < 16 * MIB
    assert list(folder.iterdir()) == []  # nothing left of the failed load


def test_an_upload_larger_than_the_limit_as_sent_is_refused(folder: Path) -> None:
    with pytest.raises(InputError, match=r"^big\.jsonl: the upload is larger than the 1000-byte limit"):
        uploads.load_upload(io.BytesIO(b" " * 1001), "big.jsonl", max_bytes=1000, folder=folder)


@pytest.mark.parametrize(("name", "compress"), [
    ("spans.jsonl", lambda data: zstandard.ZstdCompressor().compress(data)),  # zstd, named as plain
    ("spans.jsonl", gzip.compress),
    ("spans.jsonl.gz", lambda data: data),  # plain, named as gzip
])
def test_compression_is_told_by_content_not_by_name(folder: Path, spans_jsonl: bytes, name: str, compress) -> None:
    path = uploads.load_upload(io.BytesIO(compress(spans_jsonl)), name, max_bytes=64 * MIB, folder=folder)
    with Analysis.open(path) as analysis:
        assert analysis.requests().height > 0


@pytest.mark.parametrize(("payload", "problem"), [
    (gzip.compress(gzip.compress(b"{}\n")), "holds a compressed stream inside its compression"),
    (b"PAR1" + b"\x00" * 16, "is Parquet, which the upload does not take"),  # pyarrow would inflate it
    (b"\x1f\x8b\x08garbage", "cannot decompress it"),
    (b"", "holds no data"),
])
def test_what_the_upload_does_not_take_is_one_line_naming_the_file(folder: Path, payload: bytes, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        uploads.load_upload(io.BytesIO(payload), "run.jsonl", max_bytes=MIB, folder=folder)
    assert str(caught.value).startswith("run.jsonl: ") and problem in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    assert list(folder.iterdir()) == []


def _framed_zstd(inflated_bytes: int) -> bytes:
    frame = zstandard.ZstdCompressor().compress(b"\x0a" * inflated_bytes)
    return struct.pack(">I", len(frame)) + frame


def test_a_length_prefixed_upload_whose_zstd_message_inflates_past_the_limit_is_refused_by_the_limit(
    folder: Path, spans_jsonl: bytes
) -> None:
    # the issue's 151-MB upload inflated three 1-GiB zstd messages; scaled, and after a good message
    good = zstandard.ZstdCompressor().compress(spans_jsonl.splitlines()[0])
    payload = struct.pack(">I", len(good)) + good + _framed_zstd(64 * MIB) * 3
    assert len(payload) < MIB
    with pytest.raises(InputError) as caught:
        uploads.load_upload(io.BytesIO(payload), "innocent.pb", max_bytes=4 * MIB, folder=folder)
    # the limit's own line: the loader stopped at the bound, before inflating the message
    assert str(caught.value) == ("innocent.pb: holds more than the 4 MiB limit (restorelens dashboard "
                                 "--max-upload-bytes) once decompressed")
    assert list(folder.iterdir()) == []


def test_the_issues_blank_led_upload_is_read_as_json_lines_by_check_and_loader_alike(
    folder: Path, spans_jsonl: bytes
) -> None:
    # the upload check saw JSON after the tabs; the loader read a 151-MB message from the tabs'
    # length prefix, then the zstd messages after it. Now both read JSON lines: the spans load, the
    # binary tail is one malformed line, and no message is inflated (or the limit would refuse it).
    payload = b"\t" * 100 + b"\n" + spans_jsonl + _framed_zstd(64 * MIB)
    path = uploads.load_upload(io.BytesIO(payload), "innocent.jsonl", max_bytes=4 * MIB, folder=folder)
    with Analysis.open(path) as analysis:
        assert analysis.requests().height > 0


def test_length_prefixed_otlp_protobuf_uploads_load(folder: Path, spans_jsonl: bytes) -> None:
    compressor = zstandard.ZstdCompressor()
    frames = [compressor.compress(line) for line in spans_jsonl.splitlines()]
    payload = b"".join(struct.pack(">I", len(frame)) + frame for frame in frames)
    path = uploads.load_upload(io.BytesIO(gzip.compress(payload)), "spans.pb.gz", max_bytes=64 * MIB, folder=folder)
    with Analysis.open(path) as analysis:
        assert analysis.requests().height > 0


def test_a_load_error_names_the_users_file_not_the_temporary_copy(folder: Path) -> None:
    with pytest.raises(InputError) as caught:
        uploads.load_upload(io.BytesIO(b"{\"resourceSpans\": [}\n"), "mine.jsonl", max_bytes=MIB, folder=folder)
    assert "no OTLP spans could be read: mine.jsonl:1:" in str(caught.value)
    assert "upload.jsonl" not in str(caught.value) and str(folder) not in str(caught.value)


def test_a_loaded_upload_keeps_only_its_store(folder: Path, spans_jsonl: bytes) -> None:
    path = Path(uploads.load_upload(io.BytesIO(spans_jsonl), "run.jsonl", max_bytes=64 * MIB, folder=folder))
    assert path.parent.parent == folder
    assert {p.name for p in path.parent.iterdir()} <= {"spans.duckdb", "spans.duckdb.wal"}


@pytest.mark.parametrize("name", ["é" * 200 + ".jsonl", "../../etc/run.jsonl", "a\nb\x00.jsonl", ""])
def test_any_name_loads_and_is_shown_short_and_on_one_line(folder: Path, spans_jsonl: bytes, name: str) -> None:
    path = Path(uploads.load_upload(io.BytesIO(spans_jsonl), name, max_bytes=64 * MIB, folder=folder))
    assert path.parent.parent == folder  # the name never leaves the folder, nor makes a path
    shown = uploads.shown_name(name)
    assert 0 < len(shown) <= uploads.MAX_SHOWN_NAME_CHARS and shown.isprintable() and "/" not in shown
    with pytest.raises(InputError) as caught:
        uploads.load_upload(io.BytesIO(b"not json"), name, max_bytes=MIB, folder=folder)
    assert str(caught.value).startswith(f"{shown}: ")


def test_the_upload_store_is_cached_by_content_name_and_limit(folder: Path, spans_jsonl: bytes,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "work_folder", lambda: folder)
    first = queries.uploaded_store("digest", "run.jsonl", 64 * MIB, io.BytesIO(spans_jsonl))
    assert queries.uploaded_store("digest", "run.jsonl", 64 * MIB, io.BytesIO(b"")) == first
    assert Path(first).parent.parent == folder


# --- the limit as a setting -------------------------------------------------------------------


def test_the_limit_comes_from_the_cli_and_bounds_streamlits_upload_too(monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment.DEFAULT_MAX_UPLOAD_BYTES == 256 * MIB
    monkeypatch.delenv(environment.MAX_UPLOAD_ENV, raising=False)
    assert environment.configured_max_upload_bytes() == 256 * MIB
    argv = dashboard_cli.streamlit_command("127.0.0.1", 1)
    assert argv[argv.index("--server.maxUploadSize") + 1] == "256"  # Streamlit's own default is 200
    argv = dashboard_cli.streamlit_command("127.0.0.1", 1, MIB + 1)
    assert argv[argv.index("--server.maxUploadSize") + 1] == "2"  # whole MiB, rounded up; the app checks bytes
    monkeypatch.setenv(environment.MAX_UPLOAD_ENV, "lots")
    with pytest.raises(Exception, match=f"setting {environment.MAX_UPLOAD_ENV}: 'lots' is not a whole number"):
        environment.configured_max_upload_bytes()


# --- on the page ------------------------------------------------------------------------------


def upload_on_page(name: str, payload: bytes, **env: str) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    app.sidebar.radio[0].set_value(UPLOAD).run()
    app.sidebar.get("file_uploader")[0].set_value((name, payload, "application/octet-stream")).run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def test_a_refused_upload_is_one_red_line_on_the_page_and_the_db_store_is_not_shown(
        store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, str(store_path))
    monkeypatch.setenv(environment.MAX_UPLOAD_ENV, str(MIB))
    app = upload_on_page("innocent.jsonl", bomb(16 * MIB))
    assert [e.value for e in app.error] == [
        r"innocent\.jsonl\: holds more than the 1 MiB limit \(restorelens dashboard \-\-max\-upload\-bytes\) "
        "once decompressed"]
    assert not app.metric and not app.get("plotly_chart")  # not the --db store in its place
    assert "Showing: no store" in [c.value for c in app.sidebar.caption]
    app.run()  # a rerun neither loads it again nor loses the message
    assert len(app.error) == 1 and not app.metric


def test_an_accepted_upload_says_it_is_the_store_shown(spans_jsonl: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    app = upload_on_page("run.jsonl.gz", gzip.compress(spans_jsonl))
    assert not app.error
    assert r"Showing: the uploaded run\.jsonl\.gz" in [c.value for c in app.sidebar.caption]
    assert {m.label for m in app.metric} >= {"lending episodes", "wake episodes"}


def test_a_failed_upload_shows_its_error_not_the_db_store(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, str(store_path))
    app = upload_on_page("junk.jsonl", b'{"hello": "world"}\n')
    assert [seen(e.value) for e in app.error] == ["no OTLP spans could be read: no spans in it"]
    assert not app.metric


def test_a_file_name_of_300_bytes_loads(spans_jsonl: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    name = "r" * 300 + ".jsonl"
    app = upload_on_page(name, spans_jsonl)
    assert not app.error and app.metric
    assert f"Showing: the uploaded {uploads.shown_name(name)}" in [seen(c.value) for c in app.sidebar.caption]


def test_a_file_name_holding_markdown_shows_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    name = "![x](https:evil.png) [click](mailto:me) <img src=x> $x$ evil.example.jsonl"
    app = upload_on_page(name, b"junk\n")
    assert [seen(e.value) for e in app.error] == [f"{name}: {NOT_A_TRACE_FILE}"]
