"""`dvc plots diff` with the plots that changed, offline: `python -m tools.plots_diff [REV ...]` (make plots-diff;
no revision: the workspace against HEAD; two: one against the other). `--fetch`: the Vega scripts alone, which
the project's page for a bare `dvc plots show` or `diff` (.dvc/plots/page.html) loads from .dvc/tmp/vega/.

It asks DVC for the revisions' plots (`dvc plots diff --json`), keeps those whose data differ between them (an
image's bytes, a Vega plot's points, a plot one revision lacks), lists the others by name, and renders the changed
ones alone into dvc_plots/index.html (`dvc plots diff` itself renders every one). The page carries the Vega scripts
inline, the versions DVC's own page loads from a CDN: fetched once from the npm registry into .dvc/tmp/vega/ and
checked against their SHA-256, so that the page renders with no network.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

VEGA = Path(".dvc") / "tmp" / "vega"
OUT = Path("dvc_plots")
DVC = [sys.executable, "-m", "dvc"]  # the environment's own DVC
REGISTRY = "https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
SCRIPTS = {  # package -> (version, its browser build, that file's SHA-256)
    "vega": ("5.20.2", "build/vega.min.js", "4794d0169cb1f3ebad8117fe98ba5bd652dd725905ec0384e832391dbccb03be"),
    "vega-lite": ("5.2.0", "build/vega-lite.min.js",
                  "d73157451b3978015ab31dacd55ff90d986ab8663fc0abed50f97b3cd90002cb"),
    "vega-embed": ("6.18.2", "build/vega-embed.min.js",
                   "1ba9826431ddc9805e815ad92acc811c819f2bfd32bda2a128b8c4b5070fab5e"),
}


def _script(name: str) -> str:
    """A package's browser build, from .dvc/tmp/vega/ or fetched into it; checked against its SHA-256."""
    version, member, sha256 = SCRIPTS[name]
    path = VEGA / f"{name}-{version}.min.js"
    if not path.is_file():
        with urllib.request.urlopen(REGISTRY.format(name=name, version=version), timeout=60) as answer:
            packed = answer.read()
        with tarfile.open(fileobj=io.BytesIO(packed)) as archive:
            content = archive.extractfile(f"package/{member}").read()
        VEGA.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    if hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        path.unlink()
        raise OSError(f"{name} {version} is not the build it should be (SHA-256)")
    return path.read_text()


def page() -> Path:
    """DVC's HTML template with the Vega scripts inline: a page that needs no network."""
    template = VEGA / "page.html"
    scripts = "".join(f"<script>{_script(name)}</script>\n" for name in SCRIPTS)
    VEGA.mkdir(parents=True, exist_ok=True)
    template.write_text(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>DVC plots</title>\n{scripts}"
                        "</head>\n<body>\n{plot_divs}\n</body></html>\n")
    return template


def changed(listing: dict[str, list[dict[str, Any]]], revisions: list[str]) -> list[str]:
    """The plots of `dvc plots diff --json`'s data whose content differs between `revisions`, or that one lacks."""
    found = []
    for plot, renderers in listing.items():
        content: dict[str, Any] = defaultdict(list)
        for renderer in renderers:
            if renderer["type"] == "image":
                content[renderer["revisions"][0]] = Path(renderer["url"]).read_bytes()
            else:
                for point in renderer["content"]["data"]["values"]:
                    content[point["rev"]].append({key: value for key, value in point.items() if key != "rev"})
        if set(content) != set(revisions) or len({json.dumps(value, sort_keys=True, default=str)
                                                   for value in content.values()}) > 1:
            found.append(plot)
    return found


def main(argv: list[str] | None = None) -> int:
    revisions = (sys.argv[1:] if argv is None else list(argv)) or ["HEAD"]
    if revisions == ["--fetch"]:  # the scripts alone (make install), for .dvc/plots/page.html
        try:
            page()
        except OSError as error:
            print(f"plots_diff: the Vega scripts could not be fetched ({error}): DVC's pages load them from its CDN",
                  file=sys.stderr)
        return 0
    shown = ["workspace", *revisions] if len(revisions) == 1 else revisions  # DVC's own reading of its revisions
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([*DVC, "plots", "diff", "--json", "-o", scratch, *revisions], capture_output=True,
                              text=True)
        if done.returncode:
            print(f"plots_diff: {(done.stderr.strip().splitlines() or ['dvc plots diff failed'])[-1]}",
                  file=sys.stderr)
            return 2
        result = json.loads(done.stdout)
        moved = changed(result["data"], shown)
    same = [plot for plot in result["data"] if plot not in moved]
    print(f"plots_diff: {len(moved)} plots changed between {' and '.join(shown)}: {', '.join(moved) or 'none'}")
    print(f"plots_diff: {len(same)} the same, not drawn: {', '.join(same) or 'none'}")
    if result.get("errors"):
        print(f"plots_diff: DVC could not read {len(result['errors'])} plots of a revision (outputs not in the cache: "
              "`dvc fetch` them); those count as changed", file=sys.stderr)
    if not moved:
        return 0
    try:
        template = page()
    except OSError as error:
        print(f"plots_diff: the Vega scripts could not be fetched ({error}): the page loads them from a CDN",
              file=sys.stderr)
        template = None
    command = [*DVC, "plots", "diff", *revisions, "-o", str(OUT), "--targets", *moved,
               *(["--html-template", str(template)] if template else [])]
    if subprocess.run(command, stdout=subprocess.DEVNULL).returncode:
        return 2
    print(f"plots_diff: {OUT / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
