"""Ingest: remote-write and per-request event decoding, the LLM metric mapping,
group commit, and the receiver's HTTP app."""
