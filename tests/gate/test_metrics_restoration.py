"""The restoration histograms and the over-budget counter on the gate's /metrics (docs/alerting.md).

The admission core is driven with scripted times and read back through a real Prometheus scrape;
the alert rules and the Grafana dashboard in docs/ are checked against the gate's exposition.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from restorelens.gate import GateSettings
from restorelens.gate.admission import Admission
from restorelens.gate.grants import Grant
from restorelens.gate.app import create_gate_app
from restorelens.gate.metrics import new_registry
from restorelens.gate.policies.floors import LendPolicy
from restorelens.gate.restoration import RESTORATION_BUCKETS_S, SecondsHistogram

DOCS = Path(__file__).resolve().parents[2] / "docs"
RULES = DOCS / "prometheus" / "restoration-rules.yml"
DASHBOARD = DOCS / "grafana" / "restoration.json"

T0 = 1024.0  # a power of two: every offset below is exact in binary, so no sample sits off a bucket by 1e-13
FLOORS = {"interactive": 3, "batch": 1}
GRANT = "restorelens_gate_restoration_grant_restored_seconds"
DRAIN = "restorelens_gate_restoration_borrowed_drained_seconds"
FIRST_BYTE = "restorelens_gate_restoration_first_byte_seconds"
OVER = "restorelens_gate_restoration_over_budget_total"
BUDGET = "restorelens_gate_restoration_budget_seconds"
NEW_METRICS = (GRANT, DRAIN, FIRST_BYTE, OVER)


class Script:
    """One Admission driven by request name at T0 + t; the shell's first-byte report included."""

    def __init__(self, core: Admission) -> None:
        self.core = core
        self.grants: dict[str, Grant] = {}

    def arrive(self, name: str, traffic_class: str, t: float) -> str:
        decision = self.core.request(name, traffic_class, T0 + t)
        assert isinstance(decision, Grant), decision
        self.grants[name] = decision
        return decision.slot

    def finish(self, t: float, *names: str) -> None:
        for name in names:
            self.core.release(self.grants.pop(name), T0 + t)

    def first_byte(self, name: str, t: float) -> None:
        self.core.tracker.first_byte(name, T0 + t)

    def lend(self, t: float, tag: str) -> None:
        """Batch fills its own slot and both lendable ones while interactive is idle."""
        assert [self.arrive(f"{tag}-own", "batch", t), self.arrive(f"{tag}-lent1", "batch", t),
                self.arrive(f"{tag}-lent2", "batch", t)] == ["own", "borrowed", "borrowed"]


def lend_core(budget_s: float | None, *, control_period_s: float = 0.0, max_retained: int = 100) -> Admission:
    policy = LendPolicy(FLOORS, lendable_slots=2, control_period_s=control_period_s)
    policy.restore_budget_s = budget_s  # as lend-budget and lend-preempt set it
    return Admission(policy, max_retained=max_retained)


def samples(exposition: str) -> dict[tuple[str, str | None], float]:
    """(sample name, its le label or None) -> value, from Prometheus text."""
    return {
        (sample.name, sample.labels.get("le")): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def scrape(registry: CollectorRegistry) -> dict[tuple[str, str | None], float]:
    return samples(generate_latest(registry).decode())


def buckets(scraped: dict[tuple[str, str | None], float], name: str) -> dict[str, float]:
    return {le: value for (sample, le), value in scraped.items() if sample == name + "_bucket" and le is not None}


def test_each_event_lands_in_its_bucket_and_late_first_bytes_count_over_budget() -> None:
    core = lend_core(1.0)
    registry = new_registry(core)
    run = Script(core)

    # 1: served at once on the never-lent slot, batch drains for 30 s: within budget (first byte 0.25 s).
    run.lend(0, "a")
    assert run.arrive("i1", "interactive", 10) == "own"
    run.first_byte("i1", 10.25)
    run.finish(12, "a-lent1")
    run.finish(40, "a-lent2")
    assert scrape(registry)[(OVER, None)] == 0

    # 2: the returning request's first byte 2.5 s after t0: over, counted then, before the drain.
    run.finish(41, "i1", "a-own")
    run.lend(50, "b")
    run.arrive("i2", "interactive", 60)
    run.first_byte("i2", 62.5)
    assert scrape(registry)[(OVER, None)] == 1
    run.finish(64, "b-lent1", "b-lent2")

    # 3: no first byte before the episode ends 5 s after t0: late whatever comes, counted at the end.
    run.finish(65, "i2", "b-own")
    run.lend(70, "c")
    run.arrive("i3", "interactive", 80)
    run.finish(80.5, "c-lent1")
    run.finish(85, "c-lent2")
    assert scrape(registry)[(OVER, None)] == 2
    run.first_byte("i3", 86)  # observed, but not counted twice

    # 4: ended within the budget (drained 0.5 s): the first byte decides, and it is late (1.5 s).
    run.finish(87, "i3", "c-own")
    run.lend(90, "d")
    run.arrive("i4", "interactive", 100)
    run.finish(100.5, "d-lent1", "d-lent2")
    assert scrape(registry)[(OVER, None)] == 2
    run.first_byte("i4", 101.5)

    scraped = scrape(registry)
    assert scraped[(OVER, None)] == 3
    assert scraped[(BUDGET, None)] == 1.0
    assert scraped[("restorelens_gate_restoration_episodes_total", None)] == 4
    # lend without a controller restores the floor at t0 itself.
    assert buckets(scraped, GRANT)["0.005"] == 4 and scraped[(GRANT + "_sum", None)] == 0
    drained = buckets(scraped, DRAIN)  # 30, 4, 5, 0.5 s
    assert (drained["0.25"], drained["0.5"], drained["2.5"], drained["5.0"], drained["10.0"], drained["30.0"]) == (0, 1, 1, 3, 3, 4)
    assert scraped[(DRAIN + "_sum", None)] == 39.5 and scraped[(DRAIN + "_count", None)] == 4
    first = buckets(scraped, FIRST_BYTE)  # 0.25, 2.5, 6, 1.5 s
    assert (first["0.1"], first["0.25"], first["1.0"], first["2.5"], first["5.0"], first["10.0"], first["+Inf"]) == (0, 1, 1, 3, 3, 4, 4)
    assert scraped[(FIRST_BYTE + "_sum", None)] == 10.25 and scraped[(FIRST_BYTE + "_count", None)] == 4


def test_a_controller_restores_the_grant_on_its_schedule() -> None:
    core = lend_core(1.0, control_period_s=0.25)
    registry = new_registry(core)
    run = Script(core)
    run.lend(0, "a")
    run.arrive("i1", "interactive", 10.0625)  # next tick 10.25, the revision takes effect at 10.5
    core.expire(T0 + 11)  # the core learns the floor is back at its next call
    scraped = scrape(registry)
    assert buckets(scraped, GRANT)["0.25"] == 0 and buckets(scraped, GRANT)["0.5"] == 1
    assert scraped[(GRANT + "_sum", None)] == 0.4375
    assert scraped[(DRAIN + "_count", None)] == 0  # nothing drained yet


def test_without_a_budget_nothing_is_over_and_the_counter_still_exists() -> None:
    core = lend_core(None)
    registry = new_registry(core)
    run = Script(core)
    run.lend(0, "a")
    run.arrive("i1", "interactive", 10)
    run.finish(600, "a-lent1", "a-lent2")
    run.first_byte("i1", 700)
    scraped = scrape(registry)
    assert scraped[(OVER, None)] == 0
    assert (BUDGET, None) not in scraped
    assert scraped[(FIRST_BYTE + "_count", None)] == 1 and buckets(scraped, FIRST_BYTE)["600.0"] == 0
    assert core.episodes[-1].over_budget is False


def test_the_budget_in_force_at_t0_judges_the_episode() -> None:
    core = lend_core(1.0)
    registry = new_registry(core)
    run = Script(core)
    run.lend(0, "a")
    run.arrive("i1", "interactive", 10)
    core.policy.restore_budget_s = 60.0
    run.first_byte("i1", 12.5)
    assert scrape(registry)[(OVER, None)] == 1 and scrape(registry)[(BUDGET, None)] == 60.0


def test_only_the_returning_requests_first_first_byte_counts() -> None:
    core = lend_core(1.0)
    registry = new_registry(core)
    run = Script(core)
    run.lend(0, "a")
    run.first_byte("a-lent1", 0.5)  # shells may report every request's first byte
    run.arrive("i1", "interactive", 10)
    run.first_byte("a-own", 10.125)
    run.first_byte("i1", 10.5)
    run.first_byte("i1", 20)  # a second report (another attempt's) is not another observation
    scraped = scrape(registry)
    assert scraped[(FIRST_BYTE + "_count", None)] == 1 and scraped[(FIRST_BYTE + "_sum", None)] == 0.5
    assert scraped[(OVER, None)] == 0


def test_first_bytes_that_never_come_are_forgotten_oldest_first() -> None:
    core = lend_core(1.0, max_retained=1)
    registry = new_registry(core)
    run = Script(core)
    run.lend(0, "a")
    run.arrive("i1", "interactive", 10)  # refused or left: no first byte ever
    run.finish(10.5, "a-lent1", "a-lent2", "a-own", "i1")  # ended within budget: waits for the first byte
    run.lend(20, "b")
    run.arrive("i2", "interactive", 30)
    run.first_byte("i1", 30)  # i1 was forgotten when i2's episode opened (max_retained=1)
    run.first_byte("i2", 30.25)
    scraped = scrape(registry)
    assert scraped[(FIRST_BYTE + "_count", None)] == 1 and scraped[(FIRST_BYTE + "_sum", None)] == 0.25
    assert scraped[(OVER, None)] == 0 and core.episodes[-1].over_budget is False


def test_a_request_id_that_returns_again_and_again_without_a_first_byte_is_bounded() -> None:
    core = lend_core(1.0, max_retained=3)
    run = Script(core)
    for cycle in range(50):  # one client reusing its request id, never answered
        t = 100.0 * cycle
        run.lend(t, f"b{cycle}")
        run.arrive("same", "interactive", t + 10)
        run.finish(t + 10.5, f"b{cycle}-lent1", f"b{cycle}-lent2", f"b{cycle}-own", "same")
    waiting = core.tracker._awaiting_first_byte
    assert list(waiting) == ["same"] and len(waiting["same"]) == 3
    assert [episode.episode_id for episode in waiting["same"]] == [48, 49, 50]  # the newest kept
    core.tracker.first_byte("same", T0 + 5000)  # the id's waiting episodes are all answered by it
    assert [episode.first_byte_seen_s for episode in core.episodes] == [T0 + 5000] * 3
    assert not core.tracker._awaiting_first_byte
    # and the count starts again from nothing: three more fit before any is forgotten
    for cycle in range(50, 53):
        run.lend(100.0 * cycle, f"b{cycle}")
        run.arrive(f"i{cycle}", "interactive", 100.0 * cycle + 10)
        run.finish(100.0 * cycle + 10.5, f"b{cycle}-lent1", f"b{cycle}-lent2", f"b{cycle}-own", f"i{cycle}")
    assert list(core.tracker._awaiting_first_byte) == ["i50", "i51", "i52"]


def test_histogram_buckets_are_upper_bounds_inclusive() -> None:
    histogram = SecondsHistogram()
    for seconds in (0.0, 0.005, 0.0051, 600.0, 601.0):
        histogram.observe(seconds)
    cumulative = dict(histogram.cumulative())
    assert cumulative[0.005] == 2 and cumulative[0.01] == 3 and cumulative[600.0] == 4 and cumulative[float("inf")] == 5
    assert len(cumulative) == len(RESTORATION_BUCKETS_S) + 1
    with pytest.raises(ValueError, match="increase strictly"):
        SecondsHistogram((1.0, 1.0))


@pytest.fixture
def gate_metrics(serve_asgi):
    """The text of a real gate app's /metrics after one scripted episode on its core (budget 2 s)."""
    app = create_gate_app(GateSettings(upstreams={"*": "http://127.0.0.1:9"}, tracing=False))
    core: Admission = app.state.admission
    core.policy.restore_budget_s = 2.0  # before t0: the budget is read when demand returns
    run = Script(core)
    run.lend(0, "a")
    run.arrive("i1", "interactive", 10)
    run.first_byte("i1", 15)
    gate = serve_asgi(app)
    return httpx.get(gate.url + "/metrics").text


def test_the_gate_app_exposes_the_restoration_metrics(gate_metrics: str) -> None:
    families = {family.name: family.type for family in text_string_to_metric_families(gate_metrics)}
    assert {families[name] for name in (GRANT, DRAIN, FIRST_BYTE)} == {"histogram"}
    assert families[OVER.removesuffix("_total")] == "counter" and families[BUDGET] == "gauge"
    scraped = samples(gate_metrics)
    assert scraped[(OVER, None)] == 1 and scraped[(BUDGET, None)] == 2.0
    assert buckets(scraped, FIRST_BYTE)["5.0"] == 1 and buckets(scraped, FIRST_BYTE)["2.5"] == 0
    assert scraped[(DRAIN + "_count", None)] == 0  # the batch requests are still running


# --- the alert rules and the dashboard -----------------------------------------------------------

_METRIC_NAME = re.compile(r"\brestorelens_[a-z0-9_]+")


def test_alert_rules_parse_and_name_only_metrics_the_gate_exposes(gate_metrics: str) -> None:
    rules = load_yaml_subset(RULES.read_text())
    exprs: list[str] = []
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["alert"] and rule["labels"]["severity"] in {"warning", "critical"}
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert re.fullmatch(r"\d+[smhdwy]", rule.get("for", "0s")), rule
            assert _balanced(rule["expr"]), rule["expr"]
            exprs.append(rule["expr"])
    assert any(OVER in expr for expr in exprs)
    _assert_exposed(RULES.read_text(), gate_metrics)  # annotations name metrics too


def test_dashboard_parses_and_names_only_metrics_the_gate_exposes(gate_metrics: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    queries += [variable["definition"] for variable in dashboard["templating"]["list"] if "definition" in variable]
    for query in queries:
        assert _balanced(query), query
    used = " ".join(queries)
    assert all(name in used for name in NEW_METRICS)
    _assert_exposed(DASHBOARD.read_text(), gate_metrics)  # descriptions name metrics too


def _assert_exposed(text: str, exposition: str) -> None:
    # Queries name samples (…_bucket, …_total); prose may name a histogram by its family, but a
    # counter's family name without _total is no series Prometheus has.
    families = list(text_string_to_metric_families(exposition))
    exposed = {f.name for f in families if f.type != "counter"} | {s.name for f in families for s in f.samples}
    named = set(_METRIC_NAME.findall(text))
    assert named and named <= exposed, sorted(named - exposed)


def _balanced(expr: str) -> bool:
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1, "{": 1, "}": -1, "[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def load_yaml_subset(text: str) -> Any:
    """The YAML the rules file uses: block mappings and sequences, plain and quoted scalars, and
    ``|`` / ``>-`` block scalars. Anything else (flow collections, anchors, tags, trailing
    comments) raises, so the file cannot silently mean something else to Prometheus than here."""
    raw = text.splitlines()
    lines = [(n, len(line) - len(line.lstrip(" ")), line.strip()) for n, line in enumerate(raw)
             if line.strip() and not line.lstrip().startswith("#")]
    value, end = _block(raw, lines, 0, lines[0][1])
    if end != len(lines):
        raise ValueError(f"line {lines[end][0] + 1}: unexpected indentation")
    return value


def _block(raw: list[str], lines: list[tuple[int, int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][2].startswith("- "):
        items = []
        while i < len(lines) and lines[i][1] == indent and lines[i][2].startswith("- "):
            n, _, content = lines[i]
            lines[i] = (n, indent + 2, content[2:])  # the item's first key sits where its siblings do
            item, i = _block(raw, lines, i, indent + 2)
            items.append(item)
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][1] == indent:
        n, _, content = lines[i]
        key, colon, rest = content.partition(":")
        if not colon or not re.fullmatch(r"[A-Za-z_][\w-]*", key) or key in mapping or (rest and rest[0] != " "):
            raise ValueError(f"line {n + 1}: not a 'key: value' line this subset reads: {content!r}")
        rest, i = rest.strip(), i + 1
        if rest in ("|", ">-"):
            body_indent, body = lines[i][1] if i < len(lines) else 0, []
            while i < len(lines) and lines[i][1] > indent:
                body.append(raw[lines[i][0]][body_indent:])  # blank lines within are dropped: none are used
                i += 1
            mapping[key] = "\n".join(body) + "\n" if rest == "|" else " ".join(line.strip() for line in body)
        elif rest:
            mapping[key] = _scalar(rest, n)
        elif i < len(lines) and lines[i][1] > indent:
            mapping[key], i = _block(raw, lines, i, lines[i][1])
        else:
            raise ValueError(f"line {n + 1}: {key!r} has no value")
    return mapping, i


def _scalar(text: str, n: int) -> Any:
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("''", "'")
    if text[0] in "[{&*!|>%@`" or " #" in text or ": " in text:
        raise ValueError(f"line {n + 1}: YAML this subset does not read: {text!r}")
    return text
