-- name: tokens_by_tenant
-- answers: What each tenant consumed per model: requests, prompt tokens (and how many of
--   them the KV cache served), output tokens. The input of a usage bill.
-- param since DateTime64(3, 'UTC') = 1d: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    tenant,
    model,
    count() AS requests,
    sum(prompt_tokens) AS prompt_tokens,
    sum(cached_prompt_tokens) AS cached_prompt_tokens,
    sum(output_tokens) AS output_tokens
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY tenant, model
ORDER BY output_tokens DESC, tenant, model
