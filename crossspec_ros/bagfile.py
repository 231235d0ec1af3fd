"""Open bags as `ros2 bag record` (and ROS 1's `rosbag record`) write them, with rosbags (every
reader goes here). A ROS 1 bag is one ``.bag`` file; rosbags reads it as it is.

Two things rosbags 0.11.9 does not read on its own:
- a ``metadata.yaml`` whose ``storage_identifier`` is empty (some rosbag2 versions write it
  so): the storage is told by the files' extension (.mcap, .db3), and a temporary directory
  of links to the bag's files with a completed metadata.yaml is read instead;
- MCAP schemas in ``ros2idl`` with ``#include`` lines (rosidl writes one per dependency):
  rosbags' IDL parser rejects them. rosbag2 stores each dependency as its own section of the
  schema, so the lines carry nothing and are dropped before parsing.

And one thing rosbags refuses that a recording cut short (a crash, a full disk, a copy
interrupted) still holds: an MCAP file without its end (no summary, no closing magic). Its
records are read in order up to the damage with the mcap library and copied into a complete
temporary MCAP, which is read instead; a warning says where the damage is and how many messages
were read before it.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rosbags.highlevel.anyreader as _anyreader
import yaml
from rosbags.highlevel import AnyReader
from rosbags.rosbag1 import Reader as Reader1
from rosbags.rosbag2 import Reader

from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.text import single_spaced

STORAGE_BY_SUFFIX = {".mcap": "mcap", ".db3": "sqlite3"}
MCAP_MAGIC = b"\x89MCAP0\r\n"  # opens and closes every complete MCAP file
log = logging.getLogger("crossspec.bags")
_parse_idl = _anyreader.get_types_from_idl


def without_preprocessor_lines(idl: str) -> str:
    """``idl`` without its ``#include``/``#pragma`` lines."""
    return "\n".join(line for line in idl.splitlines() if not line.lstrip().startswith("#"))


def _parse_idl_without_includes(idl: str):  # type: ignore[no-untyped-def]
    return _parse_idl(without_preprocessor_lines(idl))


_anyreader.get_types_from_idl = _parse_idl_without_includes


def one_line(err: BaseException | str) -> str:
    """An error's text on one line: YAML and other parsers put the position on a line of its
    own, which would break a one-line message."""
    return single_spaced(err)


class BagDamagedError(Exception):
    """The stored messages of a bag cannot be read on from some point (a damaged chunk: a
    flipped byte in its compressed data, a cut). ``read``: the messages read before it."""

    def __init__(self, message: str, read: int) -> None:
        super().__init__(message)
        self.read = read


def stored_messages(reader: Any, path: str | Path, **selection: Any
                    ) -> Iterator[tuple[Any, int, bytes]]:
    """``reader.messages(**selection)`` (connection, log time, raw bytes) in log-time order,
    raising ``BagDamagedError`` where they cannot be read on: one line naming the bag, what was
    read before the damage and up to which log time, and the reader's own words."""
    messages = reader.messages(**selection)
    read, last_ns = 0, None
    while True:
        try:
            conn, log_time, raw = next(messages)
        except StopIteration:
            return
        except Exception as exc:  # rosbags raises several kinds (zstd, lz4, mcap, sqlite)
            where = f"after {read:,} messages (the last logged at {ns_to_seconds(last_ns):.3f} s)" \
                if last_ns is not None else "before its first message"
            raise BagDamagedError(f"{path}: the bag is damaged {where}: {type(exc).__name__}: "
                             f"{one_line(exc)}; what was read before it is kept, the rest "
                             "cannot be read (a damaged chunk: copy the bag again, or cut it "
                             "before the damage)", read) from exc
        read, last_ns = read + 1, int(log_time)
        yield conn, log_time, raw


def cannot_open(path: str | Path, err: BaseException) -> str:
    """The one-line message for a bag that rosbags cannot open."""
    kind = "ROS 1" if is_ros1_bag(path) else "ROS 2"
    return (f"{path}: cannot open as a {kind} bag ({type(err).__name__}: {one_line(err)}). "
            "Pass a rosbag2 directory (metadata.yaml + .mcap/.db3), an .mcap file or a ROS 1 "
            ".bag file; if it is one, it may be truncated or corrupt.")


def readable_path(path: str | Path) -> Path:
    """``path``, or a stand-in rosbags can read: a directory with the storage filled into its
    metadata.yaml, or the salvaged copy of an MCAP file cut short."""
    path = _with_storage_identifier(Path(path))
    damaged = damaged_mcap(path)
    if damaged is None:
        return path
    if path.is_dir():  # the salvaged MCAP is read alone: say so if the metadata was unusable
        _warn_unreadable_metadata(path / "metadata.yaml")
    return salvage_mcap(damaged).copy


_WARNED_METADATA: set[tuple[Path, int, int]] = set()


def _warn_unreadable_metadata(metadata: Path) -> None:
    """One warning (per file version in a process) when a bag directory's metadata.yaml is
    not a rosbag2 one: the MCAP beside it is read anyway, since it carries its own topics and
    types, but what the metadata said (its storage, its other files) is not used."""
    try:
        stat = metadata.stat()
    except OSError:
        return  # none at all: a directory holding only the MCAP needs none
    key = (metadata.resolve(), stat.st_size, stat.st_mtime_ns)
    if key in _WARNED_METADATA:
        return
    try:
        doc = yaml.safe_load(metadata.read_text())
        problem = "" if isinstance(doc, dict) and isinstance(
            doc.get("rosbag2_bagfile_information"), dict) else \
            "no rosbag2_bagfile_information section"
    except (OSError, ValueError, yaml.YAMLError) as err:  # ValueError: bytes not UTF-8
        problem = f"{type(err).__name__}: {one_line(err)}"
    if problem:
        _WARNED_METADATA.add(key)
        log.warning("%s cannot be used (%s) and is ignored: the bag's MCAP file cut short is "
                    "read alone. Restore metadata.yaml or remove it", metadata, problem)


def _with_storage_identifier(path: Path) -> Path:
    metadata = path / "metadata.yaml"
    if not metadata.is_file():
        return path
    try:
        doc = yaml.safe_load(metadata.read_text())
        info = doc["rosbag2_bagfile_information"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return path  # the reader reports what is wrong with it
    if info.get("storage_identifier"):
        return path
    suffixes = {Path(name).suffix for name in info.get("relative_file_paths") or []}
    storages = {STORAGE_BY_SUFFIX[s] for s in suffixes if s in STORAGE_BY_SUFFIX}
    if len(storages) != 1:
        return path
    info["storage_identifier"] = storages.pop()
    stand_in = Path(tempfile.mkdtemp(prefix="crossspec-bag-"))
    atexit.register(shutil.rmtree, stand_in, ignore_errors=True)
    for item in path.iterdir():
        if item.name != "metadata.yaml":
            (stand_in / item.name).symlink_to(item.resolve())
    (stand_in / "metadata.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return stand_in


@dataclass(frozen=True)
class SalvagedMcap:
    """What was read of an MCAP file cut short or damaged (``copy``: a complete MCAP of it)."""

    source: Path
    copy: Path
    messages: int
    good_bytes: int     # the file up to the end of the last record read whole
    size: int
    damage: str         # what stopped the reading
    lost_messages: int = 0  # read, but on a channel whose record was lost
    from_cut_chunk: int = 0  # of ``messages``, those whole in the chunk cut short

    def describe(self) -> str:
        lost = f", {self.lost_messages:,} more on channels whose record was lost" if \
            self.lost_messages else ""
        cut = f" ({self.from_cut_chunk:,} of them whole inside the chunk cut short)" if \
            self.from_cut_chunk else ""
        return (f"{self.source}: MCAP file cut short or damaged after byte "
                f"{self.good_bytes:,} of {self.size:,} ({self.damage}); read the "
                f"{self.messages:,} messages before the damage{cut}{lost}: anything recorded "
                "after it is lost")


_SALVAGED: dict[tuple[Path, int, int], SalvagedMcap] = {}


def damaged_mcap(path: Path) -> Path | None:
    """The MCAP file of ``path`` (a file, or a bag directory holding one) if it starts like
    an MCAP file but does not end like one; None otherwise (other damage is the reader's to
    report)."""
    files = [path] if path.is_file() else sorted(path.glob("*.mcap")) if path.is_dir() else []
    if len(files) != 1 or files[0].suffix != ".mcap":
        return None
    file = files[0]
    try:
        with file.open("rb") as stream:
            head = stream.read(len(MCAP_MAGIC))
            size = stream.seek(0, 2)
            stream.seek(max(size - len(MCAP_MAGIC), 0))
            tail = stream.read(len(MCAP_MAGIC))
    except OSError:
        return None
    if head != MCAP_MAGIC or (size >= 2 * len(MCAP_MAGIC) and tail == MCAP_MAGIC):
        return None
    return file


def salvage_mcap(file: Path) -> SalvagedMcap:
    """Copy the records of ``file`` that precede its damage into a complete temporary MCAP
    (once per file version in a process) and warn how much was read."""
    stat = file.stat()
    key = (file.resolve(), stat.st_size, stat.st_mtime_ns)
    if key not in _SALVAGED:
        _SALVAGED[key] = _copy_until_damage(file, stat.st_size)
        log.warning(_SALVAGED[key].describe())
    return _SALVAGED[key]


def _copy_until_damage(file: Path, size: int) -> SalvagedMcap:
    from mcap.records import Channel, Header, Message, Schema
    from mcap.writer import CompressionType, Writer

    folder = Path(tempfile.mkdtemp(prefix="crossspec-salvaged-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / file.name
    schemas: dict[int, Schema] = {}
    channels: dict[int, int] = {}   # channel id in the file -> id in the copy
    written: dict[int, int] = {}    # schema id in the file -> id in the copy
    messages = lost = 0
    reading = _RecordsUntilDamage(file, size)
    with copy.open("wb") as target:
        writer = Writer(target, compression=CompressionType.NONE)
        started = False
        for record in reading:
            if isinstance(record, Header) and not started:
                writer.start(record.profile, record.library)
                started = True
            elif not started:  # nothing without the header: it says the bag is ROS 2's
                break
            elif isinstance(record, Schema):
                schemas[record.id] = record
            elif isinstance(record, Channel) and record.id not in channels:
                schema = schemas.get(record.schema_id)
                if schema is not None and record.schema_id not in written:
                    written[record.schema_id] = writer.register_schema(
                        schema.name, schema.encoding, schema.data)
                channels[record.id] = writer.register_channel(
                    record.topic, record.message_encoding, written.get(record.schema_id, 0),
                    record.metadata)
            elif isinstance(record, Message):
                if record.channel_id not in channels:
                    lost += 1
                    continue
                writer.add_message(channels[record.channel_id], record.log_time, record.data,
                                   record.publish_time, record.sequence)
                messages += 1
        if not started:
            writer.start("ros2", "crossspec salvage")
        writer.finish()
    return SalvagedMcap(file, copy, messages, reading.good_bytes, size, reading.damage, lost,
                        reading.from_cut_chunk)


class _RecordsUntilDamage:
    """The records of an MCAP file in order, up to its damage; a chunk cut short gives the
    records it holds whole (uncompressed, zstd or lz4). ``good_bytes``: the file up to the end
    of the last whole record; ``damage``: what stopped the reading."""

    def __init__(self, file: Path, size: int) -> None:
        self.file, self.size = file, size
        self.good_bytes, self.damage = 0, "no footer"
        self.from_cut_chunk = 0  # messages read from the chunk cut short

    def __iter__(self):  # type: ignore[no-untyped-def]
        from mcap.records import Message
        from mcap.stream_reader import StreamReader

        with self.file.open("rb") as source:
            try:
                for record in StreamReader(source, validate_crcs=True,
                                           record_size_limit=self.size).records:
                    yield record
                    self.good_bytes = source.tell()
            except Exception as exc:  # the end of the file, a bad CRC, garbage
                self.damage = type(exc).__name__ + (f": {exc}" if str(exc) else "")
            else:
                return
            source.seek(self.good_bytes)
            tail = _whole_records_of_cut_chunk(source.read())
            self.from_cut_chunk = sum(isinstance(record, Message) for record in tail)
            yield from tail


def _whole_records_of_cut_chunk(tail: bytes) -> list:
    """The whole records inside a chunk record cut short (``tail``: the file from its opcode
    on); [] if ``tail`` is not the start of a chunk."""
    import io
    import struct

    from mcap.records import Opcode
    from mcap.stream_reader import StreamReader

    fixed = 1 + 8 + 8 + 8 + 8 + 4  # opcode, length, start, end, uncompressed size, crc
    if len(tail) < fixed + 4 or tail[0] != Opcode.CHUNK:
        return []
    (name_length,) = struct.unpack_from("<I", tail, fixed)
    begin = fixed + 4 + name_length + 8  # the compression's name, the records' length
    compression, data = tail[fixed + 4:fixed + 4 + name_length], tail[begin:]
    try:
        if compression == b"zstd":
            import zstandard

            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        elif compression == b"lz4":
            import lz4.frame

            data = lz4.frame.LZ4FrameDecompressor().decompress(data)
        elif compression:
            return []
    except Exception:  # a codec that refuses a cut stream: the chunk is lost
        return []
    records = []
    try:
        for record in StreamReader(io.BytesIO(data), skip_magic=True).records:
            records.append(record)
    except Exception:  # the cut: every whole record before it is kept
        pass
    return records


def any_reader(path: str | Path) -> AnyReader:
    """An AnyReader (deserializing; not yet opened) for the bag at ``path``."""
    return AnyReader([readable_path(path)])


def is_ros1_bag(path: str | Path) -> bool:
    """Whether ``path`` is a ROS 1 bag (rosbags tells them by the .bag suffix too)."""
    return Path(path).suffix == ".bag" and not Path(path).is_dir()


def raw_reader(path: str | Path) -> Reader | Reader1:
    """A reader of raw messages (not yet opened) for the bag at ``path``: rosbag2's, or for a
    ROS 1 bag rosbag1's (its messages are ROS 1 bytes, not CDR)."""
    if is_ros1_bag(path):
        return Reader1(Path(path))
    return Reader(readable_path(path))
