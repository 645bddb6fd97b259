"""benchmarks/bench_sim.py: each live run says what it runs and writes a span per answer, the
engine-setting run is compared with what the engine model gives the same loop, the anchor answers
the asked size, and span names come only from ``restorelens.spans``."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from restorelens import spans
from restorelens.sim import EngineCore, FinishedEvent, SimRequest, get_preset

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_sim.py"
CONTRACT = {*spans.span_names().values(), *spans.attribute_keys().values(), *spans.event_names().values()}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # `benchmarks` is a folder run with `python -m benchmarks` from the checkout, not an installed package
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.bench_sim")


def test_no_span_contract_name_is_written_as_a_literal() -> None:
    found = set()
    for node in ast.walk(ast.parse(BENCH.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # a whole string, '...' inside code text, and a span name spelt into OTLP JSON ("name":"...")
            found |= {node.value, *re.findall(r"'([^']*)'", node.value), *re.findall(r'"name":"([^"]*)"', node.value)}
    assert sorted(found & CONTRACT) == []


def test_the_modelled_loop_of_one_client_sends_each_request_when_the_last_finishes(bench: ModuleType) -> None:
    config = get_preset("tiny-cpu")
    prompt_tokens = config.estimate_prompt_tokens(len(bench.REALISTIC_PROMPT))
    core = EngineCore(config, seed=0)
    core.add_request(SimRequest("one", prompt_tokens, bench.REALISTIC_MAX_TOKENS), 0.0)
    e2e_s = None
    while e2e_s is None and (now_s := core.next_event_s()) is not None:
        e2e_s = next((event.at_s for event in core.advance_to(now_s) if isinstance(event, FinishedEvent)), None)
    assert e2e_s is not None
    # back to back from 0: request k ends at k * e2e; the window is (WARMUP_S, WARMUP_S + REALISTIC_S]
    end_s = bench.WARMUP_S + bench.REALISTIC_S
    expected = sum(bench.WARMUP_S < k * e2e_s <= end_s for k in range(1, int(end_s / e2e_s) + 2))
    rate = bench.modelled_closed_loop("tiny-cpu", 1, prompt_tokens, bench.REALISTIC_MAX_TOKENS)
    assert rate == pytest.approx(expected / bench.REALISTIC_S)


def test_a_full_batch_answers_more_than_one_client(bench: ModuleType) -> None:
    config = get_preset("tiny-cpu")
    one = bench.modelled_closed_loop("tiny-cpu", 1, 100, bench.REALISTIC_MAX_TOKENS)
    full = bench.modelled_closed_loop("tiny-cpu", config.max_num_seqs, 100, bench.REALISTIC_MAX_TOKENS)
    assert full > 2 * one


def test_the_anchor_answers_as_many_tokens_as_asked(bench: ModuleType) -> None:
    process, url = bench._start([sys.executable, "-c", bench._ANCHOR_APP])
    try:
        answer = httpx.post(url + "/v1/completions", content=bench.completion_body(7), timeout=10).json()
    finally:
        bench._stop(process)
    assert answer["usage"]["completion_tokens"] == 7
    assert len(answer["choices"][0]["text"].split()) == 7


def test_the_shell_cost_run_says_so_and_writes_a_span_per_request(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # enough requests for the simulator's CPU to span several /proc ticks (10 ms); the anchor's own
    # run is left out, its figures are not what this checks
    monkeypatch.setattr(bench, "LIVE_REQUESTS", 400)
    monkeypatch.setattr(bench, "WARMUP_REQUESTS", 20)
    monkeypatch.setattr(bench, "_anchor", lambda max_tokens: bench.Live(100, 1.0, 0.01, "test"))
    bench.live_shell_cost()
    out = capsys.readouterr().out
    assert f"--time-scale {bench.SHELL_TIME_SCALE}" in out and f"max_tokens {bench.SHELL_MAX_TOKENS}" in out
    assert re.search(rf"{spans.SPAN_LLM_REQUEST} spans written +420 \(of 420 requests\)", out)


def test_the_engine_setting_run_prints_rates_cpu_and_a_span_per_answer(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "RAMP_S", 0.2)
    monkeypatch.setattr(bench, "WARMUP_S", 0.5)
    monkeypatch.setattr(bench, "REALISTIC_S", 1.5)
    anchor = bench.Live(requests=100, seconds=1.0, server_cpu_s=0.01, stack="test")
    bench.live_engine_setting("tiny-cpu", anchor)
    out = capsys.readouterr().out
    assert "--time-scale 1 " in out and f"max_tokens {bench.REALISTIC_MAX_TOKENS}" in out
    assert re.search(r"req/s +\d+ tokens/s +\d+\.\d\d of the engine model's", out)
    assert re.search(r"us/req +\d+\.\d\d us/token", out)
    written = re.search(rf"{spans.SPAN_LLM_REQUEST} spans written (\d+) \(of (\d+) requests answered\)", out)
    assert written is not None and int(written[1]) == int(written[2]) > 0
