-- ClickHouse form of rl_span_key: a span id (16 hex digits) as its 64-bit integer, null when it is
-- not one (as DuckDB's try_cast of '0x' || id gives)
create function if not exists rl_span_key as (span_id) ->
    if(match(span_id, '^[0-9a-fA-F]{1,16}$'), reinterpretAsUInt64(reverse(unhex(leftPad(span_id, 16, '0')))), null)
