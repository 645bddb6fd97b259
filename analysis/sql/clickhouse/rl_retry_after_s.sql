-- ClickHouse form of rl_retry_after_s: the hint in seconds from the attribute, else the header as
-- delay-seconds, else as an HTTP date (seconds after the response's end)
create function if not exists rl_retry_after_s as (attribute_s, raw, response_end_ns) ->
    coalesce(
        attribute_s,
        -- trimmed: DuckDB's try_cast reads ' 7' as 7
        toFloat64OrNull(trimBoth(raw)),
        -- nanoseconds -> seconds
        (toUnixTimestamp64Nano(toDateTime64(parseDateTimeOrNull(raw, '%a, %d %b %Y %H:%i:%s GMT', 'UTC'), 9, 'UTC'))
            - response_end_ns) / 1e9
    )
