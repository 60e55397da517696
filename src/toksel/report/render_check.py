"""Open an HTML report in headless Chromium and count the images that did not load.

    python -m toksel.report.render_check results/report/report.html [--screenshot page.png]

The page is copied with a small script that, once the page has loaded, writes the number of images and of
broken ones (not complete, or no natural width) onto <body>; Chromium's --dump-dom prints the DOM after
that. Exit code 0: every image loaded; 1: some did not, or the page did not finish loading; 2: no Chromium
or no such file (one line saying which).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toksel.runtime.errors import ToksError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
PROBE = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const broken = images.filter((image) => !(image.complete && image.naturalWidth > 0));
  document.body.setAttribute("data-images", String(images.length));
  document.body.setAttribute("data-broken", String(broken.length));
  document.body.setAttribute("data-tokens", String(document.querySelectorAll(".reading .token").length));
});
</script>"""


def find_chromium() -> str:
    """$TOKSEL_CHROMIUM, else the first of BROWSERS on PATH."""
    if os.environ.get("TOKSEL_CHROMIUM"):
        return os.environ["TOKSEL_CHROMIUM"]
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    raise ToksError("no Chromium found: install it (Debian: apt-get install chromium; or `make chromium`) or set "
                    "TOKSEL_CHROMIUM to the browser's path")


def headless(browser: str, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start.
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--virtual-time-budget=15000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


@dataclass(frozen=True)
class Rendering:
    images_in_source: int  # <img> tags in the HTML
    images_loaded: int  # what Chromium found in the DOM after loading
    broken: int  # of those, the ones without image data
    tokens: int = 0  # tokens of the reviews the readings section shades, as rendered

    @property
    def ok(self) -> bool:
        return self.broken == 0 and self.images_loaded == self.images_in_source


def render(page: Path, screenshot: Path | None = None) -> Rendering:
    """Load `page` in headless Chromium; optionally save a full-width screenshot of it."""
    if not page.is_file():
        raise ToksError(f"{page} not found: build it first (dvc repro report)")
    source = page.read_text(encoding="utf-8")
    if "</body>" not in source:
        raise ToksError(f"{page} has no </body>: not an HTML page")
    browser = find_chromium()  # after the page's own checks: what is wrong with it is said on any machine
    images_in_source = len(re.findall(r"<img\b", source, flags=re.IGNORECASE))
    with tempfile.TemporaryDirectory() as folder:
        # In a folder of its own: a self-contained page needs nothing beside it, so a relative link breaks.
        probed = Path(folder) / page.name
        probed.write_text(source.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        done = headless(browser, "--dump-dom", probed.resolve().as_uri())
    match = re.search(r'data-images="(\d+)" data-broken="(\d+)"', done.stdout)
    if done.returncode != 0 or match is None:
        lines = (done.stderr or "no output").strip().splitlines()
        raise RuntimeError(f"Chromium did not finish loading {page} (exit {done.returncode}): "
                           f"{lines[-1] if lines else ''}")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        headless(browser, f"--screenshot={screenshot.resolve()}", "--window-size=1280,4000", page.resolve().as_uri())
    tokens = re.search(r'data-tokens="(\d+)"', done.stdout)
    return Rendering(images_in_source, int(match.group(1)), int(match.group(2)), int(tokens.group(1)) if tokens else 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toksel.report.render_check", description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the HTML file, e.g. results/report/report.html")
    parser.add_argument("--screenshot", type=Path, help="also save a screenshot of the page here (PNG)")
    args = parser.parse_args(argv)
    try:
        rendering = render(args.page, args.screenshot)
    except ToksError as error:
        print(f"render_check: {error}", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"render_check: {error}", file=sys.stderr)
        return 1
    print(f"render_check: {args.page}: {rendering.images_loaded} of {rendering.images_in_source} images in the page, "
          f"{rendering.broken} broken, {rendering.tokens} review tokens shaded: {'ok' if rendering.ok else 'FAILED'}")
    return 0 if rendering.ok else 1


if __name__ == "__main__":
    sys.exit(main())
