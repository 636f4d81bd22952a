-- name: finish_reasons_by_model
-- answers: Why answers ended, per model: stop, length (cut off at max tokens), abort
--   (the client went away) and the rest, with each reason's share of the model's
--   requests. A rising share of length or abort is a quality problem latency misses.
-- param since DateTime64(3, 'UTC') = 1d: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    model,
    finish_reason,
    count() AS requests,
    count() / sum(count()) OVER (PARTITION BY model) AS share
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY model, finish_reason
ORDER BY model, requests DESC, finish_reason
