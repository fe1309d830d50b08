"""Optional CI step: the --html reports in a real headless browser.

Generates a compare report and an optimize range report with the CLI, then for each:
  - checks the file is self-contained (no http:// or https://, no <script>, no external src);
  - loads it in headless Chromium with the network disabled and fails on any console message
    (the page has no script, so any message is an error: a blocked fetch, a parse error);
  - checks the DOM Chromium built holds one <svg> per chart of the file;
  - takes a full-page screenshot and checks that it shows charts (coloured pixels, not a blank page).

Installs nothing: give the browser with --chromium or $CHROMIUM (default: chromium, chromium-browser or
google-chrome on PATH; on Debian/Ubuntu `apt-get install -y chromium`). matplotlib must be installed
(paraplan[plot] or [dev]). Exit 0 when every check passes, 1 on a failed check, 2 when the browser is
missing.

    python .ci/browser_check.py                       # screenshots into a temporary folder
    python .ci/browser_check.py --out build/browser   # ... into build/browser
    python .ci/browser_check.py --save-examples       # also refresh examples/report_*.png/.html
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = {
    "compare": ["compare", "--model", "llama2-70b", "--hardware", "a100-80g:256,rtx4090:2048"],
    "optimize": ["optimize", "--model", "llama2-70b", "--gpus", "256..1024", "--hardware", "h100-sxm", "--top", "3",
                 "--tokens", "2e12"],
}  # fmt: skip
WIDTH, HEIGHT = 1400, 6000  # the screenshot is cropped to the page's content afterwards
CONSOLE = re.compile(r"CONSOLE|Uncaught|Failed to load resource|net::ERR_")
SELF_TEST = "<!DOCTYPE html><html><body><script>console.error('paraplan-self-test')</script></body></html>"


def browser(given: str | None) -> str | None:
    for name in (given, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    return None


def run_browser(chromium: str, page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
        "--hide-scrollbars", "--force-device-scale-factor=1", *extra, page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def crop_and_measure(png: Path) -> float:
    """Crop the screenshot below the page's content, store it with a 256-colour palette (a
    quarter of the size, text still sharp) and return the share of coloured pixels (charts)."""
    from PIL import Image, ImageOps  # Pillow: a dependency of matplotlib

    image = Image.open(png).convert("RGB")
    box = ImageOps.invert(image).point(lambda v: 255 if v > 8 else 0).getbbox()
    if box is not None:
        image = image.crop((0, 0, image.width, min(image.height, box[3] + 40)))
    saturation = image.convert("HSV").getchannel("S")
    coloured = sum(saturation.histogram()[64:]) / (image.width * image.height)
    image.quantize(colors=256).save(png, optimize=True)
    return coloured


def check_report(name: str, chromium: str, out: Path, work: Path) -> list[str]:
    problems: list[str] = []
    html_path = out / f"report_{name}.html"
    cli = subprocess.run([sys.executable, "-m", "paraplan", *REPORTS[name], "--html", str(html_path)],
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if cli.returncode != 0 or not html_path.is_file():
        return [f"{name}: paraplan exited {cli.returncode}: {cli.stderr.strip()[-500:]}"]
    text = html_path.read_text(encoding="utf-8")
    charts = text.count("<svg")
    print(f"{name}: {html_path} ({len(text.encode()) / 1024:.0f} KiB, {charts} charts)")
    if charts == 0:
        problems.append(f"{name}: the report holds no chart")
    for pattern in ("http://", "https://", "<script", " src="):
        if pattern in text:
            problems.append(f"{name}: the report is not self-contained: it holds '{pattern}'")
    dom = run_browser(chromium, html_path, work / f"profile-{name}-dom", "--dump-dom")
    if dom.returncode != 0:
        problems.append(f"{name}: chromium --dump-dom exited {dom.returncode}: {dom.stderr.strip()[-500:]}")
    problems += [f"{name}: console: {line}" for line in console_lines(dom.stderr)]
    if dom.stdout.count("<svg") != charts:
        problems.append(f"{name}: the browser's DOM holds {dom.stdout.count('<svg')} <svg>, the file {charts}")
    png = out / f"report_{name}.png"
    shot = run_browser(chromium, html_path, work / f"profile-{name}-shot", f"--screenshot={png}",
                       f"--window-size={WIDTH},{HEIGHT}")  # fmt: skip
    if shot.returncode != 0 or not png.is_file():
        return [*problems, f"{name}: chromium --screenshot exited {shot.returncode}: {shot.stderr.strip()[-500:]}"]
    problems += [f"{name}: console: {line}" for line in console_lines(shot.stderr)]
    coloured = crop_and_measure(png)
    print(f"{name}: screenshot {png} ({png.stat().st_size / 1024:.0f} KiB, {coloured:.1%} coloured pixels)")
    if coloured < 0.01:
        problems.append(f"{name}: the screenshot shows no chart ({coloured:.2%} coloured pixels)")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chromium", help="the browser binary (default: $CHROMIUM, then chromium on PATH)")
    parser.add_argument("--out", type=Path, help="folder for the reports and screenshots (default: a temporary one)")
    parser.add_argument("--save-examples", action="store_true", help="copy them into examples/ as well")
    args = parser.parse_args()
    chromium = browser(args.chromium)
    if chromium is None:
        print("browser check: no Chromium found (apt-get install -y chromium, or give --chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="paraplan-browser-") as tmp:
        work = Path(tmp)
        out = args.out or work
        out.mkdir(parents=True, exist_ok=True)
        probe = work / "self-test.html"
        probe.write_text(SELF_TEST, encoding="utf-8")
        if not any("paraplan-self-test" in line for line in console_lines(
                run_browser(chromium, probe, work / "profile-self-test", "--dump-dom").stderr)):  # fmt: skip
            print("browser check: the browser's console log cannot be read; the check would be blind", file=sys.stderr)
            return 1
        problems = [p for name in REPORTS for p in check_report(name, chromium, out, work)]
        if args.save_examples and not problems:
            for name in REPORTS:
                shutil.copyfile(out / f"report_{name}.png", ROOT / "examples" / f"report_{name}.png")
            shutil.copyfile(out / "report_compare.html", ROOT / "examples" / "report_compare.html")
            print("browser check: examples/report_compare.png, report_optimize.png, report_compare.html updated")
    for problem in problems:
        print(f"browser check: {problem}", file=sys.stderr)
    print("browser check: " + ("FAILED" if problems else f"ok ({chromium})"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
