-- A span id as its integer key: the 16 hex digits read as one 64-bit number, so that joins
-- between layers compare fixed-width integers, not strings. Lossless for the collector's
-- lower-case hex; a root span's '' parent, or an id that is no hex, gives null, which joins nothing.
create or replace temp macro rl_span_key(span_id) as
    try_cast('0x' || span_id as ubigint)
