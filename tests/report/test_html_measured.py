# SPDX-License-Identifier: MIT
"""The measured sections of the HTML report in headless Chromium: with device 0's
what-ifs and call sites filled (report_fixture html-measured), the rendered DOM has the what-if
table with its rows in rank order and the percentages the printer computes against the current
row, the holders tables with their frames (markup in a frame escaped, not rendered), the call
site in the segment map's hover titles, and a screenshot that is a real, non-blank PNG. Exit 77
(skip) without chromium. CCI_REPORT_SCREENSHOT=path keeps the screenshot."""
import html as htmllib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_html import check, check_static, chromium, decode_png, failures, find_chromium, pixel_counts  # noqa: E402

# What the fixture filled: (configuration, peak MiB, device allocs). The "vs current" column is
# the printer's own arithmetic against the current row (96 MiB).
WHATIF_ROWS = [
    ("expandable_segments:True", "72.0", "-25.0", "9"),
    ("max_split_size_mb:64", "80.0", "-16.7", "14"),
    ("(defaults)", "96.0", "current", "17"),
    ("garbage_collection_threshold:0.8", "104.0", "+8.3", "21"),
]
SITE_A = ["model.py:17 in make_buffer", "train.py:42 in <lambda>", "cci_fixture_alloc+0x1c (libfixture.so+0x1234)"]
SITE_B = ["data.py:7 in load_batch", "train.py:30 in step"]


def cells(row_html):
    """The text of each cell of one table row, tags stripped and entities decoded."""
    return [htmllib.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)]


def table(dom, ident):
    m = re.search(rf'<table class="[a-z]+" id="{ident}">(.*?)</table>', dom, re.S)
    check(m, f"table #{ident} missing")
    return re.findall(r"<tr[^>]*>.*?</tr>", m.group(1), re.S)[1:] if m else []  # minus the header


def frames_of(row_html):
    m = re.search(r'<code class="frames">(.*?)</code>', row_html, re.S)
    return [htmllib.unescape(f) for f in re.split(r"<br>", m.group(1))] if m else []


def check_whatif(dom):
    rows = table(dom, "whatif-0")
    got = [tuple(cells(r)[:4]) for r in rows]
    # The tuner recommends expandable segments: lowest peak, and fewer calls than the current setting.
    want = [(c + (" (this run)" if pct == "current" else "") + (" (recommended)" if i == 0 else ""), mib, pct, allocs)
            for i, (c, mib, pct, allocs) in enumerate(WHATIF_ROWS)]
    check(got == want, f"what-if rows: {got}")
    check("rule: fewest OOMs" in dom, "the tuner's rule is not stated under the what-if table")
    current = [r for r in rows if 'class="current"' in r]
    check(len(current) == 1 and "(defaults)" in current[0], "the current row is not marked once")
    check("1234 allocation events replayed under 4 of 4 configurations" in dom, "what-if summary line")
    for d in (1, 2):
        check(f'id="whatif-{d}"' not in dom, f"device {d} has no what-ifs, yet shows a table")


def check_holders(dom):
    peak = table(dom, "holders-peak-0")
    check([cells(r)[:3] for r in peak] == [["1", "48.0 MiB", "3"], ["2", "8.0 MiB", "2"]],
          f"holders at peak: {[cells(r)[:3] for r in peak]}")
    check([frames_of(r) for r in peak] == [SITE_A, SITE_B], f"peak frames: {[frames_of(r) for r in peak]}")
    # A frame's "<lambda>" is text: the browser built no element from it.
    check("<lambda>" not in dom and "&lt;lambda&gt;" in dom, "the <lambda> frame is not escaped")
    # At exit every live block was given to a site: the table's blocks add up to the leak table's
    # "still allocated" count, largest site first, each with its frames and age.
    now = table(dom, "leaks-by-site-0")
    check(sorted(frames_of(r)[0] for r in now) == sorted([SITE_A[0], SITE_B[0]]),
          f"sites at exit: {[frames_of(r) for r in now]}")
    held = re.search(r'id="leaks-0">.*?Still allocated by the program</td><td>[^<]*</td><td>([0-9]+) blocks', dom, re.S)
    blocks = [int(cells(r)[2]) for r in now]
    check(held and sum(blocks) == int(held.group(1)),
          f"sites hold {blocks} blocks, the leak table {held.group(1) if held else '?'}")
    mib = [float(cells(r)[1].split()[0]) for r in now if cells(r)[1].endswith(" MiB")]
    check(len(mib) == 2 and mib[0] >= mib[1], f"sites at exit not largest first: {mib}")
    check(all(re.match(r"oldest is allocation #[0-9]+, [0-9.]+ s old$", cells(r)[3]) for r in now),
          "sites at exit have no age")
    svg = re.search(r'<svg[^>]*id="segmap-exit-0".*?</svg>', dom, re.S)
    for frame in (SITE_A[0], SITE_B[0]):
        check(svg and f"allocated at {frame}</title>" in svg.group(0), f"exit map: no block titled '{frame}'")
    check('id="holders-off-0"' not in dom, "device 0 has call sites, yet says they were off")
    for d in (1, 2):
        check(f'id="holders-off-{d}"' in dom, f"device {d}: no word on call sites being off")


def main():
    exe = find_chromium()
    if not exe:
        print("chromium not found: skipped")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        html_path = Path(tmp, "report.html")
        subprocess.run([sys.argv[1], "html-measured", str(html_path)], check=True)
        check_static(html_path.read_text(encoding="utf-8"))
        url = html_path.resolve().as_uri()
        dom = chromium(exe, tempfile.mkdtemp(dir=tmp), "--dump-dom", url).decode("utf-8", "replace")
        check_whatif(dom)
        check_holders(dom)
        png = Path(tmp, "shot.png")
        chromium(exe, tempfile.mkdtemp(dir=tmp), f"--screenshot={png}", "--window-size=1200,1600", url)
        data = png.read_bytes()
        keep = os.environ.get("CCI_REPORT_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(data)
        check(len(data) > 10_000, f"screenshot is only {len(data)} bytes")
        width, height, ch, rows = decode_png(data)
        check((width, height) == (1200, 1600), f"screenshot is {width}x{height}")
        nonwhite, counts = pixel_counts(width, height, ch, rows)
        total = width * height
        print(f"screenshot {width}x{height}, {len(data)} bytes: {100 * nonwhite / total:.1f} % non-white, "
              f"colours {counts}")
        check(nonwhite > total * 0.03, "screenshot looks blank")
        check(counts["allocated"] > 2000, "few allocated-block pixels")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
