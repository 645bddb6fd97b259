"""The span contract: every span name, attribute key and event name restorelens emits or reads.

`docs/spans.md` documents each constant (who emits it, kind, type, unit, meaning) and
`tests/restorelens/test_spans.py` fails when this module and that page disagree. Code never
spells a span name or attribute key as a literal; it imports it from here.

Naming: ``SPAN_*`` are span names, ``ATTR_*`` attribute keys, ``EVENT_*`` event names. OpenTelemetry
semantic-convention constants are used where a convention exists; vLLM's own ``gen_ai.latency.*``
names are custom (no convention covers queue time) and are spelled exactly as vLLM spells them.
"""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import http_attributes as _http
from opentelemetry.semconv.attributes import network_attributes as _network
from opentelemetry.semconv.attributes import server_attributes as _server
from opentelemetry.semconv.attributes import url_attributes as _url

# --- span names -------------------------------------------------------------------------------

SPAN_CLIENT_REQUEST = "client.request"
#: One HTTP attempt; opentelemetry-instrumentation-httpx names CLIENT spans by method only.
SPAN_HTTP_POST = "POST"
SPAN_GATE_REQUEST = "gate.request"
SPAN_GATE_LEND = "gate.lend"
SPAN_GATE_RESTORE = "gate.restore"
SPAN_MODELCLAIM_STATE = "modelclaim.state"
SPAN_MODELCLAIM_WAKE = "modelclaim.wake"
#: vLLM's per-request span (vllm/v1/engine/output_processor.py); the simulator emits the same.
SPAN_LLM_REQUEST = "llm_request"
#: vLLM decorates its sleep endpoints with these span names; the simulator does too.
SPAN_ENGINE_SLEEP = "POST /sleep"
SPAN_ENGINE_WAKE_UP = "POST /wake_up"
SPAN_ENGINE_IS_SLEEPING = "GET /is_sleeping"
#: vLLM's startup spans, in its startup's trace (the wake's, through the TRACEPARENT the lifecycle
#: starts it with); the simulator emits the same. The analysis finds startup spans by trace and
#: service, never by these names (wake_phases.sql): any engine's startup spans are phases.
SPAN_VLLM_OVERALL_LOADING = "Overall Loading"
SPAN_VLLM_ASYNC_MP_CLIENT_INIT = "AsyncMPClient init"
SPAN_VLLM_ENGINE_CORE_PROC_INIT = "EngineCoreProc init"
SPAN_VLLM_EXECUTOR_INIT = "Executor init"
SPAN_VLLM_WORKER_INIT = "Worker init"
SPAN_VLLM_LOADING_CPU = "Loading (CPU)"
SPAN_VLLM_LOADING_GPU = "Loading (GPU)"
SPAN_VLLM_LOAD_MODEL = "Load model"
SPAN_VLLM_INITIALIZE_MODEL = "Initialize model"
SPAN_VLLM_LOAD_WEIGHTS = "Load weights"
SPAN_VLLM_PREPARE_MODEL = "Prepare model"
SPAN_VLLM_WARMUP_CPU = "Warmup (CPU)"
SPAN_VLLM_WARMUP_GPU = "Warmup (GPU)"
SPAN_VLLM_ALLOCATE_KV_CACHE = "Allocate KV cache"

# --- attributes: restorelens's own ------------------------------------------------------------

ATTR_TRAFFIC_CLASS = "restore.traffic_class"
ATTR_REQUEST_ID = "restore.request_id"
ATTR_RETRY_POLICY = "restore.retry_policy"
ATTR_ATTEMPTS = "restore.attempts"
ATTR_OUTCOME = "restore.outcome"
ATTR_RETRY_AFTER_S = "restore.retry_after_s"
ATTR_RETRY_AFTER_INVALID = "restore.retry_after_invalid"
ATTR_SCENARIO = "restore.scenario"
ATTR_WORKLOAD = "restore.workload"
ATTR_SEED = "restore.seed"
ATTR_ARRIVAL_PHASE = "restore.arrival_phase"
ATTR_ARRIVAL_PHASE_START_S = "restore.arrival_phase_start_s"
ATTR_ARRIVAL_PHASE_WINDOW_S = "restore.arrival_phase_window_s"
ATTR_RUN_ID = "restore.run_id"
ATTR_POLICY = "restore.policy"

ATTR_GATE_POLICY = "gate.policy"
ATTR_GATE_DECISION = "gate.decision"
ATTR_GATE_SLOT = "gate.slot"
ATTR_GATE_WAIT_S = "gate.wait_s"
ATTR_GATE_RETRY_AFTER_MS = "gate.retry_after_ms"
ATTR_GATE_UPSTREAM = "gate.upstream"
ATTR_GATE_LENDABLE_SLOTS = "gate.lendable_slots"
ATTR_GATE_BORROWED_PEAK = "gate.borrowed_peak"
ATTR_GATE_BORROWED_AT_RETURN = "gate.borrowed_at_return"
ATTR_GATE_LOAN_REASON = "gate.loan.reason"
ATTR_GATE_LOAN_PREDICTED_S = "gate.loan.predicted_s"
ATTR_GATE_LOAN_LIMIT_S = "gate.loan.limit_s"
ATTR_GATE_PREEMPT_REMAINING_S = "gate.preempt.remaining_s"
ATTR_GATE_PREEMPT_LOST_TOKENS = "gate.preempt.lost_tokens"
ATTR_GATE_RESTORE_BUDGET_S = "gate.restore_budget_s"

ATTR_MODELCLAIM_PHASE = "modelclaim.phase"
ATTR_MODELCLAIM_REASON = "modelclaim.reason"
ATTR_MODELCLAIM_POD = "modelclaim.pod"
ATTR_MODELCLAIM_WAKE_PATH = "modelclaim.wake_path"
ATTR_MODELCLAIM_FROM_POD = "modelclaim.from_pod"
ATTR_MODELCLAIM_NEIGHBOUR = "modelclaim.neighbour"
ATTR_MODELCLAIM_GPU_BYTES = "modelclaim.gpu_bytes"
ATTR_MODELCLAIM_HOST_RAM_BYTES = "modelclaim.host_ram_bytes"
ATTR_MODELCLAIM_HINT_MODE = "modelclaim.hint_mode"
ATTR_MODELCLAIM_HINT_SOURCE = "modelclaim.hint_source"
ATTR_MODELCLAIM_PREDICTED_READY_IN_S = "modelclaim.predicted_ready_in_s"
ATTR_GATE_HOLD_S = "gate.hold_s"
#: Who sent a request, so a retry can be linked to the answer that caused it without client spans.
ATTR_GATE_CLIENT_IDENTITY = "gate.client.identity"
ATTR_GATE_CLIENT_REQUEST_KEY = "gate.client.request_key"
ATTR_GATE_CLIENT_RETRY_COUNT = "gate.client.retry_count"
ATTR_GATE_CLIENT_TRACED = "gate.client.traced"

ATTR_RETRY_WAIT_S = "retry.wait_s"

ATTR_ENGINE_SLEEP_LEVEL = "engine.sleep_level"
ATTR_ENGINE_WAKE_TAGS = "engine.wake_tags"

# --- attributes: OpenTelemetry semantic conventions ---------------------------------------------

ATTR_HTTP_STATUS_CODE = _http.HTTP_RESPONSE_STATUS_CODE
ATTR_HTTP_RESEND_COUNT = _http.HTTP_REQUEST_RESEND_COUNT
#: The pre-stable name of the status, which opentelemetry-instrumentation-httpx writes at its default
#: (OTEL_SEMCONV_STABILITY_OPT_IN unset), and so does the gate's CLIENT span; read where the stable
#: one is absent.
ATTR_HTTP_STATUS_CODE_OLD = "http.status_code"
ATTR_HTTP_REQUEST_METHOD = _http.HTTP_REQUEST_METHOD
ATTR_HTTP_REQUEST_METHOD_ORIGINAL = _http.HTTP_REQUEST_METHOD_ORIGINAL
ATTR_URL_FULL = _url.URL_FULL
#: The pre-stable names of the method and the URL, as ATTR_HTTP_STATUS_CODE_OLD.
ATTR_HTTP_METHOD_OLD = "http.method"
ATTR_HTTP_URL_OLD = "http.url"
ATTR_SERVER_ADDRESS = _server.SERVER_ADDRESS
ATTR_SERVER_PORT = _server.SERVER_PORT
ATTR_NETWORK_PEER_ADDRESS = _network.NETWORK_PEER_ADDRESS
ATTR_NETWORK_PEER_PORT = _network.NETWORK_PEER_PORT
ATTR_NETWORK_PROTOCOL_VERSION = _network.NETWORK_PROTOCOL_VERSION
#: Pre-stable twins of server.address, server.port and network.protocol.version, written beside
#: them only with OTEL_SEMCONV_STABILITY_OPT_IN=http/dup (the instrumentation's rule).
ATTR_HTTP_HOST_OLD = "http.host"
ATTR_NET_PEER_PORT_OLD = "net.peer.port"
ATTR_HTTP_FLAVOR_OLD = "http.flavor"
#: Opt-in response header attribute (http.response.header.<key>); semconv has no Retry-After key.
ATTR_HTTP_RETRY_AFTER = "http.response.header.retry-after"
ATTR_ERROR_TYPE = _error.ERROR_TYPE
ATTR_GEN_AI_REQUEST_MODEL = _gen_ai.GEN_AI_REQUEST_MODEL
#: A resource attribute: one engine process among its service's. The analysis tells two starts of
#: one wake apart by it (wake_phases.sql); without it an engine's spans are one start.
ATTR_SERVICE_INSTANCE_ID = "service.instance.id"

# --- attributes: vLLM's llm_request span (spelled exactly as vLLM) --------------------------------

ATTR_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
ATTR_LATENCY_TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
ATTR_LATENCY_E2E = "gen_ai.latency.e2e"
ATTR_LATENCY_TIME_IN_MODEL_PREFILL = "gen_ai.latency.time_in_model_prefill"
ATTR_LATENCY_TIME_IN_MODEL_DECODE = "gen_ai.latency.time_in_model_decode"
ATTR_LATENCY_TIME_IN_MODEL_INFERENCE = "gen_ai.latency.time_in_model_inference"
ATTR_USAGE_PROMPT_TOKENS = _gen_ai.GEN_AI_USAGE_PROMPT_TOKENS
ATTR_USAGE_COMPLETION_TOKENS = _gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS
ATTR_GEN_AI_REQUEST_ID = "gen_ai.request.id"
ATTR_GEN_AI_REQUEST_MAX_TOKENS = _gen_ai.GEN_AI_REQUEST_MAX_TOKENS
ATTR_GEN_AI_REQUEST_TEMPERATURE = _gen_ai.GEN_AI_REQUEST_TEMPERATURE
ATTR_GEN_AI_REQUEST_TOP_P = _gen_ai.GEN_AI_REQUEST_TOP_P
ATTR_GEN_AI_REQUEST_N = "gen_ai.request.n"
ATTR_GEN_AI_RESPONSE_MODEL = _gen_ai.GEN_AI_RESPONSE_MODEL
ATTR_GEN_AI_RESPONSE_FINISH_REASONS = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS

#: Every vLLM latency attribute starts with this (vLLM's own namespace, not a semconv one).
VLLM_LATENCY_PREFIX = "gen_ai.latency."

#: The attributes vLLM's V1 do_tracing sets on llm_request (vLLM's ``vllm/tracing``; docs/spans.md).
VLLM_LLM_REQUEST_ATTRIBUTES = (
    ATTR_LATENCY_TIME_TO_FIRST_TOKEN,
    ATTR_LATENCY_E2E,
    ATTR_LATENCY_TIME_IN_QUEUE,
    ATTR_USAGE_PROMPT_TOKENS,
    ATTR_USAGE_COMPLETION_TOKENS,
    ATTR_LATENCY_TIME_IN_MODEL_PREFILL,
    ATTR_LATENCY_TIME_IN_MODEL_DECODE,
    ATTR_LATENCY_TIME_IN_MODEL_INFERENCE,
    ATTR_GEN_AI_REQUEST_ID,
    ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
)

# --- event names -------------------------------------------------------------------------------

EVENT_RETRY_WAIT = "retry.wait"
EVENT_RESPONSE_FIRST_CHUNK = "response.first_chunk"
EVENT_GRANT_ACQUIRED = "grant.acquired"
EVENT_UPSTREAM_FIRST_BYTE = "upstream.first_byte"
EVENT_LEND_STOPPED = "lend.stopped"
EVENT_BORROWED_DRAINED = "borrowed.drained"
EVENT_GRANT_RESTORED = "grant.restored"
EVENT_LOAN_REFUSED = "loan.refused"
EVENT_LENDING_RESUMED = "lending.resumed"
EVENT_LOAN_PREEMPTED = "loan.preempted"
EVENT_ROOM_FOUND = "room.found"
EVENT_ENGINE_WAKE_CALLED = "engine.wake_called"
EVENT_ENGINE_READY = "engine.ready"
EVENT_READY_OBSERVED = "ready.observed"
EVENT_HOLD_RELEASED = "hold.released"

# --- closed value sets of string attributes ---------------------------------------------------

TRAFFIC_CLASSES = ("interactive", "batch")
GATE_DECISIONS = ("admitted", "rejected", "not_ready", "error")
GATE_SLOTS = ("own", "borrowed")
OUTCOMES = ("ok", "rejected", "gave_up", "error")
WAKE_PATHS = ("in-place", "make-room", "move", "cold-start")
#: How the gateway answers a model that cannot serve yet (``[modelclaim]`` retry_after_mode, hold_s).
HINT_MODES = ("fixed", "calibrated", "hold")
#: Where one 503's hint came from: the fixed table, the calibration, the deployment's declared
#: durations, a re-estimate from the time the wake has run, or the table as its prior.
HINT_SOURCES = ("fixed", "calibrated", "declared", "elapsed", "prior")
#: Why a budget-aware lender refused a loan, and why lending resumed (gate/policies/budget.py).
LOAN_REASONS = ("drain_over_budget", "kv_wait_over_budget", "loans_not_drained", "hold_off", "drained_and_idle")

#: restore.arrival_phase values the analysis treats specially: batch arrivals while interactive is
#: idle (borrow-phase goodput), and the requests of wake scenarios (not a MoFlux arm).
ARRIVAL_PHASE_BORROW = "borrow"
#: Interactive demand back while batch holds the engine: the study's contention window.
ARRIVAL_PHASE_RETURN = "return"
ARRIVAL_PHASE_WAKE = "wake"

#: Attribute key -> the only values it may take (docs/spans.md lists them too).
ATTRIBUTE_VALUES: dict[str, tuple[str, ...]] = {
    ATTR_TRAFFIC_CLASS: TRAFFIC_CLASSES,
    ATTR_GATE_DECISION: GATE_DECISIONS,
    ATTR_GATE_SLOT: GATE_SLOTS,
    ATTR_OUTCOME: OUTCOMES,
    ATTR_MODELCLAIM_WAKE_PATH: WAKE_PATHS,
    ATTR_GATE_LOAN_REASON: LOAN_REASONS,
    ATTR_MODELCLAIM_HINT_MODE: HINT_MODES,
    ATTR_MODELCLAIM_HINT_SOURCE: HINT_SOURCES,
}

# --- attribute value types, as the typed-spans SQL layer casts them --------------------------------

STRING, INT, DOUBLE, BOOL, STRING_ARRAY = "string", "int", "double", "bool", "string[]"

ATTRIBUTE_TYPES: dict[str, str] = {
    ATTR_TRAFFIC_CLASS: STRING,
    ATTR_REQUEST_ID: STRING,
    ATTR_RETRY_POLICY: STRING,
    ATTR_ATTEMPTS: INT,
    ATTR_OUTCOME: STRING,
    ATTR_RETRY_AFTER_S: DOUBLE,
    ATTR_RETRY_AFTER_INVALID: STRING,
    ATTR_SCENARIO: STRING,
    ATTR_WORKLOAD: STRING,
    ATTR_SEED: INT,
    ATTR_ARRIVAL_PHASE: STRING,
    ATTR_ARRIVAL_PHASE_START_S: DOUBLE,
    ATTR_ARRIVAL_PHASE_WINDOW_S: DOUBLE,
    ATTR_RUN_ID: STRING,
    ATTR_POLICY: STRING,
    ATTR_GATE_POLICY: STRING,
    ATTR_GATE_DECISION: STRING,
    ATTR_GATE_SLOT: STRING,
    ATTR_GATE_WAIT_S: DOUBLE,
    ATTR_GATE_RETRY_AFTER_MS: INT,
    ATTR_GATE_UPSTREAM: STRING,
    ATTR_GATE_LENDABLE_SLOTS: INT,
    ATTR_GATE_BORROWED_PEAK: INT,
    ATTR_GATE_BORROWED_AT_RETURN: INT,
    ATTR_GATE_LOAN_REASON: STRING,
    ATTR_GATE_LOAN_PREDICTED_S: DOUBLE,
    ATTR_GATE_LOAN_LIMIT_S: DOUBLE,
    ATTR_GATE_PREEMPT_REMAINING_S: DOUBLE,
    ATTR_GATE_PREEMPT_LOST_TOKENS: INT,
    ATTR_GATE_RESTORE_BUDGET_S: DOUBLE,
    ATTR_MODELCLAIM_PHASE: STRING,
    ATTR_MODELCLAIM_REASON: STRING,
    ATTR_MODELCLAIM_POD: STRING,
    ATTR_MODELCLAIM_WAKE_PATH: STRING,
    ATTR_MODELCLAIM_FROM_POD: STRING,
    ATTR_MODELCLAIM_NEIGHBOUR: STRING,
    ATTR_MODELCLAIM_GPU_BYTES: INT,
    ATTR_MODELCLAIM_HOST_RAM_BYTES: INT,
    ATTR_MODELCLAIM_HINT_MODE: STRING,
    ATTR_MODELCLAIM_HINT_SOURCE: STRING,
    ATTR_MODELCLAIM_PREDICTED_READY_IN_S: DOUBLE,
    ATTR_GATE_HOLD_S: DOUBLE,
    ATTR_GATE_CLIENT_IDENTITY: STRING,
    ATTR_GATE_CLIENT_REQUEST_KEY: STRING,
    ATTR_GATE_CLIENT_RETRY_COUNT: INT,
    ATTR_GATE_CLIENT_TRACED: BOOL,
    ATTR_RETRY_WAIT_S: DOUBLE,
    ATTR_ENGINE_SLEEP_LEVEL: INT,
    ATTR_ENGINE_WAKE_TAGS: STRING_ARRAY,
    ATTR_SERVICE_INSTANCE_ID: STRING,
    ATTR_HTTP_STATUS_CODE: INT,
    ATTR_HTTP_RESEND_COUNT: INT,
    ATTR_HTTP_STATUS_CODE_OLD: INT,
    ATTR_HTTP_REQUEST_METHOD: STRING,
    ATTR_URL_FULL: STRING,
    ATTR_HTTP_METHOD_OLD: STRING,
    ATTR_HTTP_URL_OLD: STRING,
    ATTR_HTTP_REQUEST_METHOD_ORIGINAL: STRING,
    ATTR_SERVER_ADDRESS: STRING,
    ATTR_SERVER_PORT: INT,
    ATTR_NETWORK_PEER_ADDRESS: STRING,
    ATTR_NETWORK_PEER_PORT: INT,
    ATTR_NETWORK_PROTOCOL_VERSION: STRING,
    ATTR_HTTP_HOST_OLD: STRING,
    ATTR_NET_PEER_PORT_OLD: INT,
    ATTR_HTTP_FLAVOR_OLD: STRING,
    ATTR_HTTP_RETRY_AFTER: STRING_ARRAY,
    ATTR_ERROR_TYPE: STRING,
    ATTR_GEN_AI_REQUEST_MODEL: STRING,
    ATTR_LATENCY_TIME_IN_QUEUE: DOUBLE,
    ATTR_LATENCY_TIME_TO_FIRST_TOKEN: DOUBLE,
    ATTR_LATENCY_E2E: DOUBLE,
    ATTR_LATENCY_TIME_IN_MODEL_PREFILL: DOUBLE,
    ATTR_LATENCY_TIME_IN_MODEL_DECODE: DOUBLE,
    ATTR_LATENCY_TIME_IN_MODEL_INFERENCE: DOUBLE,
    ATTR_USAGE_PROMPT_TOKENS: INT,
    ATTR_USAGE_COMPLETION_TOKENS: INT,
    ATTR_GEN_AI_REQUEST_ID: STRING,
    ATTR_GEN_AI_REQUEST_MAX_TOKENS: INT,
    ATTR_GEN_AI_REQUEST_TEMPERATURE: DOUBLE,
    ATTR_GEN_AI_REQUEST_TOP_P: DOUBLE,
    ATTR_GEN_AI_REQUEST_N: INT,
    ATTR_GEN_AI_RESPONSE_MODEL: STRING,
    ATTR_GEN_AI_RESPONSE_FINISH_REASONS: STRING_ARRAY,
}


def _constants(prefix: str) -> dict[str, str]:
    return {name: value for name, value in globals().items() if name.startswith(prefix) and isinstance(value, str)}


def span_names() -> dict[str, str]:
    """Constant name -> span name, for every ``SPAN_*`` constant."""
    return _constants("SPAN_")


def attribute_keys() -> dict[str, str]:
    """Constant name -> attribute key, for every ``ATTR_*`` constant."""
    return _constants("ATTR_")


def event_names() -> dict[str, str]:
    """Constant name -> event name, for every ``EVENT_*`` constant."""
    return _constants("EVENT_")
