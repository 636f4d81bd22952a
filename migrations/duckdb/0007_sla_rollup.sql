-- The hourly SLA rollup of ClickHouse's 0007 (tenant, service, model, region), as a
-- view computed at query time like DuckDB's other rollups.

CREATE OR REPLACE VIEW ${db}.requests_sla_1h AS
SELECT
    date_trunc('hour', ts) AS ts,
    tenant, service, model, region, is_probe,
    count(*)::UBIGINT AS requests,
    count(*) FILTER (WHERE status = 'error')::UBIGINT AS errors,
    count(*) FILTER (WHERE status = 'rejected')::UBIGINT AS rejections,
    coalesce(histogram(error_class) FILTER (WHERE error_class <> ''), MAP {}) AS errors_by_class,
    coalesce(sum(prompt_tokens), 0)::UBIGINT AS prompt_tokens_sum,
    coalesce(sum(output_tokens), 0)::UBIGINT AS output_tokens_sum,
    coalesce(sum(cached_prompt_tokens), 0)::UBIGINT AS cached_prompt_tokens_sum,
    coalesce(sum(output_tokens - 1) FILTER (WHERE output_tokens > 1 AND e2e_ms > ttft_ms), 0)::UBIGINT
        AS decode_tokens_sum,
    coalesce(sum(e2e_ms::DOUBLE - ttft_ms::DOUBLE) FILTER (WHERE output_tokens > 1 AND e2e_ms > ttft_ms), 0)
        AS decode_ms_sum,
    coalesce(sum(queue_ms::DOUBLE), 0) AS queue_ms_sum,
    count(queue_ms)::UBIGINT AS queue_ms_count,
    coalesce(histogram(${latency_bucket:queue_ms}) FILTER (WHERE queue_ms IS NOT NULL), MAP {}) AS queue_ms_hist,
    coalesce(histogram(${latency_bucket:queue_ms}) FILTER (WHERE queue_ms IS NOT NULL AND status = 'ok'), MAP {})
        AS queue_ms_ok_hist,
    coalesce(sum(ttft_ms::DOUBLE), 0) AS ttft_ms_sum,
    count(ttft_ms)::UBIGINT AS ttft_ms_count,
    coalesce(histogram(${latency_bucket:ttft_ms}) FILTER (WHERE ttft_ms IS NOT NULL), MAP {}) AS ttft_ms_hist,
    coalesce(histogram(${latency_bucket:ttft_ms}) FILTER (WHERE ttft_ms IS NOT NULL AND status = 'ok'), MAP {})
        AS ttft_ms_ok_hist,
    coalesce(sum(tpot_ms::DOUBLE), 0) AS tpot_ms_sum,
    count(tpot_ms)::UBIGINT AS tpot_ms_count,
    coalesce(histogram(${latency_bucket:tpot_ms}) FILTER (WHERE tpot_ms IS NOT NULL), MAP {}) AS tpot_ms_hist,
    coalesce(histogram(${latency_bucket:tpot_ms}) FILTER (WHERE tpot_ms IS NOT NULL AND status = 'ok'), MAP {})
        AS tpot_ms_ok_hist,
    coalesce(sum(e2e_ms::DOUBLE), 0) AS e2e_ms_sum,
    count(e2e_ms)::UBIGINT AS e2e_ms_count,
    coalesce(histogram(${latency_bucket:e2e_ms}) FILTER (WHERE e2e_ms IS NOT NULL), MAP {}) AS e2e_ms_hist,
    coalesce(histogram(${latency_bucket:e2e_ms}) FILTER (WHERE e2e_ms IS NOT NULL AND status = 'ok'), MAP {})
        AS e2e_ms_ok_hist
FROM ${db}.requests
GROUP BY ALL;
