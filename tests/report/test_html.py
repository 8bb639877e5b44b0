# SPDX-License-Identifier: MIT
"""The HTML report in headless Chromium: it is self-contained (nothing to fetch), its DOM has the
expected tables, SVGs and advice for every device, and a screenshot is not blank and shows the
colours of allocated and free blocks and of the timeline. Exit 77 (skip) without chromium.
CCI_REPORT_SCREENSHOT=path keeps the screenshot."""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ALLOCATED = (0x2B, 0x6C, 0xB0)
FREE = (0xF2, 0xC1, 0x4E)
RESERVED = (0xC5, 0x30, 0x30)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def find_chromium():
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(exe, profile, *args):
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--user-data-dir=" + profile, *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=90, check=True).stdout


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data):
    """8-bit RGB or RGBA, non-interlaced (what Chromium writes): (width, height, channels, rows)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, "unsupported PNG"
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * ch
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(ch, stride):
                line[i] = (line[i] + line[i - ch]) & 0xFF
        elif ftype == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - ch] if i >= ch else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                left = line[i - ch] if i >= ch else 0
                upleft = prev[i - ch] if i >= ch else 0
                line[i] = (line[i] + paeth(left, prev[i], upleft)) & 0xFF
        rows.append(line)
        prev = line
    return width, height, ch, rows


def pixel_counts(width, height, ch, rows):
    """Non-white pixels, and pixels close to each expected colour."""
    targets = {"allocated": ALLOCATED, "free": FREE, "reserved": RESERVED}
    counts = dict.fromkeys(targets, 0)
    nonwhite = 0
    for row in rows:
        for x in range(0, width * ch, ch):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if r < 245 or g < 245 or b < 245:
                nonwhite += 1
                for name, (tr, tg, tb) in targets.items():
                    if abs(r - tr) + abs(g - tg) + abs(b - tb) < 24:
                        counts[name] += 1
    return nonwhite, counts


def check_static(html):
    # The only URL allowed is the SVG namespace name, which no browser fetches.
    urls = [u for u in re.findall(r"https?://[^\s\"'<>]+", html) if u != "http://www.w3.org/2000/svg"]
    check(not urls, f"network references: {urls[:3]}")
    for bad in ["<script", "<link", "@import", "url(", " src="]:
        check(bad not in html, f"not self-contained: {bad}")


def check_dom(dom, ndev):
    all_widths = set()
    for d in range(ndev):
        for ident in [f"device-{d}", f"summary-{d}", f"frag-{d}", f"timeline-{d}", f"segmap-peak-{d}",
                      f"segmap-exit-{d}", f"advice-{d}"]:
            check(f'id="{ident}"' in dom, f"element #{ident} missing")
        table = re.search(rf'<table class="summary" id="summary-{d}">(.*?)</table>', dom, re.S)
        rows = re.findall(r"<tr", table.group(1)) if table else []
        check(len(rows) == 1 + 9 * 3 + 2, f"device {d}: summary has {len(rows)} rows")
        for label in ["Allocated memory", "Non-releasable memory", "Oversize GPU segments"]:
            check(label in (table.group(1) if table else ""), f"device {d}: summary row {label}")
        svg = re.search(rf'<svg[^>]*id="segmap-exit-{d}".*?</svg>', dom, re.S)
        check(svg and '<rect class="allocated"' in svg.group(0), f"device {d}: no allocated block at exit")
        check(svg and '<rect class="free"' in svg.group(0), f"device {d}: no free block at exit")
        # To scale: the map says its scale, each segment has an outline, each block a hover title.
        check(re.search(rf'id="segmap-exit-scale-{d}" data-scale="(linear|log)"', dom),
              f"device {d}: the exit map does not state its scale")
        check(svg and '<rect class="segment"' in svg.group(0), f"device {d}: no segment outline")
        check(svg and re.search(r"<title>allocated, [0-9.]+ [KMG]?i?B \(requested [0-9.]+ [KMG]?i?B\) at 0x",
                                svg.group(0)), f"device {d}: allocated blocks have no size/requested title")
        widths = [float(w) for w in re.findall(r'<rect class="segment" x="[0-9.]+" y="[0-9]+" width="([0-9.]+)"',
                                                svg.group(0) if svg else "")]
        all_widths.update(widths)
        check(f'id="leaks-{d}"' in dom, f"device {d}: no leak-or-cache table")
        check(f'id="holders-off-{d}"' in dom, f"device {d}: no word on call sites being off")
        tl = re.search(rf'<svg[^>]*id="timeline-{d}".*?</svg>', dom, re.S)
        check(tl and 'class="reserved"' in tl.group(0) and 'class="allocated"' in tl.group(0),
              f"device {d}: timeline lines")
        advice = re.search(rf'<ul class="advice" id="advice-{d}">(.*?)</ul>', dom, re.S)
        check(advice and "<li" in advice.group(1), f"device {d}: no advice")
    check(len(all_widths) > 1, f"every segment of every map drawn at one width: {sorted(all_widths)[:3]}")
    check("max_split_size_mb:64" in dom, "the split advice of the misses workload")


# Run in a copy of the report (the report itself has no script): the page's width, every
# configuration token drawn on one line, nothing wider than the page, and no two neighbouring
# blocks (children of the body, of a device section, of the side-by-side tables) overlapping.
LAYOUT_SCRIPT = """<script>(function(){
var out=[], W=document.documentElement.clientWidth;
document.querySelectorAll('p.conf code.tok').forEach(function(e){
  if(e.getClientRects().length!==1) out.push('token cut: '+e.textContent);});
document.querySelectorAll('body *').forEach(function(e){
  var r=e.getBoundingClientRect(); if(r.width>0&&r.right>W+0.5) out.push('past the page: '+e.tagName+
  (e.id?'#'+e.id:'')+' right '+Math.round(r.right)+' > '+W);});
var parents=[document.body].concat([].slice.call(document.querySelectorAll('section.device, .tables')));
parents.forEach(function(p){var k=[].slice.call(p.children).filter(function(e){return e.tagName!=='SCRIPT'&&
  e.tagName!=='PRE';}).map(function(e){return [e,e.getBoundingClientRect()];}).filter(function(x){
  return x[1].width>0&&x[1].height>0;});
  for(var i=0;i<k.length;i++)for(var j=i+1;j<k.length;j++){var a=k[i][1],b=k[j][1];
    if(a.left<b.right-0.5&&b.left<a.right-0.5&&a.top<b.bottom-0.5&&b.top<a.bottom-0.5)
      out.push('overlap: '+k[i][0].tagName+(k[i][0].id?'#'+k[i][0].id:'')+' and '+k[j][0].tagName+
               (k[j][0].id?'#'+k[j][0].id:''));}});
var tok=document.querySelectorAll('p.conf code.tok').length;
var pre=document.createElement('pre'); pre.id='layout-check';
pre.textContent=JSON.stringify({width:W,tokens:tok,problems:out.slice(0,20)});
document.body.appendChild(pre);})();</script>"""


def check_layout(exe, tmp, html, width):
    """The report at a window `width` px wide: no configuration token cut, nothing overlapping."""
    path = Path(tmp, f"layout-{width}.html")
    path.write_text(html.replace("</body>", LAYOUT_SCRIPT + "</body>"), encoding="utf-8")
    dom = chromium(exe, tempfile.mkdtemp(dir=tmp), f"--window-size={width},1000", "--dump-dom",
                   path.resolve().as_uri()).decode("utf-8", "replace")
    m = re.search(r'<pre id="layout-check">(.*?)</pre>', dom, re.S)
    check(m, f"{width} px: the layout check did not run")
    if not m:
        return dom
    import html as htmllib
    import json
    got = json.loads(htmllib.unescape(m.group(1)))
    print(f"{width} px: page {got['width']} px wide, {got['tokens']} configuration tokens, "
          f"{len(got['problems'])} problem(s)")
    check(got["width"] <= width and got["width"] > width - 40, f"{width} px: the page is {got['width']} px wide")
    check(got["tokens"] >= 3 * 7, f"{width} px: only {got['tokens']} configuration tokens")
    check(not got["problems"], f"{width} px: {got['problems']}")
    return dom


def main():
    exe = find_chromium()
    if not exe:
        print("chromium not found: skipped")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        html_path = Path(tmp, "report.html")
        subprocess.run([sys.argv[1], "html", str(html_path)], check=True)
        html = html_path.read_text(encoding="utf-8")
        check_static(html)
        url = html_path.resolve().as_uri()
        dom = check_layout(exe, tmp, html, 1400)
        check_dom(dom, 3)
        check_layout(exe, tmp, html, 800)
        png = Path(tmp, "shot.png")
        chromium(exe, tempfile.mkdtemp(dir=tmp), f"--screenshot={png}", "--window-size=1200,1600", url)
        data = png.read_bytes()
        keep = os.environ.get("CCI_REPORT_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(data)
        width, height, ch, rows = decode_png(data)
        check((width, height) == (1200, 1600), f"screenshot is {width}x{height}")
        nonwhite, counts = pixel_counts(width, height, ch, rows)
        total = width * height
        print(f"screenshot {width}x{height}: {100 * nonwhite / total:.1f} % non-white, colours {counts}")
        check(nonwhite > total * 0.03, "screenshot looks blank")
        check(counts["allocated"] > 2000, "few allocated-block pixels")
        check(counts["free"] > 2000, "few free-block pixels")
        check(counts["reserved"] > 300, "no reserved line in the timeline")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
