"""Speed check: a 2,000-node graph laid out and drawn by the built view in headless chromium.

Usage (after `jlpm build`): python labextension/harness/measure_layout.py [--nodes 2000] [--limit 3.0]
Serves the repository root on a local port, opens harness/perf.html, prints the timings,
and exits non-zero when drawing the large graph takes longer than --limit seconds.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the output to the measurement
        pass


def measure(nodes: int, single: bool, workers: bool = True) -> dict:
    if not (REPO / "explorer" / "static" / "widget.js").is_file():
        sys.exit("explorer/static/widget.js is missing: run `jlpm build` in labextension/ first")
    handler = functools.partial(QuietHandler, directory=str(REPO))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            url = f"http://127.0.0.1:{server.server_address[1]}/labextension/harness/perf.html?nodes={nodes}&single={int(single)}&workers={int(workers)}"
            page.goto(url)
            page.wait_for_function("window.__result !== undefined", timeout=120_000)
            result = page.evaluate("window.__result")
            browser.close()
    finally:
        server.shutdown()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--limit", type=float, default=3.0, help="seconds allowed for the large graph")
    parser.add_argument("--no-workers", action="store_true", help="lay out on the page (no Web Workers)")
    parser.add_argument("--both", action="store_true",
                        help="also draw the fused after graph (about half the size) in the other pane")
    args = parser.parse_args()
    result = measure(args.nodes, single=not args.both, workers=not args.no_workers)
    print(json.dumps(result, indent=1))
    if "error" in result:
        sys.exit(1)
    seconds = result["bothMs"] / 1000
    drawn = f"{result['beforeNodes']}-node graph" + (f" + {result['afterNodes']}-node after graph" if args.both else "")
    print(f"{drawn} laid out and drawn in {seconds:.2f} s (wasm warm-up {result['warmupMs'] / 1000:.2f} s, not included)")
    if seconds > args.limit:
        sys.exit(f"too slow: {seconds:.2f} s > {args.limit} s")


if __name__ == "__main__":
    main()
