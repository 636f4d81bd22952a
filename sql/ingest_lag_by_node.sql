-- name: ingest_lag_by_node
-- answers: How late the per-request parts that senders remote-write arrive, per node
--   that sent them: time from the request's first sample to the part's arrival, in ms.
--   A node far behind the others has a sender that is queueing or retrying.
-- param since DateTime64(3, 'UTC') = 1h: start of the window (arrival time)
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    node,
    count() AS parts,
    quantileExactInclusive(0.5)(toUnixTimestamp64Milli(received) - toUnixTimestamp64Milli(first_ts)) AS p50_lag_ms,
    quantileExactInclusive(0.99)(toUnixTimestamp64Milli(received) - toUnixTimestamp64Milli(first_ts)) AS p99_lag_ms,
    max(toUnixTimestamp64Milli(received) - toUnixTimestamp64Milli(first_ts)) AS max_lag_ms
FROM request_parts
WHERE received >= {since:DateTime64(3, 'UTC')} AND received < {until:DateTime64(3, 'UTC')}
GROUP BY node
ORDER BY p99_lag_ms DESC, node
