-- name: error_classes_by_zone
-- answers: Errors per 5-minute bucket, zone and error class, with their share of the
--   zone's requests in that bucket: which zone broke, when, and how.
-- param since DateTime64(3, 'UTC') = 6h: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT time, zone, error_class, errors, errors / zone_requests AS error_share
FROM (
    SELECT
        toDateTime64(toStartOfInterval(ts, INTERVAL 5 MINUTE), 3, 'UTC') AS time,
        zone,
        error_class,
        countIf(status = 'error') AS errors,
        sum(count()) OVER (
            PARTITION BY toDateTime64(toStartOfInterval(ts, INTERVAL 5 MINUTE), 3, 'UTC'), zone
        ) AS zone_requests
    FROM requests
    WHERE NOT is_probe
        AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    GROUP BY time, zone, error_class
) AS buckets
WHERE errors > 0
ORDER BY time, zone, error_class
