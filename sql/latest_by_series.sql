-- name: latest_by_series
-- answers: The newest sample of each series of a remote-written metric in a window, with
--   its labels, lowest value first: for `up`, which scrape targets failed their last
--   scrape; for a gauge (KV-cache usage, requests running), where it stands, series by
--   series. Read through the series_samples view, so each sample counts once however
--   far ClickHouse has merged the series.
-- param metric String = up: the metric name (`__name__`)
-- param since DateTime64(3, 'UTC') = 1h: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    any(labels) AS labels,
    max(timestamp) AS last_sample,
    argMax(value, timestamp) AS value
FROM series_samples
WHERE metric_name = {metric:String}
    AND timestamp >= {since:DateTime64(3, 'UTC')} AND timestamp < {until:DateTime64(3, 'UTC')}
GROUP BY id
ORDER BY value, last_sample
