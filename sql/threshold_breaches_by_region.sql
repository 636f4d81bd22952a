-- name: threshold_breaches_by_region
-- answers: Per region, the requests whose first token took longer than ttft_ms, their
--   share, and how far past the threshold the worst of them went.
-- param since DateTime64(3, 'UTC') = 1h: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
-- param ttft_ms Float64 = 200: the threshold (ms)
SELECT
    region,
    count() AS requests,
    countIf(ttft_ms > {ttft_ms:Float64}) AS breaches,
    breaches / count() AS breach_share,
    max(ttft_ms) AS worst_ttft_ms
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY region
ORDER BY breach_share DESC, region
