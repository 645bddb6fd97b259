-- ClickHouse form of rl_retry_after_raw: a recorded Retry-After header's value; a header recorded
-- as a JSON list (the HTTP semantic conventions' form) gives its first element, null when it has none
create function if not exists rl_retry_after_raw as (header) ->
    if(startsWith(header, '['), nullIf(JSONExtractString(header, 1), ''), header)
