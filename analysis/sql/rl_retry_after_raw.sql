-- The Retry-After value an HTTP span received, from its `http.response.header.retry-after`
-- attribute: string[] attributes are stored as a JSON list and the first header value is the one
-- used; a plain string (another instrumentation's) is taken as it is; neither is ever an error.
create or replace temp macro rl_retry_after_raw(header) as
    case
        when starts_with(header, '[') then try(json_extract_string(header, '$[0]'))
        else header
    end
