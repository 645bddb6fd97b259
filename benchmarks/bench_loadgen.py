"""Virtual-time runner: the full 105-s MoFlux protocol for one arm, in CPU seconds.

Target (issue 6): under one second of CPU per arm-run, and the span output -- not the event loop --
is the bottleneck. Measured side by side in one process, per profile:

- loop only: the same run with OpenTelemetry's no-op tracer provider (spans cost nothing);
- null exporter: real SDK spans, exported synchronously to an exporter that drops them;
- file exporter: real SDK spans, encoded as OTLP/JSON lines and written to a file.

CPU is ``time.process_time()`` with synchronous span processors, so every span's cost is inside
the measurement (a batch processor would move it to a thread after the clock stopped).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.trace import NoOpTracerProvider

from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_virtual

REPEATS = 5
SEEDS = (0, 1, 2)
TARGET_CPU_S = 1.0


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _measure(scenario_name: str, mode: str, tmp: Path) -> tuple[float, int]:
    scenario = get_scenario(scenario_name, "lend")
    samples: list[float] = []
    spans = 0
    for repeat in range(REPEATS):
        for seed in SEEDS:
            if mode == "loop only":
                providers = ServiceProviders(NoOpTracerProvider(), NoOpTracerProvider(), NoOpTracerProvider())
                samples.append(_cpu(lambda: run_virtual(scenario, seed, providers, "bench")))
                continue
            path = tmp / f"{scenario_name}-{seed}-{repeat}.jsonl"
            telemetry = RunTelemetry("file", path=path, batch=False) if mode == "file exporter" else RunTelemetry("none", batch=False)

            def go() -> None:
                run_virtual(scenario, seed, telemetry.providers, "bench")
                telemetry.shutdown()

            samples.append(_cpu(go))
            if mode == "file exporter" and repeat == 0:
                spans += sum(line.count('"spanId"') for line in path.read_text().splitlines())
    return statistics.median(samples), spans


def main() -> None:
    print(f"virtual-time MoFlux protocol (105 s, arm=lend), median CPU over {REPEATS} x {len(SEEDS)} seeds")
    print(f"{'profile':22} {'mode':15} {'CPU s':>8} {'x loop':>8}  target < {TARGET_CPU_S:.1f} s")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for name in ("moflux-balanced", "moflux-long-context"):
            loop_s, _ = _measure(name, "loop only", tmp)
            for mode in ("loop only", "null exporter", "file exporter"):
                cpu_s, spans = (loop_s, 0) if mode == "loop only" else _measure(name, mode, tmp)
                extra = f"  ({spans // len(SEEDS)} spans/run)" if spans else ""
                verdict = "ok" if cpu_s < TARGET_CPU_S else "OVER"
                print(f"{name:22} {mode:15} {cpu_s:8.3f} {cpu_s / loop_s:8.2f}  {verdict}{extra}", flush=True)


if __name__ == "__main__":
    main()
