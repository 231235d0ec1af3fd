"""Caption overlays: a caption band drawn onto an RGB frame, and the text of an RViz marker.

Pure numpy + Pillow (no rclpy), so the visualization node, bag tools and benchmark plots draw
the same thing. The two parts of a live caption must never be confused by a viewer:

- the *confirmed* text (the verifier's own output) is drawn solid white;
- the *unconfirmed* draft tail (a guess that may still be rewritten) is drawn amber with a dashed
  underline, so it reads as tentative even without colour vision.

The band sits at the bottom of the frame and only covers the bottom rows: every row above it is
returned byte-identical to the input, and the band never takes more than MAX_BAND_FRACTION of
the frame height (text that does not fit is cut at a word with "...").
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from crossspec_ros.run_record import REASON_WORDS
from crossspec_ros.run_record import STATUS_NAMES as STATUS_NAMES_BY_CODE
from crossspec_ros.text import single_spaced

# Index = the STATUS_* code of msg/Caption.msg, so nodes can pass msg.status as is.
STATUS_NAMES: tuple[str, ...] = tuple(STATUS_NAMES_BY_CODE[code]
                                      for code in sorted(STATUS_NAMES_BY_CODE))
# Index = the REASON_* code of msg/Caption.msg, in the words `crossspec drive` prints
UNVERIFIED_REASON_NAMES: tuple[str, ...] = tuple(REASON_WORDS[code]
                                                 for code in sorted(REASON_WORDS))

# The band never covers more than this share of the frame height: the scene stays visible.
MAX_BAND_FRACTION = 0.45

CONFIRMED_RGB = (255, 255, 255)
UNCONFIRMED_RGB = (255, 200, 60)
HEADER_RGB = (205, 205, 205)
PLACEHOLDER_RGB = (150, 150, 150)
# Tag colours: amber = only a guess so far, blue = being confirmed, green = done, red = the
# verifier never saw this window (no RGB), grey = a status this module does not know.
STATUS_RGB: dict[str, tuple[int, int, int]] = {
    "DRAFT": (200, 120, 20),
    "PARTIAL": (40, 110, 210),
    "FINAL": (30, 145, 65),
    "UNVERIFIED": (185, 45, 45),
}
_UNKNOWN_STATUS_RGB = (110, 110, 110)
_BAND_DARKEN = 0.3  # band pixels keep 30 % of the scene: dark enough for white text

# Short labels for the latency fields of msg/Caption.msg, in the order they happen.
_LATENCY_LABELS: dict[str, str] = {
    "draft_first_token_ms": "draft",
    "draft_done_ms": "draft done",
    "confirmed_first_ms": "1st conf",
    "confirmed_done_ms": "final",
}
_RATIO_KEYS = ("acceptance",)  # shown as a percentage, not in ms

_ELLIPSIS = "..."  # ASCII: Pillow's default font may lack U+2026

# A piece of caption text and whether it is the unconfirmed tail.
_Segment = tuple[str, bool]


def status_name(status: int | str) -> str:
    """The display name of a caption status: a Caption.msg STATUS_* code or a name.

    Unknown values are shown, not rejected: a viewer should never crash on a new status.
    """
    if isinstance(status, (int, np.integer)) and not isinstance(status, bool):
        code = int(status)
        return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"STATUS {code}"
    return str(status).strip().upper() or "?"


def font_size_for(width: int, height: int) -> int:
    """Caption font size in pixels for a frame: ~40 characters' height across a 4:3 frame.

    9 px at 160x120 (the smallest readable size), 36 px at 1440x1080.
    """
    return int(min(44, max(9, round(min(width, height * 4 / 3) / 40))))


# Preferred caption faces, found by Pillow on the system's font path (DejaVu ships with most
# Linux installs): wide word spaces and clear small sizes. Pillow's own default is the fallback.
_FONT_FILES = ("DejaVuSans.ttf", "LiberationSans-Regular.ttf", "Arial.ttf")


@lru_cache(maxsize=32)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    for name in _FONT_FILES:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    # Pillow >= 10.1 ships a scalable default font; without FreeType this is a fixed bitmap font.
    return ImageFont.load_default(size=size)


def _word_gap(font: ImageFont.FreeTypeFont | ImageFont.ImageFont, size: int) -> float:
    """Space between words: at least a third of the font size, so small captions never read
    as one glued word (a 9 px font's own space can be 2 px)."""
    return max(font.getlength(" "), size / 3)


def _line_height(font: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> int:
    if isinstance(font, ImageFont.FreeTypeFont):
        ascent, descent = font.getmetrics()
        return ascent + descent
    return int(font.getbbox("Ag")[3]) + 1


def _ascent(font: ImageFont.FreeTypeFont | ImageFont.ImageFont) -> int:
    if isinstance(font, ImageFont.FreeTypeFont):
        return font.getmetrics()[0]
    return int(font.getbbox("A")[3])


def _format_latencies(latency_ms: Mapping[str, object] | None) -> list[str]:
    """'draft 45 ms'-style items: known Caption.msg fields first, then any others as given."""
    if not latency_ms:
        return []
    keys = [k for k in _LATENCY_LABELS if k in latency_ms]
    keys += [k for k in latency_ms if k not in _LATENCY_LABELS]
    items = []
    for key in keys:
        value = latency_ms[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            continue
        value = float(value)
        if not math.isfinite(value):  # NaN = not there yet (e.g. confirmed_done_ms before FINAL)
            continue
        if key in _RATIO_KEYS:
            items.append(f"acc {value * 100:.0f}%")
            continue
        label = _LATENCY_LABELS.get(key, key.removesuffix("_ms").replace("_", " "))
        number = f"{value:.1f}" if abs(value) < 10 else f"{value:.0f}"
        items.append(f"{label} {number} ms")
    return items


def _styled_words(confirmed: str, unconfirmed: str) -> list[list[_Segment]]:
    """Words of confirmed + unconfirmed, each a list of styled segments.

    Caption.msg shows confirmed_text directly followed by unconfirmed_text, and the boundary may
    fall inside a word (tokens are sub-words), so one word can carry both styles.
    """
    text = confirmed + unconfirmed
    boundary = len(confirmed)
    words = []
    for match in re.finditer(r"\S+", text):
        start, end = match.span()
        segments: list[_Segment] = []
        if start < boundary:
            segments.append((text[start:min(end, boundary)], False))
        if end > boundary:
            segments.append((text[max(start, boundary):end], True))
        words.append(segments)
    return words


def _width(font: ImageFont.FreeTypeFont | ImageFont.ImageFont, segments: list[_Segment]) -> float:
    return sum(font.getlength(text) for text, _ in segments)


def _split_long_word(font, word: list[_Segment], avail: float) -> list[list[_Segment]]:
    """Break a word wider than the line into line-sized pieces (URLs, glued tokens)."""
    pieces: list[list[_Segment]] = []
    current: list[_Segment] = []
    used = 0.0
    for text, unconfirmed in word:
        for char in text:
            w = font.getlength(char)
            if current and used + w > avail:
                pieces.append(current)
                current, used = [], 0.0
            if current and current[-1][1] == unconfirmed:
                current[-1] = (current[-1][0] + char, unconfirmed)
            else:
                current.append((char, unconfirmed))
            used += w
    if current:
        pieces.append(current)
    return pieces


def _wrap(font, words: list[list[_Segment]], avail: float, gap: float
          ) -> list[list[list[_Segment]]]:
    """Greedy word wrap: lines of words, each word a list of segments."""
    pieces = [piece for word in words
              for piece in ([word] if _width(font, word) <= avail
                            else _split_long_word(font, word, avail))]
    return _greedy_lines(pieces, lambda piece: _width(font, piece), gap, avail)


def _greedy_lines(items: list, width_of, gap: float, avail: float) -> list[list]:
    """Fill lines of at most ``avail`` with ``items`` in order, ``gap`` between neighbours."""
    lines: list[list] = []
    line: list = []
    used = 0.0
    for item in items:
        w = width_of(item)
        if line and used + gap + w > avail:
            lines.append(line)
            line, used = [], 0.0
        used += (gap if line else 0.0) + w
        line.append(item)
    if line:
        lines.append(line)
    return lines


def _ellipsize(font, line: list[list[_Segment]], avail: float, space: float
              ) -> list[list[_Segment]]:
    """The line with "..." appended, dropping words from its end until it fits."""
    line = [list(word) for word in line]
    while line:
        style = line[-1][-1][1]
        candidate = [*line[:-1], [*line[-1], (_ELLIPSIS, style)]]
        widths = [_width(font, word) for word in candidate]
        if sum(widths) + space * (len(candidate) - 1) <= avail:
            return candidate
        line.pop()
    return [[(_ELLIPSIS, False)]]


def annotate_frame(
    rgb: np.ndarray,
    confirmed: str,
    unconfirmed: str,
    status: int | str,
    window_id: int,
    latency_ms: Mapping[str, object] | None = None,
    lossy: str = "",
) -> np.ndarray:
    """A copy of `rgb` with a caption band drawn over its bottom rows.

    rgb: H x W x 3 uint8 (any size from a thumbnail up; the font scales with the frame).
    confirmed / unconfirmed: Caption.msg confirmed_text / unconfirmed_text.
    status: a Caption.msg STATUS_* code or its name ("DRAFT", "PARTIAL", "FINAL", "UNVERIFIED").
    latency_ms: e.g. {"draft_first_token_ms": 45.0, "confirmed_first_ms": 320.0,
        "acceptance": 0.4}; NaN/None values are left out (not measured yet).

    Rows above the band are byte-identical to the input; the band is at most
    MAX_BAND_FRACTION of the height. Text that does not fit is cut at a word with "...".
    """
    _check_rgb(rgb)
    height, width = rgb.shape[:2]
    out = rgb.copy()
    max_band = int(height * MAX_BAND_FRACTION)
    if width == 0 or max_band == 0:
        return out

    style = _band_style(width, height)
    name = status_name(status)
    header_lines = _header_lines(style, name, window_id, latency_ms, lossy)
    caption_lines = _caption_lines(style, confirmed, unconfirmed)
    placeholder = not caption_lines
    if placeholder:
        caption_lines = [[[("(no caption yet)", False)]]]
    n_header, caption_lines, band_h = _fit_band(style, max_band, header_lines, caption_lines)
    top = height - band_h

    # Darken the band in numpy (cheap at 1440x1080), then draw text on just that strip.
    strip = (out[top:].astype(np.uint16) * int(_BAND_DARKEN * 256) >> 8).astype(np.uint8)
    image = Image.fromarray(strip, mode="RGB")
    draw = ImageDraw.Draw(image)
    y = _draw_header(draw, style, name, header_lines[:n_header], style.pad)
    _draw_caption(draw, style, caption_lines, placeholder, y)

    out[top:] = np.asarray(image)
    return out


def _check_rgb(rgb: object) -> None:
    """Refuse anything but an H x W x 3 uint8 array, naming what was given."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 \
            or rgb.shape[2] != 3:
        shape = getattr(rgb, "shape", None)
        dtype = getattr(rgb, "dtype", type(rgb).__name__)
        raise ValueError(f"annotate_frame needs an H x W x 3 uint8 RGB array, got {shape} {dtype}")


@dataclass(frozen=True)
class _BandStyle:
    """Fonts and spacings of a caption band, all scaled from the frame's font size."""

    size: int
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont    # caption text
    small: ImageFont.FreeTypeFont | ImageFont.ImageFont   # header: status tag, id, latencies
    pad: int
    avail: float  # line width for text, inside the padding
    line_h: int
    small_h: int
    tag_pad: int
    gap: float    # between header items
    space: float  # between caption words


def _band_style(width: int, height: int) -> _BandStyle:
    size = font_size_for(width, height)
    font = _font(size)
    small = _font(max(8, round(size * 0.75)))
    pad = max(2, size // 4)
    return _BandStyle(
        size=size, font=font, small=small, pad=pad, avail=max(1.0, width - 2.0 * pad),
        line_h=_line_height(font) + max(1, size // 8),
        small_h=_line_height(small) + max(1, size // 8),
        tag_pad=max(2, size // 6), gap=small.getlength("  "), space=_word_gap(font, size))


def _header_lines(style: _BandStyle, name: str, window_id: int,
                  latency_ms: Mapping[str, object] | None, lossy: str) -> list[list[str]]:
    """The header items (status tag first), wrapped to the band's width."""
    tag = f" {name} "
    # the tag is measured with its pill padding so the header wraps where it is drawn
    # a caption made under a relaxed acceptance rule (Caption.acceptance_rule) says so first
    header_items = [tag, *([f"LOSSY {lossy}"] if lossy else []), f"#{int(window_id)}",
                    *_format_latencies(latency_ms)]
    return _greedy_lines(header_items, style.small.getlength, style.gap,
                         style.avail - 2 * style.tag_pad)


def _caption_lines(style: _BandStyle, confirmed: str, unconfirmed: str
                   ) -> list[list[list[_Segment]]]:
    """The caption's styled words wrapped to the band's width ([] for no text)."""
    words = _styled_words(confirmed or "", unconfirmed or "")
    return _wrap(style.font, words, style.avail, style.space) if words else []


def _fit_band(style: _BandStyle, max_band: int, header_lines: list[list[str]],
              caption_lines: list[list[list[_Segment]]]
              ) -> tuple[int, list[list[list[_Segment]]], int]:
    """(header lines shown, caption lines shown, band height) within ``max_band`` rows."""
    # Fit: header lines first (status is the most important), then as many caption lines as fit.
    room = max_band - 2 * style.pad
    n_header = max(1, min(len(header_lines), room // max(1, style.small_h)))
    room -= n_header * style.small_h
    n_caption = max(0, min(len(caption_lines), room // max(1, style.line_h)))
    if 0 < n_caption < len(caption_lines):
        caption_lines = [*caption_lines[:n_caption - 1],
                         _ellipsize(style.font, caption_lines[n_caption - 1], style.avail,
                                    style.space)]
    caption_lines = caption_lines[:n_caption]
    band_h = min(max_band, 2 * style.pad + n_header * style.small_h + n_caption * style.line_h)
    return n_header, caption_lines, band_h


def _draw_header(draw: ImageDraw.ImageDraw, style: _BandStyle, name: str,
                 lines: list[list[str]], y: int) -> int:
    """Draw the header lines from row ``y``; returns the row below them."""
    small, gap, tag_pad = style.small, style.gap, style.tag_pad
    for i, items in enumerate(lines):
        x = float(style.pad)
        for j, item in enumerate(items):
            if i == 0 and j == 0:  # the status tag, drawn as a coloured pill
                colour = STATUS_RGB.get(name, _UNKNOWN_STATUS_RGB)
                w = small.getlength(item)
                draw.rectangle([x, y, x + w + 2 * tag_pad, y + style.small_h - 1], fill=colour)
                draw.text((x + tag_pad, y), item, font=small, fill=(255, 255, 255))
                x += w + 2 * tag_pad + gap
            else:
                draw.text((x, y), item, font=small, fill=HEADER_RGB)
                x += small.getlength(item) + gap
        y += style.small_h
    return y


def _draw_caption(draw: ImageDraw.ImageDraw, style: _BandStyle,
                  lines: list[list[list[_Segment]]], placeholder: bool, y: int) -> None:
    """Draw the caption lines from row ``y``: confirmed text solid, the tail amber and
    underlined, the placeholder grey."""
    font = style.font
    underline = max(1, style.size // 14)
    baseline_gap = max(1, style.size // 10)
    ascent = _ascent(font)
    for line in lines:
        x = float(style.pad)
        for word in line:
            for text, is_tail in word:
                w = font.getlength(text)
                if placeholder:
                    colour = PLACEHOLDER_RGB
                else:
                    colour = UNCONFIRMED_RGB if is_tail else CONFIRMED_RGB
                draw.text((x, y), text, font=font, fill=colour)
                if is_tail:  # dashed underline: "not confirmed yet" without relying on colour
                    uy = y + ascent + baseline_gap
                    dash = 3 * underline
                    for dx in range(0, max(1, int(w)), 2 * dash):
                        draw.line([(x + dx, uy), (min(x + dx + dash, x + w), uy)],
                                  fill=colour, width=underline)
                x += w
            x += style.space
        y += style.line_h


def marker_text(confirmed: str, unconfirmed: str, status: int | str, width: int = 48,
                lossy: str = "") -> str:
    """Text for an RViz TEXT_VIEW_FACING marker: "[STATUS] confirmed [unconfirmed tail]"
    ("[STATUS, LOSSY rule]" for a caption made under a relaxed acceptance rule ``lossy``).

    RViz draws one colour per marker, so brackets mark the unconfirmed tail; lines are wrapped
    at `width` characters because RViz does not wrap.
    """
    raw_confirmed, raw_tail = confirmed or "", unconfirmed or ""
    confirmed = single_spaced(raw_confirmed)
    tail = single_spaced(raw_tail)
    # keep a separating space outside the bracket ("a car [is turning]"), none inside a word
    # ("a car is turn[ing left]")
    at_word_break = raw_confirmed[-1:].isspace() or raw_tail[:1].isspace()
    lead = " " if at_word_break and confirmed else ""
    body = confirmed + (f"{lead}[{tail}]" if tail else "")
    mark = f", LOSSY {lossy}" if lossy else ""
    text = f"[{status_name(status)}{mark}] {body}".rstrip()
    return "\n".join(textwrap.wrap(text, width=max(8, width), break_long_words=True)) or text
