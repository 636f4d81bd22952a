-- name: tenants_by_budget_burned
-- answers: Each tenant's share of good requests (ok, first token within ttft_ms) and how
--   much of its error budget it burned over the window: 1 spends it exactly, above 1
--   breaks the target. The tenants burning fastest first.
-- param since DateTime64(3, 'UTC') = 1d: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
-- param ttft_ms Float64 = 300: a good request's first token arrives within this (ms)
-- param target Float64 = 0.99: the share of good requests the tenant is promised
SELECT
    tenant,
    count() AS requests,
    countIf(status = 'ok' AND ttft_ms <= {ttft_ms:Float64}) AS good,
    good / count() AS attainment,
    (1 - attainment) / (1 - {target:Float64}) AS budget_burned
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY tenant
ORDER BY budget_burned DESC, tenant
