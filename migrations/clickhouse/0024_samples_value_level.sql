-- `samples.value` at ZSTD(11), the level chosen by measurement for 0023's layout
-- (benchmarks/bytes_per_sample.py; the figures: docs/benchmarks.md, "Bytes per sample").
--
-- With 0023's ids (a target's series together) and compressed blocks of 1 MB, on the
-- seeded scrape data (3.7M samples, merged), bytes a sample:
--
--   value ZSTD(9)   samples 1.624, with `series` 1.644   VictoriaMetrics 1.79: 1.639
--   value ZSTD(10)  samples 1.615
--   value ZSTD(11)  samples 1.609, with `series` 1.629
--   value ZSTD(12)  samples 1.609
--
-- 0023 chose ZSTD(9) from a measurement of `samples` alone; with `series` it stays
-- above VictoriaMetrics' size, and ZSTD(11) is the lowest level that goes below it with
-- room. It costs the server about a third more CPU to insert and merge (1.9 against
-- 1.4 s for the 3.7M samples, same run); the timestamp gains nothing above ZSTD(9).
-- Only the codec changes: new parts and merges use it, nothing is rewritten now.
ALTER TABLE ${db}.samples
    MODIFY COLUMN value CODEC(Delta, ZSTD(11));
