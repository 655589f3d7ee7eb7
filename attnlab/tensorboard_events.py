"""TensorBoard event files for scalars, written without TensorFlow (or any other writer).

The format: a TFRecord stream (little-endian u64 length, masked CRC-32C of the length, the
bytes, masked CRC-32C of the bytes) of `tensorflow.Event` protocol buffers. Only the few
fields scalars need are encoded, by hand: Event{wall_time=1: double, step=2: int64,
file_version=3: string, summary=5: Summary{value=1: Value{tag=1: string, simple_value=2:
float}}}. TensorBoard reads these files as it reads its own (tests/test_writers.py checks with
TensorBoard's EventAccumulator).
"""

from __future__ import annotations

import os
import socket
import struct
import time


def _crc32c_table() -> list[int]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    table.append(crc)
  return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
  crc = crc32c(data)
  return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negatives
  out = bytearray()
  while True:
    bits, value = value & 0x7F, value >> 7
    out.append(bits | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited field (wire type 2)."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int, *, scalars: dict[str, float] | None = None,
                 file_version: str | None = None) -> bytes:
  event = _varint(1 << 3 | 1) + struct.pack('<d', wall_time) + _varint(2 << 3) + _varint(step)
  if file_version is not None:
    event += _field(3, file_version.encode())
  if scalars:
    values = b''.join(
        _field(1, _field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack('<f', value))
        for tag, value in scalars.items())
    event += _field(5, values)
  return event


def frame(record: bytes) -> bytes:
  length = struct.pack('<Q', len(record))
  return (length + struct.pack('<I', masked_crc(length)) + record +
          struct.pack('<I', masked_crc(record)))


class EventFileWriter:
  """Appends scalar events to a new `events.out.tfevents.*` file in `logdir`."""

  def __init__(self, logdir: str):
    os.makedirs(logdir, exist_ok=True)
    now = time.time()
    name = f'events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}'
    self.path = os.path.join(logdir, name)
    self._file = open(self.path, 'ab')
    self._file.write(frame(encode_event(now, 0, file_version='brain.Event:2')))

  def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
    self._file.write(frame(encode_event(time.time(), int(step), scalars=scalars)))

  def flush(self) -> None:
    self._file.flush()

  def close(self) -> None:
    self._file.close()
