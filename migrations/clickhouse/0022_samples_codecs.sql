-- Codecs of `samples` chosen by measurement (benchmarks/bytes_per_sample.py; the
-- figures and the candidates tried: docs/benchmarks.md, "Bytes per sample").
--
-- On 3.7M seeded scrape samples (node_exporter-like counters and gauges, a classic HTTP
-- histogram and vLLM's `vllm:` series, 15 s scrapes with millisecond jitter), merged to
-- one part, `samples` took 3.62 bytes a sample with 0001's codecs and 2.64 with these:
--
--   id         LZ4 (the default) -> ZSTD(1)           0.090 -> 0.027 bytes a sample
--   timestamp  DoubleDelta, ZSTD(1) -> Delta, ZSTD(1)  0.734 -> 0.557
--   value      Gorilla, ZSTD(1) -> Delta, ZSTD(3)      2.793 -> 2.056
--
-- Delta of a value's bits (consecutive samples of a series, as the key keeps them
-- together) leaves a counter's increments and a gauge's small steps as small integers
-- that ZSTD packs, where Gorilla's XOR leaves bits ZSTD cannot find; the timestamps'
-- jitter of a few milliseconds costs DoubleDelta two variable-width deltas per
-- jittered scrape, where Delta's repeated 15,000s and near-15,000s are what ZSTD
-- compresses best. Every codec is lossless: each value's bits come back as written
-- (NaN, the staleness marker, infinities, -0), and the sorting key is unchanged, so no
-- answer changes.
--
-- Only the codecs change (no type, no key): ClickHouse rewrites nothing now; new parts
-- and merges use the new codecs, so a table's older parts move over as they merge.
ALTER TABLE ${db}.samples
    MODIFY COLUMN id CODEC(ZSTD(1)),
    MODIFY COLUMN timestamp CODEC(Delta, ZSTD(1)),
    MODIFY COLUMN value CODEC(Delta, ZSTD(3));
