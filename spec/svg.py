"""A small SVG writer for the specification's two kinds of diagram: stage lanes and sequence
diagrams. Plain SVG 1.1 text (boxes, lines, text), deterministic, so the committed files can be
compared byte for byte with a fresh render; it renders in any browser, on any forge and in any
Markdown viewer, unlike Mermaid source. No dependency: a layout library (graphviz) would add a
system package for two fixed layouts that a few lines compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

FONT = 'font-family="Helvetica, Arial, sans-serif" font-size="13"'
CHAR_W = 7.2  # average glyph width at 13 px, for box sizing
LINE_H = 17


def _text_width(text: str) -> float:
    return len(text) * CHAR_W


def _head(width: float, height: float, title: str) -> list[str]:
    return [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}"'
        f' viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="arrow" markerWidth="10" markerHeight="7" refX="9" refY="3.5"'
        ' orient="auto"><polygon points="0 0, 10 3.5, 0 7" fill="#333"/></marker></defs>',
        f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
    ]


def lanes_svg(title: str, lanes: Sequence[tuple[str, Sequence[str]]], highlight: str) -> str:
    """One row of boxes per lane, joined by arrows; boxes whose label starts with
    ``highlight`` are drawn rounded and shaded (the target forward pass)."""
    pad, gap, box_h, label_w = 10.0, 28.0, 34.0, 130.0
    widths = [[_text_width(s) + 2 * pad for s in stages] for _, stages in lanes]
    width = label_w + max(sum(w) + gap * (len(w) - 1) for w in widths) + 2 * pad
    height = len(lanes) * (box_h + 30) + 20
    out = _head(width, height, title)
    for row, ((name, stages), ws) in enumerate(zip(lanes, widths, strict=True)):
        y = 20 + row * (box_h + 30)
        out.append(
            f'<text x="{pad:.0f}" y="{y + box_h / 2 + 5:.0f}" {FONT} font-weight="bold">'
            f"{escape(name)}</text>"
        )
        x = label_w
        for i, (stage, w) in enumerate(zip(stages, ws, strict=True)):
            special = stage.startswith(highlight)
            fill, rx = ("#fde9c4", 16) if special else ("#e8f0fb", 3)
            out.append(
                f'<rect x="{x:.1f}" y="{y:.0f}" width="{w:.1f}" height="{box_h:.0f}" rx="{rx}"'
                f' fill="{fill}" stroke="#333"/>'
            )
            out.append(
                f'<text x="{x + w / 2:.1f}" y="{y + box_h / 2 + 5:.0f}" text-anchor="middle"'
                f" {FONT}>{escape(stage)}</text>"
            )
            if i + 1 < len(stages):
                out.append(
                    f'<line x1="{x + w:.1f}" y1="{y + box_h / 2:.0f}" x2="{x + w + gap - 2:.1f}"'
                    f' y2="{y + box_h / 2:.0f}" stroke="#333" marker-end="url(#arrow)"/>'
                )
            x += w + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class SeqItem:
    """One line of a sequence diagram: a message between the two participants, a note over
    one of them, or a divider over both."""

    kind: str  # "msg", "note", "divider"
    text: str
    src: str = ""  # msg: sender key; note: the participant key
    dst: str = ""  # msg: receiver key


def sequence_svg(
    title: str, participants: Sequence[tuple[str, str]], items: Sequence[SeqItem]
) -> str:
    """Two (or more) lifelines, left to right, and ``items`` top to bottom. Lines of a note or
    message are separated by newlines in its text."""
    col_w, margin, top = 380.0, 20.0, 60.0
    xs = {key: margin + col_w / 2 + i * col_w for i, (key, _) in enumerate(participants)}
    y = top
    body: list[str] = []
    for item in items:
        lines = item.text.split("\n")
        if item.kind == "divider":
            body.append(
                f'<rect x="{margin:.0f}" y="{y:.0f}" width="{col_w * len(participants):.0f}"'
                f' height="{LINE_H + 6}" fill="#eeeeee" stroke="#999"/>'
            )
            body.append(
                f'<text x="{margin + col_w * len(participants) / 2:.0f}" y="{y + LINE_H:.0f}"'
                f' text-anchor="middle" {FONT} font-style="italic">{escape(item.text)}</text>'
            )
            y += LINE_H + 16
        elif item.kind == "note":
            w = max(_text_width(line) for line in lines) + 16
            h = LINE_H * len(lines) + 8
            total = col_w * len(participants)
            x = min(max(xs[item.src] - w / 2, margin), margin + total - w)
            body.append(
                f'<rect x="{x:.1f}" y="{y:.0f}" width="{w:.1f}" height="{h:.0f}" fill="#fff8c5"'
                ' stroke="#b59f3b"/>'
            )
            for i, line in enumerate(lines):
                body.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + 4 + LINE_H * (i + 1) - 4:.0f}"'
                    f' text-anchor="middle" {FONT}>{escape(line)}</text>'
                )
            y += h + 12
        else:
            x1, x2 = xs[item.src], xs[item.dst]
            for i, line in enumerate(lines):
                body.append(
                    f'<text x="{(x1 + x2) / 2:.1f}" y="{y + LINE_H * (i + 1) - 4:.0f}"'
                    f' text-anchor="middle" {FONT}>{escape(line)}</text>'
                )
            y += LINE_H * len(lines) + 2
            body.append(
                f'<line x1="{x1:.1f}" y1="{y:.0f}" x2="{x2 - (8 if x2 > x1 else -8):.1f}"'
                f' y2="{y:.0f}" stroke="#333" marker-end="url(#arrow)"/>'
            )
            y += 14
    height = y + 20
    width = 2 * margin + col_w * len(participants)
    out = _head(width, height, title)
    for key, name in participants:
        x = xs[key]
        out.append(
            f'<rect x="{x - 150:.0f}" y="14" width="300" height="30" fill="#e8f0fb" stroke="#333"/>'
        )
        out.append(
            f'<text x="{x:.0f}" y="34" text-anchor="middle" {FONT} font-weight="bold">'
            f"{escape(name)}</text>"
        )
        out.append(
            f'<line x1="{x:.0f}" y1="44" x2="{x:.0f}" y2="{height - 10:.0f}" stroke="#888"'
            ' stroke-dasharray="4 4"/>'
        )
    out.extend(body)
    out.append("</svg>")
    return "\n".join(out) + "\n"
