-- name: queueing_by_node
-- answers: Per node, the time requests waited in the queue before prefill and their
--   time to first token: a node whose TTFT is mostly queueing is short of capacity, one
--   whose TTFT is high without queueing is slow at prefill.
-- param since DateTime64(3, 'UTC') = 1h: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    node,
    count() AS requests,
    avg(queue_ms) AS avg_queue_ms,
    quantileExactInclusive(0.95)(queue_ms) AS p95_queue_ms,
    quantileExactInclusive(0.95)(ttft_ms) AS p95_ttft_ms,
    avg(queue_ms) / avg(ttft_ms) AS queue_share_of_ttft
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY node
ORDER BY p95_ttft_ms DESC, node
