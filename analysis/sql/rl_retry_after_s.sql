-- A Retry-After hint in seconds: the emitter's own parse (`restore.retry_after_s`) when it made
-- one; else the raw value (`rl_retry_after_raw`) as delta-seconds; else as an HTTP-date
-- (IMF-fixdate), which counts from the response, i.e. the end of the span that received it.
create or replace temp macro rl_retry_after_s(attribute_s, raw, response_end_ns) as
    coalesce(
        attribute_s,
        try_cast(raw as double),
        -- epoch_ns gives nanoseconds, hence / 1e9 for seconds
        -- (try: a date past 2262 does not fit nanoseconds, and gives no value rather than an error)
        (try(epoch_ns(try_strptime(raw, '%a, %d %b %Y %H:%M:%S GMT'))) - response_end_ns) / 1e9
    )
