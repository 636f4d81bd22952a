-- Codecs of `requests` chosen by measurement (docs/benchmarks.md, "Bytes per sample",
-- the `requests` paragraphs: the command, the candidates tried and the figures).
--
-- On the 10,000,000 requests of `llmwh compare --rows 10000000`, each candidate table
-- filled with the same rows and merged to one part a day, bytes a request:
--
--   whole table                                          39.39 -> 37.28
--   request_id  ZSTD(3) -> ZSTD(1)                       10.47 -> 8.99
--   ts          DoubleDelta, ZSTD(1) -> Delta, ZSTD(1)    2.11 -> 1.71
--   ten LowCardinality labels, no codec -> ZSTD(1)        2.47 -> 2.24
--
-- with less server CPU to insert and merge them than 0001's codecs (14.2 and 15.1 s
-- against 16.4 and 16.1 s, two rounds). The request ids (random hex after a fixed
-- prefix) are the surprise: ZSTD(3) to ZSTD(15) likely take short chance matches
-- inside the random hex, which cost more than the literals they replace, and ZSTD(1)
-- takes fewer (ZSTD(16) and up reach 8.2, at 20 to 40 times the CPU). A label without
-- a codec took ClickHouse's default, which here was LZ4 (it gains nothing on a random
-- pick of 40 nodes) in the parts of 46 MB and less, and came out as ZSTD(1) in those of
-- 110 MB and more; ZSTD(1) compresses them in every part.
--
-- Not taken: ZSTD(9) for the labels, `consistency_score`, `hallucination` and `attrs`
-- (36.90 bytes a request, for 28 s of server CPU against 16); 1 MB compressed blocks, as
-- 0023 gave `samples` (0.08 byte less: not worth decompressing up to a megabyte a
-- column for each granule a narrow query reads). The latencies stay at ZSTD(1): no
-- level (1 to 19), FPC or Gorilla took more than 0.01 byte off `ttft_ms`, `queue_ms`
-- or `e2e_ms`; nor did T64, ZSTD(9) off the token counts.
--
-- Every codec is lossless and the sorting key is unchanged, so no answer changes. Only
-- codecs change (no type, no key): ClickHouse rewrites nothing now; new parts and merges
-- use them, so a table's older parts move over as they merge.
ALTER TABLE ${db}.requests
    MODIFY COLUMN ts CODEC(Delta, ZSTD(1)),
    MODIFY COLUMN request_id CODEC(ZSTD(1)),
    MODIFY COLUMN model_version CODEC(ZSTD(1)),
    MODIFY COLUMN node CODEC(ZSTD(1)),
    MODIFY COLUMN client_app CODEC(ZSTD(1)),
    MODIFY COLUMN client_os CODEC(ZSTD(1)),
    MODIFY COLUMN network CODEC(ZSTD(1)),
    MODIFY COLUMN ab_group CODEC(ZSTD(1)),
    MODIFY COLUMN request_type CODEC(ZSTD(1)),
    MODIFY COLUMN status CODEC(ZSTD(1)),
    MODIFY COLUMN error_class CODEC(ZSTD(1)),
    MODIFY COLUMN finish_reason CODEC(ZSTD(1));
