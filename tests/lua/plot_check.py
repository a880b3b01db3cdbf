"""Checks for plot_spec.lua, with Python's standard library only.

    plot_check.py xml FILE   parse FILE as XML (fails on any error); print a
                             JSON list of the elements with a class or data-*
                             attribute: {"tag": local name, "attrs": {...}}
    plot_check.py png FILE   decode a PNG (8-bit RGB or RGBA, not interlaced);
                             print its width, height and number of colours
"""
import json
import struct
import sys
import xml.etree.ElementTree as ET
import zlib


def xml_elements(path):
    out = []
    for el in ET.parse(path).iter():
        tag = el.tag.split("}")[-1]
        if "class" in el.attrib or any(k.startswith("data-") for k in el.attrib):
            out.append({"tag": tag, "attrs": dict(el.attrib)})
    print(json.dumps(out))


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def unfilter(data, width, height, bpp):
    stride, rows, prev, i = width * bpp, [], bytearray(width * bpp), 0
    for _ in range(height):
        kind, line = data[i], bytearray(data[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + prev[x]) & 255
            elif kind == 3:
                line[x] = (line[x] + ((a + prev[x]) >> 1)) & 255
            elif kind == 4:
                c = prev[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + paeth(a, prev[x], c)) & 255
        rows.append(bytes(line))
        prev = line
    return rows


def png_colours(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        sys.exit("unsupported PNG layout")
    bpp = 3 if colour == 2 else 4
    rows = unfilter(zlib.decompress(idat), width, height, bpp)
    colours = set()
    for row in rows:
        for x in range(0, len(row), bpp * 4):  # every fourth pixel is plenty
            colours.add(row[x:x + 3])
    print(width, height, len(colours))


if __name__ == "__main__":
    {"xml": xml_elements, "png": png_colours}[sys.argv[1]](sys.argv[2])
