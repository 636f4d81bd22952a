-- name: experiment_arms
-- answers: Each arm of the A/B experiment side by side: requests, error rate, the 95th
--   percentile of TTFT and E2E, and the share of good requests (ok, first token within
--   ttft_ms). `llmwh ab` adds the confidence interval of the difference.
-- param since DateTime64(3, 'UTC') = 1d: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
-- param ttft_ms Float64 = 300: a good request's first token arrives within this (ms)
SELECT
    ab_group,
    count() AS requests,
    countIf(status = 'error') / count() AS error_rate,
    quantileExactInclusive(0.95)(ttft_ms) AS p95_ttft_ms,
    quantileExactInclusive(0.95)(e2e_ms) AS p95_e2e_ms,
    countIf(status = 'ok' AND ttft_ms <= {ttft_ms:Float64}) / count() AS attainment
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY ab_group
ORDER BY ab_group
