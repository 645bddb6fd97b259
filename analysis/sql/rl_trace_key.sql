-- A trace id as its integer key: the 32 hex digits read as one 128-bit number, so that joins
-- between layers compare fixed-width integers, not strings. Lossless for the collector's
-- lower-case hex; an id that is no hex (a store written by hand) gives null, which joins nothing.
create or replace temp macro rl_trace_key(trace_id) as
    try_cast('0x' || trace_id as uhugeint)
