"""Read a finished MCAP file back with the `mcap` library (not the writer's own, foxglove-sdk).

Tests import this as `from mcap_helpers import read_mcap` (pytest puts test/ on sys.path).
"""

from __future__ import annotations

from pathlib import Path

from mcap.reader import make_reader
from mcap.stream_reader import StreamReader


def read_mcap(path: str | Path) -> dict:
    """Schemas, channels, messages and statistics of a finished MCAP file.

    Returns a dict with
      - "schemas": {schema_id: mcap.records.Schema}      (.name, .encoding, .data)
      - "channels": {channel_id: mcap.records.Channel}   (.topic, .message_encoding, .schema_id)
      - "messages": [(topic, log_time, data bytes, schema name or None)] in file order
      - "statistics": mcap.records.Statistics            (.message_count, .channel_count, ...)

    Checks on the way: magic at both ends, the data-section and chunk CRCs, and that the file
    has a summary with a statistics record (an unfinished file has neither).
    """
    with open(path, "rb") as f:
        # one linear pass over every record: magic at start and end, CRCs, chunk decompression
        for _ in StreamReader(f, validate_crcs=True).records:
            pass
        f.seek(0)
        reader = make_reader(f, validate_crcs=True)
        summary = reader.get_summary()
        if summary is None or summary.statistics is None:
            raise AssertionError(f"{path}: no summary/statistics, not a finished MCAP file")
        messages = [
            (channel.topic, message.log_time, message.data, schema.name if schema else None)
            for schema, channel, message in reader.iter_messages(log_time_order=False)
        ]
    return {
        "schemas": dict(summary.schemas),
        "channels": dict(summary.channels),
        "messages": messages,
        "statistics": summary.statistics,
    }


def flipped_sample(directory: Path) -> Path:
    """The sample bag's MCAP file (zstd-compressed chunks) with one byte flipped in the
    compressed data of the chunk at 60% of the file, written into ``directory``: the rest of
    the bag cannot be decompressed from there."""
    from mcap.records import Chunk

    from crossspec_ros.paths import sample_bag

    source = next(sample_bag().glob("*.mcap"))
    data = bytearray(source.read_bytes())
    target = int(len(data) * 0.6)
    with source.open("rb") as stream:
        begin = 8  # after the magic
        for record in StreamReader(stream, emit_chunks=True).records:
            end = stream.tell()
            if isinstance(record, Chunk) and begin <= target < end:
                assert record.compression == "zstd"
                break
            begin = end
        else:
            raise AssertionError("no chunk at 60% of the sample bag")
    data[(begin + end) // 2] ^= 0xFF
    out = Path(directory) / "flipped.mcap"
    out.write_bytes(bytes(data))
    return out
