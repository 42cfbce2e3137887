"""Writes the dataset files Titan's readers are checked against, with the
tools their users make them with: pyarrow for Parquet, Arrow's zstd codec
for *.jsonl.zst (tests/unit/dataset_sources_test.cpp).

usage: dataset_files.py DOCS_JSONL OUT_DIR
from DOCS_JSONL ({"text": ...} per line) writes in OUT_DIR:
  docs.parquet     columns id (int64) and text (string), row groups of 7
                   rows, a null text after every 10th row (skipped by readers)
  docs.jsonl.zst   the JSONL as two concatenated zstd frames
  large.parquet    the texts as a large_string column "body"
  truncated.parquet, truncated.jsonl.zst   the same files cut short
  damaged.parquet  docs.parquet with 64 bytes of its text column's first page overwritten
"""
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def main(docs_path, out):
    with open(docs_path, "rb") as f:
        raw = f.read()
    texts = [json.loads(line)["text"] for line in raw.decode().splitlines() if line.strip()]
    with_nulls = []
    for i, text in enumerate(texts):
        with_nulls.append(text)
        if i % 10 == 9:
            with_nulls.append(None)
    table = pa.table({"id": pa.array(range(len(with_nulls)), pa.int64()), "text": pa.array(with_nulls, pa.string())})
    pq.write_table(table, f"{out}/docs.parquet", row_group_size=7)
    pq.write_table(pa.table({"body": pa.array(texts, pa.large_string())}), f"{out}/large.parquet")
    half = raw.index(b"\n", len(raw) // 2) + 1
    frames = b"".join(pa.compress(part, codec="zstd", asbytes=True) for part in (raw[:half], raw[half:]))
    with open(f"{out}/docs.jsonl.zst", "wb") as f:
        f.write(frames)
    with open(f"{out}/docs.parquet", "rb") as f:
        data = bytearray(f.read())
    # The text column's first pages, the footer intact.
    start = pq.ParquetFile(f"{out}/docs.parquet").metadata.row_group(0).column(1).data_page_offset
    data[start:start + 64] = b"\xff" * 64
    with open(f"{out}/damaged.parquet", "wb") as f:
        f.write(data)
    for name in ("docs.parquet", "docs.jsonl.zst"):
        with open(f"{out}/{name}", "rb") as f:
            data = f.read()
        with open(f"{out}/truncated.{name.split('.', 1)[1]}", "wb") as f:
            f.write(data[: len(data) * 2 // 3])


if __name__ == "__main__":
    main(*sys.argv[1:])
