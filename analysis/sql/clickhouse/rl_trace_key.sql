-- ClickHouse form of rl_trace_key: a trace id (32 hex digits) as its 128-bit integer, null when it
-- is not one (as DuckDB's try_cast of '0x' || id gives)
create function if not exists rl_trace_key as (trace_id) ->
    if(match(trace_id, '^[0-9a-fA-F]{1,32}$'), reinterpretAsUInt128(reverse(unhex(leftPad(trace_id, 32, '0')))), null)
